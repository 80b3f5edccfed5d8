#include "cuda/common/workspace.h"

#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"

namespace attnlab::cuda {

// cudaFree does not wait for stream work using a cudaMallocAsync block, and graphs may still replay: teardown (not
// a call) waits for the device first.
Workspace::~Workspace() {
  if (data_ == nullptr && parked_.empty()) return;
  on_device_quietly(device_, [&] {
    cudaDeviceSynchronize();
    if (data_ != nullptr) cudaFree(data_);
    for (void* block : parked_) cudaFree(block);
  });
}

void* Workspace::reserve(std::size_t bytes, int device, cudaStream_t stream, const char* who, int& allocations) {
  if (bytes <= bytes_) return data_;
  const bool pools = device_properties(device).memory_pools;
  if (data_ != nullptr) {
    if (kept_by_graphs_) {
      parked_.push_back(data_);
    } else if (pools) {
      // The old block may still be read by earlier work on the stream: the stream frees it after that work.
      check_cuda(cudaFreeAsync(data_, stream), who);
    } else {
      check_cuda(cudaStreamSynchronize(stream), who);  // no stream-ordered allocator on this device (README)
      check_cuda(cudaFree(data_), who);
    }
    data_ = nullptr;
    bytes_ = 0;
    kept_by_graphs_ = false;
  }
  const cudaError_t status = pools ? cudaMallocAsync(&data_, bytes, stream) : cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    data_ = nullptr;
    core::fail(ErrorCode::out_of_memory, "{}: cannot allocate its {:.1f} MiB device workspace ({})", who,
               double(bytes) / (1 << 20), cudaGetErrorString(status));
  }
  bytes_ = bytes;
  device_ = device;
  ++allocations;
  return data_;
}

}  // namespace attnlab::cuda
