// A small device array of int counters owned by a Context, one per device: zero when made, and left at zero by
// every kernel that uses it (each counter is reset by the block that sees it reach its target), so that a call
// needs no memset before it. The split-KV kernel's splits count themselves in here to find the block that merges
// them (src/cuda/serving/split_kv_last_block_merge.cuh). Calls use it in the order of the context's stream, as
// they use its workspace (call_scratch.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace attnlab::cuda {

class ZeroedCounters {
 public:
  static constexpr int kCount = 2048;  // enough for every split plan: splits > 1 only when the blocks < the SMs' slots

  ZeroedCounters() = default;
  ~ZeroedCounters();  // waits for the device, then frees the array; never throws
  ZeroedCounters(const ZeroedCounters&) = delete;
  ZeroedCounters& operator=(const ZeroedCounters&) = delete;

  // The array on `device` (current), zeroed on `stream` when first made (counted in `allocations`); nullptr when
  // it does not exist yet and `stream` captures a CUDA graph (the graph would own the allocation): the caller then
  // does without. Throws Error(out_of_memory) naming `who` when the memory cannot be had.
  int* get(int device, cudaStream_t stream, bool capturing, const char* who, int& allocations);

 private:
  int* data_ = nullptr;
  int device_ = -1;
};

}  // namespace attnlab::cuda
