// cudnn: cuDNN's fused attention (flash-attention style kernels) through cudnn-frontend graphs, forward and
// backward — the codelab's `implementation="cudnn"`, driven from C++.
//
// Per context the path keeps one cuDNN handle, a bounded LRU cache of built graphs keyed by everything a graph
// depends on (shapes, strides, dtypes, options, which optional tensors are present), a device workspace and a
// pinned staging ring for host-side sequence lengths. A call in steady state therefore builds nothing, allocates
// nothing and never waits for the device: it sets the handle's stream, enqueues the graph and, only for the calls
// that need them, the small fix-up kernels of fixup_kernels.h.
//
// Graph builds that cuDNN refuses are remembered process-wide, so why_not() (and with it `auto`) reports the
// frontend's reason for that exact case from then on instead of failing again.
#include <cudnn.h>
#include <cuda_runtime.h>

#include <array>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/context_impl.h"
#include "core/error.h"
#include "core/path.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"
#include "cuda/common/workspace.h"
#include "cuda/cudnn/cudnn_graphs.h"
#include "cuda/cudnn/cudnn_plan.h"
#include "cuda/cudnn/fixup_kernels.h"

namespace attnlab::cuda {
namespace cudnn {
namespace {

constexpr const char* kName = "cudnn";
constexpr std::size_t kCacheCapacity = 64;  // graphs per context; each holds host memory and an execution plan
constexpr int kStagingSlots = 16;           // host-length copies that may be in flight at once
constexpr int kMinVersion = 90000;

using Key = GraphSpec::Key;

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
  return {runtime_version(), props.cc_major * 10 + props.cc_minor};
}

// Cases cuDNN failed to build, with the frontend's reason. Bounded: forgetting only costs a rebuild attempt.
class FailedBuilds {
 public:
  std::optional<std::string> find(const Key& key) const {
    std::lock_guard lock(mutex_);
    auto it = reasons_.find(key);
    if (it == reasons_.end()) return std::nullopt;
    return it->second;
  }
  void add(const Key& key, const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (reasons_.size() >= 256) reasons_.clear();
    reasons_.emplace(key, reason);
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<Key, std::string, KeyHash> reasons_;
};

FailedBuilds& failed_builds() {
  static FailedBuilds failed;
  return failed;
}

// Runs `fn` with `device` current, ignoring errors: for destructors, which must not throw.
template <class Fn>
void on_device_quietly(int device, Fn&& fn) noexcept {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (device >= 0 && device != previous) cudaSetDevice(device);
  fn();
  if (previous >= 0 && device != previous) cudaSetDevice(previous);
  cudaGetLastError();
}

// One cached graph. `full_lengths` (2·B int32 on the device: T…, then S…) is made the first time a call needs the
// padding mask with constant lengths, and lives as long as the graph.
struct Entry {
  Key key{};
  std::shared_ptr<const Graph> graph;
  std::size_t workspace = 0;
  std::int32_t* full_lengths = nullptr;
  int device = -1;

  Entry() = default;
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;
  ~Entry() {
    if (full_lengths != nullptr) on_device_quietly(device, [&] { cudaFree(full_lengths); });
  }
};

// Carves one workspace allocation into 256-byte aligned pieces.
class Carver {
 public:
  std::size_t add(std::size_t bytes) {
    const std::size_t at = size_;
    size_ += (bytes + 255) / 256 * 256;
    return at;
  }
  std::size_t size() const { return size_; }

 private:
  std::size_t size_ = 0;
};

struct State : PathState {
  std::mutex mutex;  // a context is meant for one thread at a time; this keeps misuse from corrupting the cache
  cudnnHandle_t handle = nullptr;
  int handle_device = -1;
  Workspace workspace;
  std::list<Entry> lru;  // most recently used first
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index;
  // Pinned ring for host-side lengths: a slot is reused only after the copy that last read it has run.
  std::int32_t* staging = nullptr;
  std::size_t staging_ints = 0;  // per slot
  int staging_device = -1;
  std::array<cudaEvent_t, kStagingSlots> staging_done{};
  int next_slot = 0;

  ~State() override {
    clear_cache();
    release_staging();
    if (handle != nullptr) on_device_quietly(handle_device, [&] { cudnnDestroy(handle); });
  }

