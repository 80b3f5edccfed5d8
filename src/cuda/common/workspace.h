// Device scratch memory owned by a Context, one block per device: it grows to the largest request and is reused
// across calls, so the steady state allocates nothing. Growing is ordered on the call's stream (cudaFreeAsync of
// the old block, cudaMallocAsync of the new one): no host wait, no device-wide synchronization. A block that a
// captured CUDA graph uses is never freed before the context is (the graph keeps its address): growing then parks
// it instead.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace attnlab::cuda {

class Workspace {
 public:
  Workspace() = default;
  ~Workspace();  // waits for the device, then frees every block; never throws
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // At least `bytes` of device memory on `device` (current), usable by work enqueued on `stream` from now on.
  // Counts an allocation in `allocations` when it grows. Throws Error(out_of_memory) naming `who` when the memory
  // cannot be had. Callers refuse a call that would grow the block while its stream captures a graph (the graph
  // would own the allocation): see scratch_refusal().
  void* reserve(std::size_t bytes, int device, cudaStream_t stream, const char* who, int& allocations);
  std::size_t capacity() const { return bytes_; }
  // The current block is used by a captured graph: keep it until teardown.
  void keep_for_graphs() { kept_by_graphs_ = true; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = -1;
  bool kept_by_graphs_ = false;
  std::vector<void*> parked_;  // outgrown blocks that captured graphs still use
};

}  // namespace attnlab::cuda
