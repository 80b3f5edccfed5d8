// What the GPU paths share of a context: its resources on each device (the workspace) and the order in which
// calls use them, and the device scratch of one call.
//
// A call takes its scratch from the caller's workspace when it was given one (the call then allocates nothing),
// else from the context's own workspace for the device. Context-owned resources (that workspace, cuDNN plans) are
// used in the order of the context's stream: a call on a stream set after the last call that used them first
// makes its stream wait — on the device, through an event — for that call. Calls made while the stream captures a
// graph are left out of that bookkeeping (nothing runs at capture; the caller orders replays), and what they use
// is kept until the context is destroyed, since the graph holds its addresses.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/context_impl.h"
#include "core/problem.h"
#include "cuda/common/workspace.h"

namespace attnlab::cuda {

// The context's resources on one device, and when they were last used.
struct DeviceResources {
  Workspace workspace;
  cudaEvent_t last_use = nullptr;  // recorded after the last call that used them
  std::uint64_t last_epoch = 0;    // Context::Impl::stream_epoch of that call
  bool used = false;
  int device = -1;
  ~DeviceResources();
};

DeviceResources& device_resources(Context::Impl& ctx, int device);

// One call's use of the context's resources on a device, as a scope: construction orders the call after the last
// use on an earlier stream; destruction marks everything the call enqueued as the last use (never throws).
class OrderedUse {
 public:
  OrderedUse(Context::Impl& ctx, int device, cudaStream_t stream, const char* who);
  ~OrderedUse();
  OrderedUse(const OrderedUse&) = delete;
  OrderedUse& operator=(const OrderedUse&) = delete;

  bool capturing() const { return capturing_; }
  DeviceResources& resources() const { return resources_; }
  cudaStream_t stream() const { return stream_; }

 private:
  DeviceResources& resources_;
  cudaStream_t stream_;
  std::uint64_t epoch_;
  bool capturing_;
};

// Why `bytes` of scratch cannot be had for `p` on `stream` without breaking a rule, or nullopt: a caller workspace
// too small, or the context's workspace would have to grow while the stream captures a graph. Paths ask it in
// plan() and before they launch, so why_not(ctx, ...) and the call agree.
std::optional<std::string> scratch_refusal(Context::Impl& ctx, const core::Problem& p, std::size_t bytes,
                                           cudaStream_t stream);

// A call that has no Problem (the serving calls) as the scratch rules see it: a CUDA call on `device` with the
// caller's workspace, if any.
core::Problem scratch_owner(int device, const std::optional<DeviceBuffer>& workspace);

// `bytes` of scratch for `p` (current device p.device_index), after scratch_refusal() said yes. The context's
// workspace is used within `use` (the caller's scope over the call), or within a scope of its own.
class ScratchLease {
 public:
  ScratchLease(Context::Impl& ctx, const core::Problem& p, std::size_t bytes, cudaStream_t stream, const char* who,
               OrderedUse* use = nullptr);
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  char* data() const { return data_; }

 private:
  std::optional<OrderedUse> own_use_;
  char* data_ = nullptr;
};

}  // namespace attnlab::cuda
