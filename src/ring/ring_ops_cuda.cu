// ring::Ops on a GPU: one small grid-stride kernel per operation, on the ring call's stream. These move O(T·N·H)
// elements per ring step, against the O(T²·N·H) of the attention block they follow; they are written plainly.
// Also the CUDA stream ordering the ring uses (ring::gpu).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"
#include "cuda/common/dtype.cuh"
#include "ring/ring_ops.h"

namespace attnlab::ring {
namespace {

using attnlab::cuda::check_cuda;
using attnlab::cuda::check_launch;
using attnlab::cuda::load_as_float;

// A rank-4 view's shape and strides in kernel parameters (a rank-3 view as (1, d0, d1, d2)).
struct View4 {
  long long shape[4];
  long long strides[4];
};

View4 view4(const TensorView& t) {
  View4 v{{1, 1, 1, 1}, {0, 0, 0, 0}};
  const int lead = 4 - t.rank;
  for (int d = 0; d < t.rank; ++d) v.shape[lead + d] = t.shape[d], v.strides[lead + d] = t.strides[d];
  return v;
}

__device__ long long strided_offset(const View4& v, long long i) {
  long long offset = 0;
  for (int d = 3; d >= 0; --d) {
    offset += (i % v.shape[d]) * v.strides[d];
    i /= v.shape[d];
  }
  return offset;
}

template <class T>
__global__ void pack_kernel(T* dst, const T* src, View4 v, long long count) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < count; i += 1ll * gridDim.x * blockDim.x)
    dst[i] = src[strided_offset(v, i)];
}

// Four consecutive elements of a row: loads and stores of 2·4 or 4·4 bytes where the address allows, else four.
template <class T>
__device__ __forceinline__ float4 load4(const T* p, bool vector) {
  if constexpr (sizeof(T) == 4) {
    if (vector) return *reinterpret_cast<const float4*>(p);
  } else {
    if (vector) {
      const uint2 raw = *reinterpret_cast<const uint2*>(p);
      const T* e = reinterpret_cast<const T*>(&raw);
      return make_float4(attnlab::cuda::to_float(e[0]), attnlab::cuda::to_float(e[1]), attnlab::cuda::to_float(e[2]),
                         attnlab::cuda::to_float(e[3]));
    }
  }
  return make_float4(attnlab::cuda::to_float(p[0]), attnlab::cuda::to_float(p[1]), attnlab::cuda::to_float(p[2]),
                     attnlab::cuda::to_float(p[3]));
}

template <class T>
__device__ __forceinline__ void store4(T* p, float4 x, bool vector) {
  if constexpr (sizeof(T) == 4) {
    if (vector) {
      *reinterpret_cast<float4*>(p) = x;
      return;
    }
  } else {
    if (vector) {
      T e[4] = {attnlab::cuda::from_float<T>(x.x), attnlab::cuda::from_float<T>(x.y),
                attnlab::cuda::from_float<T>(x.z), attnlab::cuda::from_float<T>(x.w)};
      *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(e);
      return;
    }
  }
  p[0] = attnlab::cuda::from_float<T>(x.x), p[1] = attnlab::cuda::from_float<T>(x.y);
  p[2] = attnlab::cuda::from_float<T>(x.z), p[3] = attnlab::cuda::from_float<T>(x.w);
}

__device__ __forceinline__ float4 axpby(float4 x, float a, float4 y, float b) {
  return make_float4(x.x * a + y.x * b, x.y * a + y.y * b, x.z * a + y.z * b, x.w * a + y.w * b);
}

struct MergeArgs {
  float* o_acc;
  float* lse_acc;
  const void* o_part;
  const float* lse_part;
  long long B, total, N, Hv, begin, count;
  bool first;
  void* out;              // null: the accumulator
  long long out_s[3];     // out's strides of (b, t, n); its last dimension is contiguous
  float* out_lse;         // null: none
  long long lse_s[3];     // out_lse's strides of (b, n, t)
};

