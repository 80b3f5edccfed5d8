"""attnlab's JAX op: `attnlab.jax.dot_product_attention`, in place of jax.nn.dot_product_attention.

    from attnlab.jax import dot_product_attention
    out = jax.jit(dot_product_attention, static_argnames="is_causal")(q, k, v, is_causal=True)
    grads = jax.grad(lambda q, k, v: dot_product_attention(q, k, v).sum(), argnums=(0, 1, 2))(q, k, v)

The call is an XLA FFI custom call (python/src/jax_ffi.cpp) on XLA's CPU or CUDA platform: it runs on XLA's stream
with scratch from XLA's allocator, under jit, and jax.grad goes through a custom VJP on attnlab's backward. It
keeps jax.nn.dot_product_attention's signature; of its options this op takes scale, is_causal and
local_window_size so far, and refuses bias, mask and sequence lengths with that rule.
"""
from __future__ import annotations

import functools
import math
from typing import Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from . import _attnlab

Error = _attnlab.Error


@functools.lru_cache(maxsize=None)
def _register() -> bool:
    handlers = _attnlab.jax_handlers()
    if not handlers:
        raise Error("this attnlab was built without jaxlib's FFI headers, so it has no JAX op (reinstall it with "
                    "jax installed: pip install .)")
    for target, platform, capsule in handlers:
        jax.ffi.register_ffi_target(target, capsule, platform=platform)
    return True


def _attributes(config):
    scale, causal, left, right, path = config
    return dict(scale=np.float32(scale), causal=bool(causal), window_left=np.int64(left),
                window_right=np.int64(right), path=path)


def _forward_call(q, k, v, config):
    _register()
    b, t, n, _ = q.shape
    out_types = (jax.ShapeDtypeStruct((b, t, n, v.shape[3]), q.dtype), jax.ShapeDtypeStruct((b, n, t), jnp.float32))
    return jax.ffi.ffi_call("attnlab_forward", out_types, vmap_method="sequential")(q, k, v, **_attributes(config))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _attention(q, k, v, config):
    return _forward_call(q, k, v, config)[0]


def _attention_fwd(q, k, v, config):
    out, lse = _forward_call(q, k, v, config)
    return out, (q, k, v, out, lse)


def _attention_bwd(config, residuals, d_out):
    q, k, v, out, lse = residuals
    out_types = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v))
    dq, dk, dv = jax.ffi.ffi_call("attnlab_backward", out_types, vmap_method="sequential")(
        q, k, v, out, d_out.astype(out.dtype), lse, **_attributes(config))
    return dq, dk, dv


_attention.defvjp(_attention_fwd, _attention_bwd)


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale: Optional[float] = None,
                          is_causal: bool = False, query_seq_lengths=None, key_value_seq_lengths=None,
                          local_window_size: Union[None, int, Sequence[int]] = None,
                          implementation: Optional[str] = None):
    """jax.nn.dot_product_attention through attnlab: (B, T, N, H) query (or (T, N, H)), (B, S, K, H) key and value
    with N % K == 0. `implementation` names an attnlab path (attnlab.paths()); None lets the library choose."""
    if bias is not None or mask is not None or query_seq_lengths is not None or key_value_seq_lengths is not None:
        raise Error("attnlab.jax.dot_product_attention takes no bias, mask or sequence lengths yet (scale, "
                    "is_causal and local_window_size only); attnlab.dot_product_attention takes them on NumPy, "
                    "PyTorch and CuPy arrays")
    unbatched = query.ndim == 3
    if unbatched:
        query, key, value = query[None], key[None], value[None]
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise Error("query, key and value must be (B, T, N, H), (B, S, K, H), (B, S, K, H) (or all without B)")
    if local_window_size is None:
        left = right = -1
    elif isinstance(local_window_size, int):
        left = right = int(local_window_size)
    else:
        left, right = (int(x) for x in local_window_size)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    config = (scale, bool(is_causal), left, right, implementation or "auto")
    out = _attention(query, key, value, config)
    return out[0] if unbatched else out
