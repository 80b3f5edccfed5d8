#include "cuda/common/workspace.h"

#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"

namespace attnlab::cuda {

Workspace::~Workspace() { release(); }

void Workspace::release() {
  if (data_ == nullptr) return;
  DeviceGuard guard(device_);
  cudaFree(data_);  // cudaFree synchronizes with outstanding work on the block
  data_ = nullptr;
  bytes_ = 0;
}

void* Workspace::reserve(std::size_t bytes, int device, cudaStream_t stream, const char* who) {
  if (data_ != nullptr && device == device_ && bytes <= bytes_) return data_;
  if (data_ != nullptr) check_cuda(cudaStreamSynchronize(stream), who);
  release();
  if (bytes == 0) return nullptr;
  DeviceGuard guard(device);
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    data_ = nullptr;
    core::fail(ErrorCode::out_of_memory, "{}: cannot allocate its {:.1f} MiB device workspace ({})", who,
               double(bytes) / (1 << 20), cudaGetErrorString(status));
  }
  bytes_ = bytes;
  device_ = device;
  return data_;
}

}  // namespace attnlab::cuda
