// Device-side element types for attnlab's DTypes, and float conversions usable in kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attnlab/attention.h"

namespace attnlab::cuda {

template <class T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Reads element `offset` of a buffer whose dtype is only known at run time (f32/f16/bf16).
__device__ __forceinline__ float load_as_float(const void* base, DType dtype, long long offset) {
  switch (dtype) {
    case DType::f16: return __half2float(static_cast<const __half*>(base)[offset]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[offset]);
    default: return static_cast<const float*>(base)[offset];
  }
}

// Calls fn(T{}) with T the device type of a floating DType (f32, f16, bf16).
template <class Fn>
void dispatch_float_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f16: fn(__half{}); break;
    case DType::bf16: fn(__nv_bfloat16{}); break;
    default: fn(float{}); break;
  }
}

}  // namespace attnlab::cuda
