// The device scratch of one GPU call, and the per-context CUDA state the GPU paths share.
//
// A call takes its scratch from the caller's workspace when it was given one (the call then allocates nothing),
// else from the context's own workspace for the device. The context's workspace is reused call after call in the
// order of the context's stream; if a later call runs on another stream (Context::set_stream), that stream first
// waits — on the device, through an event — for the last call that used the block. Calls made while the stream
// captures a graph are left out of that bookkeeping (nothing runs at capture; replaying the graph is ordered by
// the caller, see README "Streams").
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "core/context_impl.h"
#include "core/problem.h"
#include "cuda/common/workspace.h"

namespace attnlab::cuda {

class ScratchLease {
 public:
  // `bytes` of scratch for `p` on `stream` (current device p.device_index). A caller workspace must hold them
  // (paths refuse the call before, with core::workspace_shortfall); reports the size in ctx.last_workspace_bytes.
  ScratchLease(Context::Impl& ctx, const core::Problem& p, std::size_t bytes, cudaStream_t stream, const char* who);
  // Marks the context's block as used by everything enqueued on the stream so far (the call's launches): never
  // throws.
  ~ScratchLease();
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;

  char* data() const { return data_; }

  struct DeviceBlock;  // the context's workspace on one device (call_scratch.cpp)

 private:
  char* data_ = nullptr;
  DeviceBlock* block_ = nullptr;  // the context's block, when that is what serves
  cudaStream_t stream_ = nullptr;
};

}  // namespace attnlab::cuda
