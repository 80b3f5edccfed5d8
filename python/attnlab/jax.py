"""attnlab's JAX op: `attnlab.jax.dot_product_attention`, in place of jax.nn.dot_product_attention.

    from attnlab.jax import dot_product_attention
    out = jax.jit(dot_product_attention, static_argnames="is_causal")(q, k, v, is_causal=True)
    grads = jax.grad(lambda q, k, v: dot_product_attention(q, k, v).sum(), argnums=(0, 1, 2))(q, k, v)

The call is an XLA FFI custom call (python/src/jax_ffi.cpp) on XLA's CPU or CUDA platform: it runs on XLA's stream
with scratch from XLA's allocator, under jit, and jax.grad goes through a custom VJP on attnlab's backward. It
keeps jax.nn.dot_product_attention's signature and options: scale, bias, boolean mask, is_causal, per-batch
sequence lengths, local_window_size. The bias takes no gradient: differentiating through it raises.
"""
from __future__ import annotations

import functools
import math
from typing import Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from . import _attnlab, _window

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


def _attributes(config, extras):
    scale, causal, left, right, path = config
    bits = sum(1 << i for i, x in enumerate(extras) if x is not None)
    return dict(scale=np.float32(scale), causal=bool(causal), window_left=np.int64(left),
                window_right=np.int64(right), path=path, extras=np.int64(bits))


def _present(extras):
    return [x for x in extras if x is not None]


def _forward_call(q, k, v, extras, config):
    _register()
    b, t, n, _ = q.shape
    out_types = (jax.ShapeDtypeStruct((b, t, n, v.shape[3]), q.dtype), jax.ShapeDtypeStruct((b, n, t), jnp.float32))
    return jax.ffi.ffi_call("attnlab_forward", out_types, vmap_method="sequential")(
        q, k, v, *_present(extras), **_attributes(config, extras))


# extras = (bias, mask, query lengths, key/value lengths), each an array or None. The bias takes no gradient
# (attnlab's backward computes none): differentiating through it raises instead of returning a wrong zero, which
# symbolic_zeros lets the forward rule see (an input nobody differentiates arrives unperturbed).
@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _attention(q, k, v, extras, config):
    return _forward_call(q, k, v, extras, config)[0]


def _attention_fwd(q, k, v, extras, config):
    bias = extras[0]
    if bias is not None and bias.perturbed:
        raise Error("attnlab.jax.dot_product_attention: the bias takes no gradient (attnlab's backward computes "
                    "none); wrap it in jax.lax.stop_gradient")
    values = tuple(None if x is None else x.value for x in extras)
    out, lse = _forward_call(q.value, k.value, v.value, values, config)
    return out, (q.value, k.value, v.value, values, out, lse)


def _attention_bwd(config, residuals, d_out):
    q, k, v, extras, out, lse = residuals
    out_types = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v))
    dq, dk, dv = jax.ffi.ffi_call("attnlab_backward", out_types, vmap_method="sequential")(
        q, k, v, out, d_out.astype(out.dtype), lse, *_present(extras), **_attributes(config, extras))
    return dq, dk, dv, tuple(None for _ in extras)


_attention.defvjp(_attention_fwd, _attention_bwd, symbolic_zeros=True)


def _rank4(x, name):
    if x is None:
        return None
    x = jnp.asarray(x)
    if not 2 <= x.ndim <= 4:
        raise Error(f"{name} must have 2 to 4 dimensions, broadcastable to (B, N, T, S); it has {x.ndim}")
    return x.reshape((1,) * (4 - x.ndim) + x.shape)


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale: Optional[float] = None,
                          is_causal: bool = False, query_seq_lengths=None, key_value_seq_lengths=None,
                          local_window_size: Union[None, int, Sequence[int]] = None,
                          implementation: Optional[str] = None):
    """jax.nn.dot_product_attention through attnlab: (B, T, N, H) query (or (T, N, H)), (B, S, K, H) key and value
    with N % K == 0. `implementation` names an attnlab path (attnlab.paths()); None lets the library choose. The
    gradient runs on the same path: through one without a backward (flash) jax.grad fails, naming the rule."""
    unbatched = query.ndim == 3
    if unbatched:
        query, key, value = query[None], key[None], value[None]
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise Error("query, key and value must be (B, T, N, H), (B, S, K, H), (B, S, K, H) (or all without B)")
    left, right = _window(local_window_size)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    config = (scale, bool(is_causal), left, right, implementation or "auto")
    lengths = [None if x is None else jnp.asarray(x, jnp.int32) for x in (query_seq_lengths, key_value_seq_lengths)]
    extras = (_rank4(bias, "bias"), None if mask is None else _rank4(mask, "mask").astype(jnp.bool_), *lengths)
    out = _attention(query, key, value, extras, config)
    return out[0] if unbatched else out
