#include "cuda/common/call_scratch.h"

#include <memory>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"

namespace attnlab::cuda {

// The context's workspace on one device, and where it was last used.
struct ScratchLease::DeviceBlock {
  Workspace workspace;
  cudaEvent_t last_use = nullptr;  // recorded after the last call that used the block
  cudaStream_t last_stream = nullptr;
  bool used = false;
  int device = -1;

  ~DeviceBlock() {
    if (last_use != nullptr) on_device_quietly(device, [&] { cudaEventDestroy(last_use); });
  }
};

namespace {

// One block per device the context has used, created on first use.
struct ContextScratch : PathState {
  std::vector<std::unique_ptr<ScratchLease::DeviceBlock>> per_device;
};

constexpr const char* kStateName = "cuda-scratch";

}  // namespace

ScratchLease::ScratchLease(Context::Impl& ctx, const core::Problem& p, std::size_t bytes, cudaStream_t stream,
                           const char* who)
    : stream_(stream) {
  ctx.last_workspace_bytes = bytes;
  if (bytes == 0) return;
  if (p.workspace) {
    if (bytes > p.workspace->bytes)
      core::fail(ErrorCode::internal, "{}: needs {} bytes of workspace, the caller's holds {}", who, bytes,
                 p.workspace->bytes);
    data_ = static_cast<char*>(p.workspace->data);
    return;
  }
  auto& blocks = ctx.state_for<ContextScratch>(kStateName).per_device;
  const auto device = std::size_t(p.device_index);
  if (blocks.size() <= device) blocks.resize(device + 1);
  if (!blocks[device]) {
    blocks[device] = std::make_unique<DeviceBlock>();
    blocks[device]->device = p.device_index;
  }
  DeviceBlock& block = *blocks[device];
  if (block.last_use == nullptr)
    check_cuda(cudaEventCreateWithFlags(&block.last_use, cudaEventDisableTiming), std::string(who) + ": event");
  const bool captured = capturing(stream);
  if (!captured && block.used && block.last_stream != stream)
    check_cuda(cudaStreamWaitEvent(stream, block.last_use, 0), std::string(who) + ": order after the previous stream");
  data_ = static_cast<char*>(block.workspace.reserve(bytes, p.device_index, stream, who, ctx.device_allocations));
  if (!captured) block_ = &block;
}

ScratchLease::~ScratchLease() {
  if (block_ == nullptr) return;
  if (cudaEventRecord(block_->last_use, stream_) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  block_->last_stream = stream_;
  block_->used = true;
}

}  // namespace attnlab::cuda
