#include "cuda/cudnn/cudnn_cache.h"

#include <algorithm>
#include <iterator>

#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"

namespace attnlab::cuda::cudnn {
namespace {

constexpr std::size_t kCacheCapacity = 64;  // graphs per context; each holds host memory and an execution plan
constexpr int kMinVersion = 90000;

}  // namespace

int runtime_version() {
  static const int version = int(cudnnGetVersion());
  return version;
}

std::optional<std::string> library_unavailable() {
  static const std::optional<std::string> reason = []() -> std::optional<std::string> {
    const int v = runtime_version();
    if (v < kMinVersion) return fmt::format("cuDNN {} is too old; this path needs cuDNN 9", version_string(v));
    if (v == 91000 || v == 91001)
      return fmt::format("cuDNN {} has known SDPA bugs; use 9.10.2 or newer", version_string(v));
    // libcudnn.so is a thin loader; the graph API lives in a sub-library loaded on first use. Creating a backend
    // descriptor loads it without touching the GPU.
    cudnnBackendDescriptor_t desc = nullptr;
    const cudnnStatus_t status = cudnnBackendCreateDescriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &desc);
    if (status != CUDNN_STATUS_SUCCESS)
      return fmt::format("cuDNN {}'s graph library could not be loaded ({})", version_string(v),
                         cudnnGetErrorString(status));
    cudnnBackendDestroyDescriptor(desc);
    return std::nullopt;
  }();
  return reason;
}

Runtime runtime_for(int device) {
  const DeviceProperties& props = device_properties(device);
  return {runtime_version(), props.cc_major * 10 + props.cc_minor, props.sm_count};
}

DeviceCache::~DeviceCache() {
  // Plans must outlive their kernels and the graphs that replay them: wait (teardown, not a call).
  on_device_quietly(device_, [&] {
    cudaDeviceSynchronize();
    for (Retired& r : retired_) cudaEventDestroy(r.done);
  });
}

// Destroys the retired graphs whose kernels have run.
void DeviceCache::collect_retired() {
  std::erase_if(retired_, [](Retired& r) {
    if (cudaEventQuery(r.done) != cudaSuccess) {
      cudaGetLastError();  // cudaErrorNotReady is not an error of the call
      return false;
    }
    cudaEventDestroy(r.done);
    return true;
  });
}

// Retires the least recently used graph that no captured graph runs (none: the cache grows past its capacity).
void DeviceCache::evict_one(cudaStream_t stream) {
  auto victim = std::find_if(lru_.rbegin(), lru_.rend(), [](const Entry& e) { return !e.captured; });
  if (victim == lru_.rend()) return;
  collect_retired();
  Retired r;
  check_cuda(cudaEventCreateWithFlags(&r.done, cudaEventDisableTiming), "cudnn: eviction event");
  if (const cudaError_t status = cudaEventRecord(r.done, stream); status != cudaSuccess) {
    cudaEventDestroy(r.done);
    check_cuda(status, "cudnn: eviction event");
  }
  retired_.reserve(retired_.size() + 1);  // nothing below may throw once the graph has moved
  r.graph = std::move(victim->graph);
  retired_.push_back(std::move(r));
  index_.erase(victim->key);
  lru_.erase(std::next(victim).base());
}

Entry* DeviceCache::entry_for(const GraphSpec& spec, cudnnHandle_t h, const Tuning& tuning, cudaStream_t stream,
                              std::string& reason) {
  const GraphSpec::Key key = spec.key();
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return &lru_.front();
  }
  if (auto it = failed_.find(key); it != failed_.end()) {
    reason = it->second;
    return nullptr;
  }
  if (tuning.cudnn_fail_graph_builds) {  // injected: not remembered, so turning it off restores the path
    reason = "cuDNN cannot build this case: graph builds are made to fail (Tuning::cudnn_fail_graph_builds)";
    return nullptr;
  }
  if (capturing(stream)) {
    reason = "its cuDNN graph for this case is not built yet, and building one while the stream is capturing a "
             "CUDA graph is not done; run the call once before capturing";
    return nullptr;
  }
  BuildResult built = build_graph(h, spec);
  if (built.graph == nullptr && built.device_failure)
    core::fail(ErrorCode::device_error, "cudnn: building the cuDNN graph failed: {}", built.error);
  if (built.graph == nullptr) {
    if (failed_.size() >= 256) failed_.clear();  // forgetting only costs a rebuild attempt
    reason = fmt::format("cuDNN cannot build this case: {}", built.error);
    failed_.emplace(key, reason);
    return nullptr;
  }
  if (lru_.size() >= kCacheCapacity) evict_one(stream);
  lru_.emplace_front();
  Entry& e = lru_.front();
  e.key = key;
  e.graph = std::move(built.graph);
  e.workspace = workspace_size(*e.graph);
  index_.emplace(key, lru_.begin());
  return &e;
}

DeviceCache& State::cache_for(int device) {
  if (caches.size() <= std::size_t(device)) caches.resize(std::size_t(device) + 1);
  if (!caches[std::size_t(device)]) caches[std::size_t(device)] = std::make_unique<DeviceCache>(device);
  return *caches[std::size_t(device)];
}

GraphLookup find_graph(Context::Impl& ctx, int device, const GraphSpec& spec, const Tuning& tuning) {
  GraphLookup g;
  auto& st = ctx.state_for<State>(kPathName);
  g.lock = std::unique_lock(st.mutex);
  g.stream = static_cast<cudaStream_t>(ctx.stream);
  if ((g.reason = st.handles.refusal(device, g.stream))) return g;
  g.handle = st.handles.get(device, ctx.device_allocations, kPathName);
  if (const cudnnStatus_t status = cudnnSetStream(g.handle, g.stream); status != CUDNN_STATUS_SUCCESS)
    core::fail(ErrorCode::device_error, "cudnn: cudnnSetStream failed: {}", cudnnGetErrorString(status));
  std::string reason;
  g.entry = st.cache_for(device).entry_for(spec, g.handle, tuning, g.stream, reason);
  if (g.entry == nullptr) g.reason = std::move(reason);
  return g;
}

}  // namespace attnlab::cuda::cudnn
