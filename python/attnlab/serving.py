"""attnlab for inference engines, from Python: packed variable-length batches, paged KV caches and the append that
fills them, in the conventions of FlashAttention's flash_attn_varlen_func and flash_attn_with_kvcache
(include/attnlab/serving.h and docs/serving.md have the semantics).

    out = attnlab.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal=True)
    attnlab.append_kv(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table=table)   # in place
    out = attnlab.paged_attention(q, k_cache, v_cache, table, cache_seqlens + 1, cu_seqlens_q, 1)

A batch of B sequences is packed end to end: query (total_q, N, Hqk), key and value (total_k, K, H) with N % K == 0,
sequence b's rows being cu_seqlens[b] … cu_seqlens[b + 1] − 1 (int32, B + 1 entries, starting at 0). A paged
cache is k_cache / v_cache (pages, page_size, K, H), block_table (B, pages per sequence) int32 listing each
sequence's pages in order, cache_seqlens (B) int32 its keys. Each sequence is attended to on its own. A causal
mask is measured from the bottom-right by default (FlashAttention's convention for these calls: the last query
sees every key); `causal_align="top_left"` measures it from the first key instead. Arrays are read in place
(NumPy, PyTorch or CuPy, CPU or CUDA); outputs are allocated with the query's library on its device; GPU work runs
on that library's current stream, and no call waits for the GPU. Errors raise attnlab.Error naming the rule.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

from . import _attnlab, _window
from ._arrays import array_kind

Error = _attnlab.Error

__all__ = ["varlen_attention", "paged_attention", "append_kv"]


def _bottom_right(causal_align: str) -> bool:
    if causal_align not in ("bottom_right", "top_left"):
        raise Error(f"causal_align = {causal_align!r}: 'bottom_right' or 'top_left'")
    return causal_align == "bottom_right"


def _attend(query, *, cu_seqlens_q, max_seqlen_q, max_seqlen_k, key=None, value=None, cu_seqlens_k=None,
            k_cache=None, v_cache=None, block_table=None, cache_seqlens=None, scale, is_causal, causal_align,
            local_window_size, softcap, sinks, return_lse, implementation, workspace):
    kind = array_kind(query)
    if query.ndim != 3:
        raise Error("query must be packed: (total_q, N, Hqk)")
    values = value if value is not None else v_cache
    total_q, n = int(query.shape[0]), int(query.shape[1])
    out = kind.empty((total_q, n, int(values.shape[-1])), query)
    lse = kind.empty((n, total_q), query, float32=True) if return_lse else None
    left, right = _window(local_window_size)
    view = kind.view
    as_int32 = lambda x: view(kind.int32(x, query))
    _attnlab.varlen_forward(
        view(query), view(out), view(lse), as_int32(cu_seqlens_q), int(max_seqlen_q), view(key), view(value),
        as_int32(cu_seqlens_k), int(max_seqlen_k), view(k_cache), view(v_cache), as_int32(block_table),
        as_int32(cache_seqlens), view(sinks), None if scale is None else float(scale), float(softcap),
        bool(is_causal), _bottom_right(causal_align), left, right, implementation or "auto", kind.stream(query),
        workspace)
    return (out, lse) if return_lse else out


def varlen_attention(query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, *,
                     scale: Optional[float] = None, is_causal: bool = False, causal_align: str = "bottom_right",
                     local_window_size: Union[None, int, Sequence[int]] = None, softcap: float = 0.0, sinks=None,
                     return_lse: bool = False, implementation: Optional[str] = None, workspace=None):
    """Attention over a packed batch: query (total_q, N, Hqk), key and value (total_k, K, H), cu_seqlens_q and
    cu_seqlens_k (B + 1) int32; max_seqlen_q / max_seqlen_k bound every sequence's length (GPU kernels size their
    grids with them without reading the offsets). softcap > 0 caps scores as softcap · tanh(s / softcap); sinks,
    (N) float32, are gpt-oss's per-head logits that join every row's softmax. Returns out (total_q, N, Hv), and with
    return_lse also lse (N, total_q) float32 (natural log). `workspace`: as dot_product_attention's caller
    workspace (a uint8 array, or a callable nbytes → array)."""
    if key.ndim != 3 or value.ndim != 3:
        raise Error("key and value must be packed: (total_k, K, H)")
    return _attend(query, key=key, value=value, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                   max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, scale=scale, is_causal=is_causal,
                   causal_align=causal_align, local_window_size=local_window_size, softcap=softcap, sinks=sinks,
                   return_lse=return_lse, implementation=implementation, workspace=workspace)


def paged_attention(query, k_cache, v_cache, block_table, cache_seqlens, cu_seqlens_q, max_seqlen_q: int,
                    max_seqlen_k: Optional[int] = None, *, scale: Optional[float] = None, is_causal: bool = False,
                    causal_align: str = "bottom_right", local_window_size: Union[None, int, Sequence[int]] = None,
                    softcap: float = 0.0, sinks=None, return_lse: bool = False, implementation: Optional[str] = None,
                    workspace=None):
    """Attention of packed queries against a paged cache: k_cache and v_cache (pages, page_size, K, H),
    block_table (B, pages per sequence) int32, cache_seqlens (B) int32 keys per sequence. max_seqlen_k bounds every
    cache_seqlens entry; by default the table's capacity, pages per sequence · page_size (read from shapes, never
    from the device). Otherwise as varlen_attention."""
    if k_cache.ndim != 4 or v_cache.ndim != 4:
        raise Error("k_cache and v_cache must be (pages, page_size, K, H)")
    if max_seqlen_k is None:
        max_seqlen_k = int(block_table.shape[-1]) * int(k_cache.shape[1])
    return _attend(query, k_cache=k_cache, v_cache=v_cache, block_table=block_table, cache_seqlens=cache_seqlens,
                   cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, scale=scale,
                   is_causal=is_causal, causal_align=causal_align, local_window_size=local_window_size,
                   softcap=softcap, sinks=sinks, return_lse=return_lse, implementation=implementation,
                   workspace=workspace)


def append_kv(k_cache, v_cache, k_new, v_new, cache_seqlens, *, block_table=None, cu_seqlens_new=None) -> None:
    """Writes new tokens' keys and values into a cache, in place, at each sequence's current end (position
    cache_seqlens[b] + t); the caller then advances cache_seqlens, as FlashAttention's callers do. The cache is
    contiguous, (B, S_max, K, H), or paged (pages, page_size, K, H) with block_table. New rows are padded,
    (B, T_new, K, H), or packed, (total_new, K, H) with cu_seqlens_new (B + 1) int32. A sequence whose new rows
    would pass its cache's capacity is an error naming it, and nothing is written (host lengths; device lengths
    are the caller's to keep in range)."""
    kind = array_kind(k_cache)
    view = kind.view
    as_int32 = lambda x: view(kind.int32(x, k_cache))
    _attnlab.append_kv(view(k_new), view(v_new), as_int32(cu_seqlens_new), view(k_cache), view(v_cache),
                       as_int32(cache_seqlens), as_int32(block_table), kind.stream(k_cache))
