// ring::Ops on a GPU: one small grid-stride kernel per operation, on the ring call's stream. These move O(T·N·H)
// elements per ring step, against the O(T²·N·H) of the attention block they follow; they are written plainly.
// Also the CUDA stream ordering the ring uses (ring::gpu).
#include <cuda_runtime.h>

#include <cmath>

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

__global__ void fill_kernel(float* dst, long long count, float value) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < count; i += 1ll * gridDim.x * blockDim.x)
    dst[i] = value;
}

// Merging is two kernels in stream order: merge_o_kernel rescales O with the old lse_acc (one thread per
// (b, t, n, h), each recomputing its row's two weights), then merge_lse_kernel writes the merged LSE.
__global__ void merge_o_kernel(float* o_acc, const float* lse_acc, const void* o_part, DType dtype,
                               const float* lse_part, long long B, long long T, long long N, long long Hv,
                               long long row_begin, long long rows) {
  const long long count = B * rows * N * Hv;
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < count; i += 1ll * gridDim.x * blockDim.x) {
    const long long h = i % Hv, n = (i / Hv) % N, t = row_begin + (i / (Hv * N)) % rows, b = i / (Hv * N * rows);
    const long long l = (b * N + n) * T + t;
    const float part = lse_part[l], acc = lse_acc[l];
    if (!(part > -INFINITY)) continue;
    const float m = fmaxf(part, acc);
    const float merged = m + logf(expf(acc - m) + expf(part - m));
    const long long o = ((b * T + t) * N + n) * Hv + h;
    o_acc[o] = o_acc[o] * expf(acc - merged) + load_as_float(o_part, dtype, o) * expf(part - merged);
  }
}

__global__ void merge_lse_kernel(float* lse_acc, const float* lse_part, long long B, long long T, long long N,
                                 long long row_begin, long long rows) {
  const long long count = B * N * rows;
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < count; i += 1ll * gridDim.x * blockDim.x) {
    const long long l = (i / rows) * T + row_begin + i % rows;
    const float part = lse_part[l], acc = lse_acc[l];
    if (!(part > -INFINITY)) continue;
    const float m = fmaxf(part, acc);
    lse_acc[l] = m + logf(expf(acc - m) + expf(part - m));
  }
}

__global__ void accumulate_kernel(float* acc, const void* part, DType dtype, long long T, long long width,
                                  long long row_begin, long long rows, long long count) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < count; i += 1ll * gridDim.x * blockDim.x) {
    const long long within = i % (rows * width), b = i / (rows * width);
    const long long e = (b * T + row_begin) * width + within;
    acc[e] += load_as_float(part, dtype, e);
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

  void fill(float* dst, std::int64_t count, float value) override {
    attnlab::cuda::DeviceGuard guard(device_);
    fill_kernel<<<blocks_for(count), kThreads, 0, stream_>>>(dst, count, value);
    check_launch("ring: fill kernel");
  }

  void merge(float* o_acc, float* lse_acc, const void* o_part, DType dtype, const float* lse_part, std::int64_t B,
             std::int64_t T, std::int64_t N, std::int64_t Hv, std::int64_t row_begin, std::int64_t rows) override {
    attnlab::cuda::DeviceGuard guard(device_);
    const long long count = B * rows * N * Hv;
    merge_o_kernel<<<blocks_for(count), kThreads, 0, stream_>>>(o_acc, lse_acc, o_part, dtype, lse_part, B, T, N,
                                                                 Hv, row_begin, rows);
    check_launch("ring: merge kernel");
    merge_lse_kernel<<<blocks_for(B * N * rows), kThreads, 0, stream_>>>(lse_acc, lse_part, B, T, N, row_begin,
                                                                          rows);
    check_launch("ring: merge kernel (lse)");
  }

  void accumulate(float* acc, const void* part, DType dtype, std::int64_t B, std::int64_t T, std::int64_t width,
                  std::int64_t row_begin, std::int64_t rows) override {
    attnlab::cuda::DeviceGuard guard(device_);
    const long long count = B * rows * width;
    accumulate_kernel<<<blocks_for(count), kThreads, 0, stream_>>>(acc, part, dtype, T, width, row_begin, rows,
                                                                    count);
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