  void clear_cache() {
    if (lru.empty()) return;
    // A plan must not be destroyed while one of its kernels may still run.
    on_device_quietly(handle_device, [] { cudaDeviceSynchronize(); });
    index.clear();
    lru.clear();
  }

  void release_staging() {
    if (staging == nullptr) return;
    on_device_quietly(staging_device, [&] {
      for (cudaEvent_t& e : staging_done) {
        if (e == nullptr) continue;
        cudaEventSynchronize(e);  // the copy reading this slot has run
        cudaEventDestroy(e);
        e = nullptr;
      }
      cudaFreeHost(staging);
    });
    staging = nullptr;
    staging_ints = 0;
  }

  cudnnHandle_t handle_for(int device, cudaStream_t stream) {
    if (handle != nullptr && handle_device != device) {
      clear_cache();  // plans belong to the handle (and GPU) they were built with
      on_device_quietly(handle_device, [&] { cudnnDestroy(handle); });
      handle = nullptr;
    }
    if (handle == nullptr) {
      const cudnnStatus_t status = cudnnCreate(&handle);
      if (status != CUDNN_STATUS_SUCCESS) {
        handle = nullptr;
        core::fail(ErrorCode::device_error, "cudnn: cudnnCreate failed: {}", cudnnGetErrorString(status));
      }
      handle_device = device;
    }
    const cudnnStatus_t status = cudnnSetStream(handle, stream);
    if (status != CUDNN_STATUS_SUCCESS)
      core::fail(ErrorCode::device_error, "cudnn: cudnnSetStream failed: {}", cudnnGetErrorString(status));
    return handle;
  }

  // The cached graph for `spec`, built on a miss (the only slow step of the path).
  Entry& entry_for(const GraphSpec& spec, cudnnHandle_t h, int device) {
    const Key key = spec.key();
    if (auto it = index.find(key); it != index.end()) {
      lru.splice(lru.begin(), lru, it->second);
      return lru.front();
    }
    if (auto failed = failed_builds().find(key))
      core::fail(ErrorCode::unsupported, "cudnn: cuDNN cannot build this case: {}", *failed);
    BuildResult built = build_graph(h, spec);
    if (built.graph == nullptr && built.device_failure)
      core::fail(ErrorCode::device_error, "cudnn: building the cuDNN graph failed: {}", built.error);
    if (built.graph == nullptr) {
      failed_builds().add(key, built.error);
      core::fail(ErrorCode::unsupported, "cudnn: cuDNN cannot build this case: {}", built.error);
    }
    if (lru.size() >= kCacheCapacity) {
      on_device_quietly(handle_device, [] { cudaDeviceSynchronize(); });  // see clear_cache()
      index.erase(lru.back().key);
      lru.pop_back();
    }
    lru.emplace_front();
    Entry& e = lru.front();
    e.key = key;
    e.graph = std::move(built.graph);
    e.workspace = workspace_size(*e.graph);
    e.device = device;
    index.emplace(key, lru.begin());
    return e;
  }

  const std::int32_t* full_lengths(Entry& e, const core::Dims& d) {
    if (e.full_lengths != nullptr) return e.full_lengths;
    std::vector<std::int32_t> host(2 * d.B);
    for (std::int64_t b = 0; b < d.B; ++b) host[b] = std::int32_t(d.T), host[d.B + b] = std::int32_t(d.S);
    std::int32_t* dev = nullptr;
    check_cuda(cudaMalloc(&dev, host.size() * sizeof(std::int32_t)), "cudnn: lengths buffer");
    const cudaError_t status =
        cudaMemcpy(dev, host.data(), host.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice);  // once per graph
    if (status != cudaSuccess) {
      cudaFree(dev);
      check_cuda(status, "cudnn: lengths buffer");
    }
    e.full_lengths = dev;
    return dev;
  }