// A (b, t, n) row of a merge: where it lies, the merged LSE and the two weights (both 0 when neither the
// accumulator nor the block saw a key).
struct MergeRow {
  long long b, t, n, l, o;  // l: its LSE's index, o: its first element's
  float merged, w_acc, w_part;
};

__device__ __forceinline__ MergeRow merge_row(const MergeArgs& a, long long row) {
  MergeRow r;
  r.n = row % a.N, r.t = a.begin + (row / a.N) % a.count, r.b = row / (a.N * a.count);
  r.l = (r.b * a.N + r.n) * a.total + r.t;
  r.o = ((r.b * a.total + r.t) * a.N + r.n) * a.Hv;
  const float part = a.lse_part[r.l], acc = a.first ? -INFINITY : a.lse_acc[r.l];
  const float m = fmaxf(part, acc);
  r.merged = -INFINITY, r.w_acc = 0.0f, r.w_part = 0.0f;
  if (m > -INFINITY) {
    r.merged = m + logf(expf(acc - m) + expf(part - m));
    r.w_acc = expf(acc - r.merged), r.w_part = expf(part - r.merged);
  }
  return r;
}

// The row's LSE: to the accumulator, or with the output to out_lse when given.
__device__ __forceinline__ void finish_row(const MergeArgs& a, const MergeRow& r) {
  if (!a.out)
    a.lse_acc[r.l] = r.merged;
  else if (a.out_lse)
    a.out_lse[r.b * a.lse_s[0] + r.n * a.lse_s[1] + r.t * a.lse_s[2]] = r.merged;
}

// One warp per (b, t, n) row: its two weights once, then four elements per lane at a time (Hv % 4 == 0: the
// wrapper falls back to merge_scalar_kernel otherwise).
template <class T>
__global__ void merge_kernel(MergeArgs a) {
  const long long row = (blockIdx.x * 1ll * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= a.B * a.count * a.N) return;
  const MergeRow r = merge_row(a, row);
  const long long o = r.o;
  const float w_acc = r.w_acc, w_part = r.w_part;
  const T* in = static_cast<const T*>(a.o_part) + o;
  T* out = a.out ? static_cast<T*>(a.out) + r.b * a.out_s[0] + r.t * a.out_s[1] + r.n * a.out_s[2] : nullptr;
  const bool out_vector = out != nullptr && (reinterpret_cast<std::uintptr_t>(out) % (4 * sizeof(T)) == 0);
  for (long long h = lane * 4; h < a.Hv; h += 128) {
    // A block row with no visible key (w_part = 0) contributes nothing, whatever its O holds.
    float4 x = w_part > 0.0f ? load4(in + h, true) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (a.first)
      x = make_float4(x.x * w_part, x.y * w_part, x.z * w_part, x.w * w_part);
    else
      x = axpby(x, w_part, *reinterpret_cast<const float4*>(a.o_acc + o + h), w_acc);
    if (out)
      store4(out + h, x, out_vector);
    else
      *reinterpret_cast<float4*>(a.o_acc + o + h) = x;
  }
  if (lane == 0) finish_row(a, r);
}

// Any Hv: one element per lane at a time.
template <class T>
__global__ void merge_scalar_kernel(MergeArgs a) {
  const long long row = (blockIdx.x * 1ll * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= a.B * a.count * a.N) return;
  const MergeRow r = merge_row(a, row);
  const long long o = r.o;
  const float w_acc = r.w_acc, w_part = r.w_part;
  const T* in = static_cast<const T*>(a.o_part) + o;
  T* out = a.out ? static_cast<T*>(a.out) + r.b * a.out_s[0] + r.t * a.out_s[1] + r.n * a.out_s[2] : nullptr;
  for (long long h = lane; h < a.Hv; h += 32) {
    const float own = w_part > 0.0f ? attnlab::cuda::to_float(in[h]) * w_part : 0.0f;
    const float x = own + (a.first ? 0.0f : a.o_acc[o + h] * w_acc);
    if (out)
      out[h] = attnlab::cuda::from_float<T>(x);
    else
      a.o_acc[o + h] = x;
  }
  if (lane == 0) finish_row(a, r);
}

