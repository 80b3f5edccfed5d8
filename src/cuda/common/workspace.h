// Device scratch memory owned by a Context, one block per device: it grows to the largest request and is reused
// across calls, so the steady state allocates nothing. Growing is ordered on the call's stream (cudaFreeAsync of
// the old block, cudaMallocAsync of the new one): no host wait, no device-wide synchronization.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace attnlab::cuda {

class Workspace {
 public:
  Workspace() = default;
  ~Workspace();  // never throws
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // At least `bytes` of device memory on `device` (current), usable by work enqueued on `stream` from now on.
  // Counts an allocation in `allocations` when it grows. Throws Error naming `who`: out_of_memory when the memory
  // cannot be had, unsupported when it would have to grow while `stream` is capturing a CUDA graph (the graph
  // would own the block).
  void* reserve(std::size_t bytes, int device, cudaStream_t stream, const char* who, int& allocations);
  std::size_t capacity() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = -1;
};

}  // namespace attnlab::cuda
