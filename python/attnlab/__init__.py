"""attnlab: scaled dot-product attention in C++/CUDA, from Python.

    import attnlab
    attnlab.paths()                                   # what this build has and whether each path runs here
    out = attnlab.dot_product_attention(q, k, v, is_causal=True)

For inference engines, varlen_attention, paged_attention and append_kv (packed variable-length batches and paged KV
caches in FlashAttention's conventions) are in attnlab.serving and here.

`dot_product_attention` has jax.nn.dot_product_attention's signature and semantics: (B, T, N, H) query, (B, S, K, H)
key and value with N % K == 0 (GQA/MQA), an optional bias and boolean mask broadcast to (B, N, T, S), causal masking
from the top-left diagonal, per-batch sequence lengths and a (left, right) local window. It takes any DLPack array
the package knows how to allocate for (NumPy, PyTorch, CuPy; CPU or CUDA), reads it in place whatever its strides,
and returns the same kind on the same device. `implementation` names an attnlab path (attnlab.paths()); None lets
the library choose. Errors raise attnlab.Error with the library's message, which names the rule that failed.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

from . import _attnlab
from ._arrays import array_kind

Error = _attnlab.Error
__version__ = _attnlab.__version__

__all__ = ["Error", "append_kv", "dot_product_attention", "paged_attention", "paths", "varlen_attention",
           "__version__"]


def paths() -> list:
    """Every path of this build, as dicts: name, device, available (can it run on this machine), unavailable (why
    not), summary (what it is and supports)."""
    return _attnlab.paths()


def _window(local_window_size: Union[None, int, Sequence[int]]) -> Tuple[int, int]:
    if local_window_size is None:
        return -1, -1
    if isinstance(local_window_size, int):
        left = right = local_window_size
    else:
        left, right = local_window_size
    if left < 0 or right < 0:
        raise Error(f"local_window_size = {local_window_size}: both sides must be non-negative")
    return int(left), int(right)


def _rank4(x: Any, name: str, kind) -> Any:
    """A bias or mask as a rank-4 view (B|1, N|1, T, S): jax.nn.dot_product_attention lets them have fewer leading
    dimensions."""
    if x is None:
        return None
    if x.ndim > 4 or x.ndim < 2:
        raise Error(f"{name} must have 2 to 4 dimensions, broadcastable to (B, N, T, S); it has {x.ndim}")
    return kind.reshape(x, (1,) * (4 - x.ndim) + tuple(x.shape))


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale: Optional[float] = None,
                          is_causal: bool = False, query_seq_lengths=None, key_value_seq_lengths=None,
                          local_window_size: Union[None, int, Sequence[int]] = None,
                          implementation: Optional[str] = None):
    """softmax(scale · Q Kᵀ + bias, masked) V, per jax.nn.dot_product_attention. Returns an array of the query's
    kind, dtype and device, shape (B, T, N, H_v) (or (T, N, H_v) for rank-3 inputs)."""
    kind = array_kind(query)
    unbatched = query.ndim == 3
    if unbatched:
        query, key, value = (kind.reshape(x, (1,) + tuple(x.shape)) for x in (query, key, value))
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise Error("query, key and value must be (B, T, N, H), (B, S, K, H), (B, S, K, H) (or all without B)")
    left, right = _window(local_window_size)  # with is_causal the library clamps the right side to 0
    b, t, n, _ = query.shape
    out = kind.empty((b, t, n, value.shape[3]), query)
    path = implementation or "auto"
    view = kind.view
    _attnlab.forward(view(query), view(key), view(value), view(out), None, None if scale is None else float(scale),
                     bool(is_causal), False, left, right, view(kind.int32(query_seq_lengths, query)),
                     view(kind.int32(key_value_seq_lengths, query)), view(_rank4(bias, "bias", kind)),
                     view(kind.mask(_rank4(mask, "mask", kind))), path, kind.stream(query))
    return kind.reshape(out, tuple(out.shape[1:])) if unbatched else out


# The serving calls (serving.py): imported last, as they take _window from this module.
from .serving import append_kv, paged_attention, varlen_attention  # noqa: E402