struct AccumulateArgs {
  float* acc;
  const void* part;
  long long B, total, heads, H, begin, count;
  bool first;
  void* out;           // null: the accumulator
  long long out_s[3];  // out's strides of (b, t, head)
};

// Four elements per thread (H % 4 == 0, so a group never crosses a head): acc (+)= part, or the sum to out.
template <class T>
__global__ void accumulate_kernel(AccumulateArgs a) {
  const long long width = a.heads * a.H, groups = a.B * a.count * width / 4;
  for (long long g = blockIdx.x * 1ll * blockDim.x + threadIdx.x; g < groups; g += 1ll * gridDim.x * blockDim.x) {
    const long long e = (g * 4) % width, t = a.begin + (g * 4 / width) % a.count, b = g * 4 / (width * a.count);
    const long long i = (b * a.total + t) * width + e;
    float4 x = load4(static_cast<const T*>(a.part) + i, true);
    if (!a.first) x = axpby(x, 1.0f, *reinterpret_cast<const float4*>(a.acc + i), 1.0f);
    if (a.out) {
      T* out = static_cast<T*>(a.out) + b * a.out_s[0] + t * a.out_s[1] + (e / a.H) * a.out_s[2] + e % a.H;
      store4(out, x, reinterpret_cast<std::uintptr_t>(out) % (4 * sizeof(T)) == 0);
    } else {
      *reinterpret_cast<float4*>(a.acc + i) = x;
    }
  }
}

template <class T>
__global__ void accumulate_scalar_kernel(AccumulateArgs a) {
  const long long width = a.heads * a.H, count = a.B * a.count * width;
  for (long long k = blockIdx.x * 1ll * blockDim.x + threadIdx.x; k < count; k += 1ll * gridDim.x * blockDim.x) {
    const long long e = k % width, t = a.begin + (k / width) % a.count, b = k / (width * a.count);
    const long long i = (b * a.total + t) * width + e;
    const float x = attnlab::cuda::to_float(static_cast<const T*>(a.part)[i]) + (a.first ? 0.0f : a.acc[i]);
    if (a.out)
      static_cast<T*>(a.out)[b * a.out_s[0] + t * a.out_s[1] + (e / a.H) * a.out_s[2] + e % a.H] =
          attnlab::cuda::from_float<T>(x);
    else
      a.acc[i] = x;
  }
}

template <class T>
__global__ void store_kernel(T* dst, const float* src, View4 v, long long count) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < count; i += 1ll * gridDim.x * blockDim.x)
    dst[strided_offset(v, i)] = attnlab::cuda::from_float<T>(src[i]);
}

constexpr int kThreads = 256;
unsigned blocks_for(long long count) {
  const long long b = (count + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : (b > 65535 * 4 ? 65535 * 4 : b));
}

class CudaOps final : public Ops {
 public:
  CudaOps(int device_index, void* stream) : device_(device_index), stream_(static_cast<cudaStream_t>(stream)) {}

  void pack(void* dst, const TensorView& src) override {
    attnlab::cuda::DeviceGuard guard(device_);
    const long long count = src.numel();
    const View4 v = view4(src);
    if (size_of(src.dtype) == 4)
      pack_kernel<<<blocks_for(count), kThreads, 0, stream_>>>(static_cast<float*>(dst),
                                                               static_cast<const float*>(src.data), v, count);
    else
      pack_kernel<<<blocks_for(count), kThreads, 0, stream_>>>(
          static_cast<unsigned short*>(dst), static_cast<const unsigned short*>(src.data), v, count);
    check_launch("ring: pack kernel");
  }

