#include "cuda/fp8/convert_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/fp8.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"
#include "cuda/common/dtype.cuh"

namespace attnlab::cuda::fp8 {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // enough resident blocks to keep the loads in flight; more only adds atomics

// A validated view pair as four dimensions (missing leading ones of extent 1): element offsets of the linear index.
struct Indexing {
  long long numel = 0;
  long long shape[4] = {1, 1, 1, 1};
  long long in_strides[4] = {0, 0, 0, 0};
  long long out_strides[4] = {0, 0, 0, 0};
  bool dense = false;  // both views packed row-major: the linear index is the offset in both
};

__device__ __forceinline__ void offsets(const Indexing& ix, long long i, long long& in_off, long long& out_off) {
  if (ix.dense) {
    in_off = out_off = i;
    return;
  }
  const long long i3 = i % ix.shape[3];
  long long r = i / ix.shape[3];
  const long long i2 = r % ix.shape[2];
  r /= ix.shape[2];
  const long long i1 = r % ix.shape[1];
  const long long i0 = r / ix.shape[1];
  in_off = i0 * ix.in_strides[0] + i1 * ix.in_strides[1] + i2 * ix.in_strides[2] + i3 * ix.in_strides[3];
  out_off = i0 * ix.out_strides[0] + i1 * ix.out_strides[1] + i2 * ix.out_strides[2] + i3 * ix.out_strides[3];
}

core::Fp8Format format_of(DType dtype) { return dtype == DType::e5m2 ? core::Fp8Format::e5m2 : core::Fp8Format::e4m3; }

bool packed(const TensorView& t) {
  long long expected = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

Indexing indexing_of(const TensorView& in, const TensorView& out) {
  Indexing ix;
  ix.numel = in.numel();
  const int pad = 4 - in.rank;
  for (int d = 0; d < in.rank; ++d) {
    ix.shape[pad + d] = in.shape[d];
    ix.in_strides[pad + d] = in.strides[d];
    ix.out_strides[pad + d] = out.strides[d];
  }
  ix.dense = packed(in) && packed(out);
  return ix;
}

// Also the first question asked of the device: no usable GPU is Error(unsupported), a bad index invalid_argument.
int grid_for(long long numel, int device) {
  const long long wanted = (numel + kThreads - 1) / kThreads;
  const long long cap = std::max(1, device_properties(device).sm_count) * static_cast<long long>(kBlocksPerSm);
  return static_cast<int>(std::max(1LL, std::min(wanted, cap)));
}

// The block's max of `bits`, then one atomicMax per block. |x| as unsigned bits orders like the float for x ≥ 0,
// and every NaN (exponent all ones, mantissa not 0) lies above +inf, so a NaN anywhere makes the amax a NaN.
__device__ __forceinline__ void block_amax(unsigned bits, float* amax) {
  __shared__ unsigned warp_max[kThreads / 32];
  bits = __reduce_max_sync(0xffffffffu, bits);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_max[warp] = bits;
  __syncthreads();
  if (warp == 0) {
    bits = lane < kThreads / 32 ? warp_max[lane] : 0u;
    bits = __reduce_max_sync(0xffffffffu, bits);
    if (lane == 0) atomicMax(reinterpret_cast<unsigned*>(amax), bits);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const T* __restrict__ in, std::uint8_t* __restrict__ out,
                                                            const Indexing ix, core::Fp8Format format,
                                                            const float* __restrict__ scale_ptr, float* amax) {
  const float scale = *scale_ptr;
  unsigned bits = 0;
  const long long step = static_cast<long long>(gridDim.x) * kThreads;
  for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < ix.numel; i += step) {
    long long in_off, out_off;
    offsets(ix, i, in_off, out_off);
    const float x = to_float(in[in_off]);
    bits = max(bits, __float_as_uint(x) & 0x7fffffffu);
    // __fmul_rn: the one rounding the host loop makes, never contracted into anything else.
    out[out_off] = core::float_to_fp8(__fmul_rn(x, scale), format);
  }
  if (amax != nullptr) block_amax(bits, amax);  // amax is the same for every thread: no divergent barrier
}

// NaN as the host's conversions (core/numeric.h) write it, so that both devices write the same bytes: the CUDA
// intrinsics return a canonical NaN of their own.
template <class T>
__device__ __forceinline__ T store_value(float v);
template <>
__device__ __forceinline__ float store_value<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half store_value<__half>(float v) {
  if (isnan(v)) return __ushort_as_half(static_cast<unsigned short>(((__float_as_uint(v) >> 16) & 0x8000u) | 0x7e00u));
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 store_value<__nv_bfloat16>(float v) {
  if (isnan(v)) return __ushort_as_bfloat16(static_cast<unsigned short>((__float_as_uint(v) >> 16) | 0x40u));
  return __float2bfloat16_rn(v);
}

template <class T>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(const std::uint8_t* __restrict__ in, T* __restrict__ out,
                                                              const Indexing ix, core::Fp8Format format,
                                                              const float* __restrict__ scale_inv_ptr) {
  const float scale_inv = *scale_inv_ptr;
  const long long step = static_cast<long long>(gridDim.x) * kThreads;
  for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < ix.numel; i += step) {
    long long in_off, out_off;
    offsets(ix, i, in_off, out_off);
    const std::uint8_t code = in[in_off];
    float v = __fmul_rn(core::fp8_to_float(code, format), scale_inv);
    // A NaN's bits are the host loop's (the GPU's multiply returns a canonical NaN of its own): quiet, with the
    // code's sign.
    if (isnan(v)) v = __uint_as_float((static_cast<unsigned>(code & 0x80u) << 24) | 0x7fc00000u);
    out[out_off] = store_value<T>(v);
  }
}

}  // namespace

void quantize(const TensorView& in, const TensorView& out, const float* scale, float* amax, void* stream_handle) {
  const Indexing ix = indexing_of(in, out);
  const int grid = grid_for(ix.numel, in.device_index);
  DeviceGuard guard(in.device_index);
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  // The amax is overwritten, not accumulated (attention.h): cleared on the stream, then raised by the blocks.
  if (amax != nullptr) check_cuda(cudaMemsetAsync(amax, 0, sizeof(float), stream), "quantize: clear amax");
  if (ix.numel == 0) return;
  const core::Fp8Format format = format_of(out.dtype);
  auto* out_bytes = static_cast<std::uint8_t*>(out.data);
  dispatch_float_dtype(in.dtype, [&](auto element) {
    using T = decltype(element);
    quantize_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(in.data), out_bytes, ix, format, scale,
                                                      amax);
  });
  check_launch("quantize: kernel launch");
}

void dequantize(const TensorView& in, const TensorView& out, const float* scale_inv, void* stream_handle) {
  const Indexing ix = indexing_of(in, out);
  const int grid = grid_for(ix.numel, in.device_index);
  if (ix.numel == 0) return;
  DeviceGuard guard(in.device_index);
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  const core::Fp8Format format = format_of(in.dtype);
  const auto* in_bytes = static_cast<const std::uint8_t*>(in.data);
  dispatch_float_dtype(out.dtype, [&](auto element) {
    using T = decltype(element);
    dequantize_kernel<T><<<grid, kThreads, 0, stream>>>(in_bytes, static_cast<T*>(out.data), ix, format, scale_inv);
  });
  check_launch("dequantize: kernel launch");
}

}  // namespace attnlab::cuda::fp8
