#include "cuda/common/workspace.h"

#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"

namespace attnlab::cuda {

// cudaFree waits for the work still using the block: fine at teardown, which is not a call.
Workspace::~Workspace() {
  if (data_ != nullptr) on_device_quietly(device_, [&] { cudaFree(data_); });
}

void* Workspace::reserve(std::size_t bytes, int device, cudaStream_t stream, const char* who, int& allocations) {
  if (bytes <= bytes_) return data_;
  if (capturing(stream))
    core::fail(ErrorCode::unsupported,
               "{}: the context's workspace would have to grow to {} bytes while the stream is capturing a CUDA "
               "graph; run the call once before capturing, or pass a caller workspace (attnlab::workspace_size)",
               who, bytes);
  const bool pools = device_properties(device).memory_pools;
  if (data_ != nullptr) {
    // The old block may still be read by earlier work on the stream: the stream frees it after that work.
    if (pools) {
      check_cuda(cudaFreeAsync(data_, stream), who);
    } else {
      check_cuda(cudaStreamSynchronize(stream), who);  // no stream-ordered allocator on this device
      check_cuda(cudaFree(data_), who);
    }
    data_ = nullptr;
    bytes_ = 0;
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