  void merge(float* o_acc, float* lse_acc, const void* o_part, DType dtype, const float* lse_part, const Rows& r,
             bool first, const TensorView* out, const TensorView* out_lse) override {
    attnlab::cuda::DeviceGuard guard(device_);
    MergeArgs a{o_acc, lse_acc, o_part, lse_part, r.B, r.total, r.heads, r.H, r.begin, r.count, first, nullptr,
                {0, 0, 0}, nullptr, {0, 0, 0}};
    if (out) {
      a.out = out->data;
      for (int d = 0; d < 3; ++d) a.out_s[d] = out->strides[d];
    }
    if (out && out_lse && !out_lse->empty()) {
      a.out_lse = static_cast<float*>(out_lse->data);
      for (int d = 0; d < 3; ++d) a.lse_s[d] = out_lse->strides[d];
    }
    const long long threads = r.B * r.count * r.heads * 32;
    attnlab::cuda::dispatch_float_dtype(dtype, [&](auto element) {
      using T = decltype(element);
      const bool vector = r.H % 4 == 0 && reinterpret_cast<std::uintptr_t>(o_acc) % 16 == 0 &&
                          reinterpret_cast<std::uintptr_t>(o_part) % (4 * sizeof(T)) == 0;
      if (vector)
        merge_kernel<T><<<unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, stream_>>>(a);
      else
        merge_scalar_kernel<T><<<unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, stream_>>>(a);
    });
    check_launch("ring: merge kernel");
  }

  void accumulate(float* acc, const void* part, DType dtype, const Rows& r, bool first,
                  const TensorView* out) override {
    attnlab::cuda::DeviceGuard guard(device_);
    AccumulateArgs a{acc, part, r.B, r.total, r.heads, r.H, r.begin, r.count, first, nullptr, {0, 0, 0}};
    if (out) {
      a.out = out->data;
      for (int d = 0; d < 3; ++d) a.out_s[d] = out->strides[d];
    }
    const long long count = r.B * r.count * r.heads * r.H;
    attnlab::cuda::dispatch_float_dtype(dtype, [&](auto element) {
      using T = decltype(element);
      // Four at a time where rows hold whole groups of four and both buffers are aligned for them (the dV
      // accumulator follows dK's, so its alignment depends on Hqk).
      const bool vector = r.H % 4 == 0 && reinterpret_cast<std::uintptr_t>(acc) % 16 == 0 &&
                          reinterpret_cast<std::uintptr_t>(part) % (4 * sizeof(T)) == 0;
      if (vector)
        accumulate_kernel<T><<<blocks_for(count / 4), kThreads, 0, stream_>>>(a);
      else
        accumulate_scalar_kernel<T><<<blocks_for(count), kThreads, 0, stream_>>>(a);
    });
    check_launch("ring: accumulate kernel");
  }

  void store(const TensorView& dst, const float* src) override {
    attnlab::cuda::DeviceGuard guard(device_);
    const long long count = dst.numel();
    const View4 v = view4(dst);
    attnlab::cuda::dispatch_float_dtype(dst.dtype, [&](auto element) {
      using T = decltype(element);
      store_kernel<<<blocks_for(count), kThreads, 0, stream_>>>(static_cast<T*>(dst.data), src, v, count);
    });
    check_launch("ring: store kernel");
  }

 private:
  int device_;
  cudaStream_t stream_;
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(int device_index, void* stream) {
  return std::make_unique<CudaOps>(device_index, stream);
}

namespace gpu {

void* event_create(int device_index, bool timing) {
  attnlab::cuda::DeviceGuard guard(device_index);
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming),
             "ring: cudaEventCreateWithFlags");
  return event;
}

void event_destroy(void* event) noexcept {
  if (event != nullptr) {
    cudaEventDestroy(static_cast<cudaEvent_t>(event));
    cudaGetLastError();
  }
}

void record(void* event, void* stream) {
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
             "ring: cudaEventRecord");
}

void wait(void* stream, void* event) {
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
             "ring: cudaStreamWaitEvent");
}

float elapsed_ms(void* start, void* end) {
  check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(end)), "ring: cudaEventSynchronize");
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)),
             "ring: cudaEventElapsedTime");
  return ms;
}

void copy_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)),
             "ring: cudaMemcpyAsync");
}

void set_device(int device_index) { check_cuda(cudaSetDevice(device_index), "ring: cudaSetDevice"); }

int current_device() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

void synchronize(void* stream) {
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "ring: cudaStreamSynchronize");
}

}  // namespace gpu
}  // namespace attnlab::ring
