// Device scratch memory owned by a Context: grows to the largest request and is reused across calls, so the
// steady state allocates nothing. Growing frees the old block after the context's stream has drained it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace attnlab::cuda {

class Workspace {
 public:
  Workspace() = default;
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // At least `bytes` of device memory on `device`, valid until the next reserve() on this workspace.
  // Throws Error(out_of_memory) naming `who` and the size when it cannot be had.
  void* reserve(std::size_t bytes, int device, cudaStream_t stream, const char* who);
  std::size_t capacity() const { return bytes_; }

 private:
  void release();
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = -1;
};

}  // namespace attnlab::cuda
