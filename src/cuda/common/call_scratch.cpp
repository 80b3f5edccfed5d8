#include "cuda/common/call_scratch.h"

#include <memory>
#include <vector>

#include "core/path.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"

namespace attnlab::cuda {
namespace {

struct ContextResources : PathState {
  std::vector<std::unique_ptr<DeviceResources>> per_device;  // by device index, made on first use
};

constexpr const char* kStateName = "cuda-resources";

}  // namespace

DeviceResources::~DeviceResources() {
  if (last_use != nullptr) on_device_quietly(device, [&] { cudaEventDestroy(last_use); });
}

DeviceResources& device_resources(Context::Impl& ctx, int device) {
  auto& all = ctx.state_for<ContextResources>(kStateName).per_device;
  const auto index = std::size_t(device);
  if (all.size() <= index) all.resize(index + 1);
  if (!all[index]) {
    auto made = std::make_unique<DeviceResources>();
    made->device = device;
    check_cuda(cudaEventCreateWithFlags(&made->last_use, cudaEventDisableTiming), "attnlab: context event");
    all[index] = std::move(made);
  }
  return *all[index];
}

OrderedUse::OrderedUse(Context::Impl& ctx, int device, cudaStream_t stream, const char* who)
    : resources_(device_resources(ctx, device)),
      stream_(stream),
      epoch_(ctx.stream_epoch),
      capturing_(cuda::capturing(stream)) {
  // Waiting on an event recorded outside a capture would invalidate it; a replay is ordered by the caller.
  if (!capturing_ && resources_.used && resources_.last_epoch != epoch_)
    check_cuda(cudaStreamWaitEvent(stream, resources_.last_use, 0), std::string(who) + ": wait for the last stream");
}

OrderedUse::~OrderedUse() {
  if (capturing_) {
    resources_.workspace.keep_for_graphs();
    return;
  }
  if (cudaEventRecord(resources_.last_use, stream_) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  resources_.last_epoch = epoch_;
  resources_.used = true;
}

core::Problem scratch_owner(int device, const std::optional<DeviceBuffer>& workspace) {
  core::Problem p;
  p.device = Device::cuda;
  p.device_index = device;
  p.workspace = workspace;
  return p;
}

std::optional<std::string> scratch_refusal(Context::Impl& ctx, const core::Problem& p, std::size_t bytes,
                                           cudaStream_t stream) {
  if (p.workspace) return core::workspace_shortfall(p, bytes);
  if (bytes == 0) return std::nullopt;
  if (bytes <= device_resources(ctx, p.device_index).workspace.capacity()) return std::nullopt;
  if (!capturing(stream)) return std::nullopt;
  return fmt::format("the context's workspace would have to grow to {} bytes while the stream is capturing a CUDA "
                     "graph; run the call once before capturing, or pass a caller workspace "
                     "(attnlab::workspace_size)",
                     bytes);
}

ScratchLease::ScratchLease(Context::Impl& ctx, const core::Problem& p, std::size_t bytes, cudaStream_t stream,
                           const char* who, OrderedUse* use) {
  ctx.last_workspace_bytes = bytes;
  if (bytes == 0) return;
  if (p.workspace) {
    if (bytes > p.workspace->bytes)  // scratch_refusal() said no before
      core::fail(ErrorCode::internal, "{}: needs {} bytes of workspace, the caller's holds {}", who, bytes,
                 p.workspace->bytes);
    data_ = static_cast<char*>(p.workspace->data);
    return;
  }
  if (use == nullptr) use = &own_use_.emplace(ctx, p.device_index, stream, who);
  data_ = static_cast<char*>(
      use->resources().workspace.reserve(bytes, p.device_index, stream, who, ctx.device_allocations));
}

}  // namespace attnlab::cuda
