"""The array libraries the package allocates outputs with: NumPy, PyTorch, CuPy. Each kind knows how to make an
empty array like a given one (same library, device; its dtype or float32), a reshaped view, int32 lengths and a bool mask the library
reads as bytes, the CUDA stream its library is ordering work on (the call runs there), and the cheapest object
the extension can read an array through (`view`: the array itself, or a DLPack capsule made in C for torch, whose
__dlpack__ is a Python method)."""
from __future__ import annotations

import sys


def _same(x):
    return x


class _NumPy:
    name = "numpy"
    view = staticmethod(_same)

    @staticmethod
    def empty(shape, like, float32=False):
        import numpy as np
        return np.empty(shape, dtype=np.float32 if float32 else like.dtype)

    @staticmethod
    def reshape(x, shape):
        return x.reshape(shape)

    @staticmethod
    def int32(x, like):
        import numpy as np
        return None if x is None else np.ascontiguousarray(np.asarray(x), dtype=np.int32)

    @staticmethod
    def mask(x):
        import numpy as np
        return None if x is None else np.asarray(x, dtype=np.bool_)

    @staticmethod
    def stream(x):
        return 0


def _torch_view(x):
    import torch
    return None if x is None else torch._C._to_dlpack(x)


class _Torch:
    name = "torch"
    view = staticmethod(_torch_view)

    @staticmethod
    def empty(shape, like, float32=False):
        import torch
        return torch.empty(shape, dtype=torch.float32 if float32 else like.dtype, device=like.device)

    @staticmethod
    def reshape(x, shape):
        return x.reshape(shape)

    @staticmethod
    def int32(x, like):
        import torch
        return None if x is None else torch.as_tensor(x, dtype=torch.int32, device=like.device).contiguous()

    @staticmethod
    def mask(x):
        import torch
        return None if x is None else x.to(torch.bool)

    @staticmethod
    def stream(x):
        import torch
        if not x.is_cuda:
            return 0
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        return raw(x.device.index) if raw is not None else torch.cuda.current_stream(x.device).cuda_stream


class _CuPy:
    name = "cupy"
    view = staticmethod(_same)

    @staticmethod
    def empty(shape, like, float32=False):
        import cupy
        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=cupy.float32 if float32 else like.dtype)

    @staticmethod
    def reshape(x, shape):
        return x.reshape(shape)

    @staticmethod
    def int32(x, like):
        import cupy
        return None if x is None else cupy.ascontiguousarray(cupy.asarray(x), dtype=cupy.int32)

    @staticmethod
    def mask(x):
        import cupy
        return None if x is None else cupy.asarray(x, dtype=cupy.bool_)

    @staticmethod
    def stream(x):
        import cupy
        return cupy.cuda.get_current_stream().ptr


def array_kind(x):
    """The kind of `x`, by its library's module (no import of a library the caller does not use)."""
    module = type(x).__module__.split(".")[0]
    if module == "numpy":
        return _NumPy
    if module == "torch" and "torch" in sys.modules:
        return _Torch
    if module == "cupy":
        return _CuPy
    from . import _attnlab
    if module in ("jax", "jaxlib"):
        raise _attnlab.Error("JAX arrays need attnlab's JAX op (an XLA FFI custom call), which this package does not "
                             "have yet; pass NumPy, PyTorch or CuPy arrays")
    raise _attnlab.Error(f"arrays of type {type(x).__module__}.{type(x).__name__} are not supported here; pass "
                         "NumPy, PyTorch or CuPy arrays")
