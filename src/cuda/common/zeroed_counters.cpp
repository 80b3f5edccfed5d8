#include "cuda/common/zeroed_counters.h"

#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"

namespace attnlab::cuda {

// Kernels on any stream, and graphs, may still use the array: teardown (not a call) waits for the device first.
ZeroedCounters::~ZeroedCounters() {
  if (data_ == nullptr) return;
  on_device_quietly(device_, [&] {
    cudaDeviceSynchronize();
    cudaFree(data_);
  });
}

int* ZeroedCounters::get(int device, cudaStream_t stream, bool capturing, const char* who, int& allocations) {
  if (data_ != nullptr) return data_;
  if (capturing) return nullptr;
  constexpr std::size_t kBytes = std::size_t(kCount) * sizeof(int);
  void* made = nullptr;
  const bool pools = device_properties(device).memory_pools;
  const cudaError_t status = pools ? cudaMallocAsync(&made, kBytes, stream) : cudaMalloc(&made, kBytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    core::fail(ErrorCode::out_of_memory, "{}: cannot allocate its {} bytes of counters ({})", who, kBytes,
               cudaGetErrorString(status));
  }
  if (const cudaError_t zeroed = cudaMemsetAsync(made, 0, kBytes, stream); zeroed != cudaSuccess) {
    cudaGetLastError();
    if (pools) cudaFreeAsync(made, stream); else cudaFree(made);
    check_cuda(zeroed, who);
  }
  data_ = static_cast<int*>(made);
  device_ = device;
  ++allocations;
  return data_;
}

}  // namespace attnlab::cuda