  // Copies host-side lengths (the missing side as T / S; device-side ones are filled in by a kernel afterwards)
  // into `dst` on the device through the pinned ring: no pageable copy, no wait on the device.
  void stage_host_lengths(const core::Problem& p, int device, cudaStream_t stream, std::int32_t* dst) {
    const std::int64_t B = p.dims.B;
    if (staging != nullptr && (staging_device != device || staging_ints < std::size_t(2 * B))) release_staging();
    if (staging == nullptr) {
      const std::size_t ints = std::size_t(2 * B);
      void* pinned = nullptr;
      check_cuda(cudaHostAlloc(&pinned, ints * kStagingSlots * sizeof(std::int32_t), cudaHostAllocDefault),
                 "cudnn: pinned staging for sequence lengths");
      staging = static_cast<std::int32_t*>(pinned);
      staging_ints = ints;
      staging_device = device;
      for (cudaEvent_t& e : staging_done)
        check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudnn: staging event");
    }
    const int slot = next_slot;
    next_slot = (next_slot + 1) % kStagingSlots;
    // Returns at once unless kStagingSlots calls are queued behind a copy that has not run yet.
    check_cuda(cudaEventSynchronize(staging_done[slot]), "cudnn: staging slot");
    std::int32_t* host = staging + std::size_t(slot) * staging_ints;
    const TensorView* views[2] = {&p.q_seqlens, &p.kv_seqlens};
    const std::int64_t full[2] = {p.dims.T, p.dims.S};
    for (int k = 0; k < 2; ++k) {
      const TensorView& t = *views[k];
      for (std::int64_t b = 0; b < B; ++b) {
        std::int32_t value = std::int32_t(full[k]);
        if (!t.empty() && t.device == Device::cpu) value = static_cast<const std::int32_t*>(t.data)[b * t.strides[0]];
        host[k * B + b] = value;  // host values were range-checked by validation
      }
    }
    check_cuda(cudaMemcpyAsync(dst, host, std::size_t(2 * B) * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream),
               "cudnn: copy sequence lengths");
    check_cuda(cudaEventRecord(staging_done[slot], stream), "cudnn: staging event");
  }
};

// The padding lengths of a call with per-batch lengths, written into the workspace at `dst`.
void place_user_lengths(State& st, const core::Problem& p, int device, cudaStream_t stream, std::int32_t* dst) {
  const TensorView& q = p.q_seqlens;
  const TensorView& kv = p.kv_seqlens;
  const bool q_dev = !q.empty() && q.device == Device::cuda;
  const bool kv_dev = !kv.empty() && kv.device == Device::cuda;
  const bool any_host = (!q.empty() && !q_dev) || (!kv.empty() && !kv_dev);
  if (any_host) st.stage_host_lengths(p, device, stream, dst);
  if (q_dev || kv_dev) {
    prepare_lengths(q_dev ? static_cast<const std::int32_t*>(q.data) : nullptr, q.strides[0],
                    kv_dev ? static_cast<const std::int32_t*>(kv.data) : nullptr, kv.strides[0], p.dims.B, p.dims.T,
                    p.dims.S, /*fill_missing=*/!any_host, dst, stream);
  }
}

RowTensor row_tensor(const TensorView& t) {
  return {t.data, {t.strides[0], t.strides[1], t.strides[2], t.strides[3]}};
}

void run_call(State& st, const core::Problem& p, const Plan& plan, cudaStream_t stream, std::size_t& used) {
  const int device = p.device_index;
  const auto& d = p.dims;
  const bool forward = p.direction == core::Direction::forward;
  cudnnHandle_t h = st.handle_for(device, stream);
  Entry& entry = st.entry_for(plan.spec, h, device);

  // Everything that can fail (build, allocations) happens before the first launch: outputs stay untouched then.
  Carver carve;
  const std::size_t at_graph = carve.add(entry.workspace);
  const std::size_t at_lengths = plan.user_lengths ? carve.add(std::size_t(2 * d.B) * sizeof(std::int32_t)) : 0;
  const std::size_t at_stats = plan.stats_in_workspace ? carve.add(std::size_t(d.B * d.N * d.T) * sizeof(float)) : 0;
  const std::int32_t* constant_lengths = plan.full_lengths ? st.full_lengths(entry, d) : nullptr;
  auto* base = static_cast<char*>(st.workspace.reserve(carve.size(), device, stream, kName));
  used = carve.size();

  Pointers ptr{};
  ptr[Slot::q] = p.q.data;
  ptr[Slot::k] = p.k.data;
  ptr[Slot::v] = p.v.data;
  ptr[Slot::o] = p.o.data;
  ptr[Slot::bias] = p.bias.data;
  float* ws_stats = plan.stats_in_workspace ? reinterpret_cast<float*>(base + at_stats) : nullptr;
  ptr[Slot::stats] = ws_stats != nullptr ? static_cast<void*>(ws_stats) : p.lse.data;
  Lengths lengths;
  if (plan.user_lengths) {
    auto* lens = reinterpret_cast<std::int32_t*>(base + at_lengths);
    place_user_lengths(st, p, device, stream, lens);
    lengths = {lens, lens + d.B};
  } else if (plan.full_lengths) {
    lengths = {constant_lengths, constant_lengths + d.B};  // the fix-ups read them as T / S, which they are
  }
  ptr[Slot::seq_len_q] = const_cast<std::int32_t*>(lengths.q);
  ptr[Slot::seq_len_kv] = const_cast<std::int32_t*>(lengths.kv);

  if (!forward) {
    ptr[Slot::d_o] = p.d_o.data;
    ptr[Slot::dq] = p.dq.data;
    ptr[Slot::dk] = p.dk.data;
    ptr[Slot::dv] = p.dv.data;
    if (plan.backward_prepare) {
      const std::int64_t strides[3] = {p.lse.strides[0], p.lse.strides[1], p.lse.strides[2]};
      prepare_backward_stats(static_cast<const float*>(p.lse.data), strides, d.B, d.N, d.T, ws_stats, stream);
    }
  }

  void* graph_workspace = entry.workspace > 0 ? base + at_graph : nullptr;
  if (auto error = execute(*entry.graph, h, ptr, graph_workspace))
    core::fail(ErrorCode::device_error, "cudnn: cuDNN failed to run the {} graph: {}",
               forward ? "forward" : "backward", *error);

  if (forward && plan.forward_fixup) {
    ForwardFixup f;
    f.B = d.B, f.N = d.N, f.T = d.T, f.S = d.S, f.Hv = d.Hv;
    f.mask = p.mask;
    f.lengths = plan.user_lengths ? lengths : Lengths{};
    f.o = row_tensor(p.o);
    f.stats = plan.spec.stats ? static_cast<const float*>(ptr[Slot::stats]) : nullptr;
    if (p.has_lse()) {
      f.lse = static_cast<float*>(p.lse.data);
      for (int k = 0; k < 3; ++k) f.lse_strides[k] = p.lse.strides[k];
    }
    f.copy_stats = p.has_lse() && plan.stats_in_workspace;
    f.check_stats = plan.check_stats;
    forward_fixup(f, stream);
  }
  if (!forward && plan.backward_fixup) {
    BackwardFixup f;
    f.B = d.B, f.N = d.N, f.K = d.K, f.T = d.T, f.S = d.S, f.Hqk = d.Hqk, f.Hv = d.Hv;
    f.mask = p.mask;
    f.lengths = plan.user_lengths ? lengths : Lengths{};
    f.dq = row_tensor(p.dq);
    f.dk = row_tensor(p.dk);
    f.dv = row_tensor(p.dv);
    backward_fixup(f, stream);
  }
}

class CudnnPath final : public core::Path {
 public:
  std::string_view name() const override { return kName; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "cuDNN fused attention via cudnn-frontend graphs (cached per shape); bf16/f16, fwd+bwd, causal/window/"
           "lengths/bias, GQA/MQA; cc ≥ 8.0";
  }
  std::optional<std::string> unavailable() const override {
    if (auto why = cuda_unavailable()) return why;
    return library_unavailable();
  }
  std::optional<std::string> why_not(const core::Problem& p) const override {
    Plan plan;
    if (auto why = make_plan(p, runtime_for(p.device_index), plan)) return why;
    if (auto failed = failed_builds().find(plan.spec.key()))
      return fmt::format("cuDNN cannot build this case: {}", *failed);
    return std::nullopt;
  }
  int auto_rank(const core::Problem&) const override { return 30; }
  void run(Context::Impl& ctx, const core::Problem& p) const override {
    DeviceGuard guard(p.device_index);
    Plan plan;
    if (auto why = make_plan(p, runtime_for(p.device_index), plan))  // why_not() passed; this only re-derives
      core::fail(ErrorCode::unsupported, "cudnn: {}", *why);
    auto& st = ctx.state_for<State>(kName);
    std::lock_guard lock(st.mutex);
    run_call(st, p, plan, static_cast<cudaStream_t>(ctx.stream), ctx.last_workspace_bytes);
  }
};

}  // namespace
}  // namespace cudnn

const core::Path& cudnn_path() {
  static const cudnn::CudnnPath path;
  return path;
}

}  // namespace attnlab::cuda
