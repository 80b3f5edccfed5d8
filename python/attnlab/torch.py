"""attnlab's PyTorch op: `attnlab.torch.scaled_dot_product_attention`, in place of
torch.nn.functional.scaled_dot_product_attention, and `attnlab.torch.dot_product_attention` in JAX's layout.

    from attnlab.torch import scaled_dot_product_attention
    out = scaled_dot_product_attention(q, k, v, is_causal=True)      # (B, N, T, H) like torch's SDPA
    out.sum().backward()                                              # attnlab's backward

Both are the torch.library custom ops attnlab::forward / attnlab::backward (CPU and CUDA) with fake (meta)
implementations, so they trace under torch.compile, and autograd through attnlab's backward. They run on the current
CUDA stream, with their scratch from PyTorch's caching allocator (the library allocates no device memory). Tensors
are read in place whatever their strides: torch's (B, N, T, H) is passed as a (B, T, N, H) view, no copy. The
backward runs on the forward's path: through one without a backward (flash) it fails, naming the rule.
"""
# No `from __future__ import annotations` here: torch.library.custom_op reads the schema from real annotations.
import math
from typing import Optional, Sequence, Tuple, Union

import torch

from . import _attnlab, _window

Error = _attnlab.Error


# What a call costs on the host is mostly Python: these three helpers take the C entry points where torch has them.
# torch.Tensor.__dlpack__ is a Python method (checks, stream handling) that nanobind would call per array; a DLPack
# capsule from torch._C._to_dlpack is the same view made in C. The current stream likewise comes as a raw handle
# instead of through a torch.cuda.Stream object. (bench/python_overhead.py measures both.)
_to_dlpack = getattr(torch._C, "_to_dlpack", None) or (lambda t: t)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _view(t: Optional[torch.Tensor]):
    return None if t is None else _to_dlpack(t)


def _stream(t: torch.Tensor) -> int:
    if not t.is_cuda:
        return 0
    if _raw_stream is not None:
        return _raw_stream(t.device.index)
    return torch.cuda.current_stream(t.device).cuda_stream


def _workspace(like: torch.Tensor):
    """CPU paths take no device workspace; a CUDA call gets its bytes from PyTorch's caching allocator (ordered on
    the current stream), asked by the library only when the call needs any."""
    if not like.is_cuda:
        return None
    device = like.device
    return lambda nbytes: _to_dlpack(torch.empty(nbytes, dtype=torch.uint8, device=device))


@torch.library.custom_op("attnlab::forward", mutates_args=())
def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool, window_left: int,
             window_right: int, path: str) -> Tuple[torch.Tensor, torch.Tensor]:
    b, t, n, _ = q.shape
    out = torch.empty((b, t, n, v.shape[3]), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, n, t), dtype=torch.float32, device=q.device)
    _attnlab.forward(_view(q), _view(k), _view(v), _view(out), _view(lse), scale, causal, False, window_left,
                     window_right, None, None, None, None, path, _stream(q), _workspace(q))
    return out, lse


@_forward.register_fake
def _(q, k, v, scale, causal, window_left, window_right, path):
    b, t, n, _ = q.shape
    return q.new_empty((b, t, n, v.shape[3])), q.new_empty((b, n, t), dtype=torch.float32)


@torch.library.custom_op("attnlab::backward", mutates_args=())
def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, d_out: torch.Tensor,
              lse: torch.Tensor, scale: float, causal: bool, window_left: int, window_right: int,
              path: str) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _attnlab.backward(*(_view(t) for t in (q, k, v, out, d_out, lse, dq, dk, dv)), scale, causal, False, window_left,
                      window_right, None, None, None, None, path, _stream(q), _workspace(q))
    return dq, dk, dv


@_backward.register_fake
def _(q, k, v, out, d_out, lse, scale, causal, window_left, window_right, path):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, *config = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.config = config


def _vjp(ctx, d_out, d_lse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = _backward(q, k, v, out, d_out.to(out.dtype), lse, *ctx.config)
    return dq, dk, dv, None, None, None, None, None


_forward.register_autograd(_vjp, setup_context=_setup_context)


def dot_product_attention(query, key, value, *, scale: Optional[float] = None, is_causal: bool = False,
                          local_window_size: Union[None, int, Sequence[int]] = None,
                          implementation: Optional[str] = None) -> torch.Tensor:
    """(B, T, N, H) query, (B, S, K, H) key and value (N % K == 0), as jax.nn.dot_product_attention lays them out;
    differentiable. `implementation` names an attnlab path; None lets the library choose."""
    left, right = _window(local_window_size)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    return _forward(query, key, value, scale, bool(is_causal), left, right, implementation or "auto")[0]


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: Optional[float] = None, enable_gqa: bool = False, *,
                                 implementation: Optional[str] = None) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention's signature and (B, N, T, H) layout. attn_mask and dropout
    are not taken (a rule, raised as attnlab.Error); GQA runs whenever the key/value heads divide the query heads."""
    if attn_mask is not None or dropout_p != 0.0:
        raise Error("attnlab.torch.scaled_dot_product_attention takes no attn_mask or dropout yet (is_causal, "
                    "scale and GQA only)")
    if query.dim() != 4:
        raise Error("query, key and value must be (B, N, T, H) (torch's layout)")
    out = dot_product_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), scale=scale,
                                is_causal=is_causal, implementation=implementation)
    return out.transpose(1, 2)
