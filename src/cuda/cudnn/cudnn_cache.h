// What the cudnn path keeps in a context: one cuDNN handle per device and, per device, a bounded LRU cache of
// built graphs keyed by everything a graph depends on (GraphSpec::key()), with the cases cuDNN refused to build.
// Both the padded calls (cudnn_path.cpp) and the packed / paged serving calls (cudnn_varlen.cpp) find their
// graphs here, so a context builds each graph once whichever API asks for it.
#pragma once

#include <cudnn.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/context_impl.h"
#include "cuda/common/library_handle.h"
#include "cuda/cudnn/cudnn_graphs.h"
#include "cuda/cudnn/cudnn_plan.h"

namespace attnlab::cuda::cudnn {

inline constexpr const char* kPathName = "cudnn";

// cudnnGetVersion() of the loaded library.
int runtime_version();
// Why the loaded cuDNN cannot run the path (too old, a version with known SDPA bugs, no graph library), or nullopt.
std::optional<std::string> library_unavailable();
Runtime runtime_for(int device);

struct CudnnLibrary {
  using Handle = cudnnHandle_t;
  static constexpr const char* name = "cuDNN";
  static constexpr int kOutOfMemory = CUDNN_STATUS_ALLOC_FAILED;
  static int create(Handle* h) { return int(cudnnCreate(h)); }
  static void destroy(Handle h) noexcept { cudnnDestroy(h); }
  static const char* error(int status) { return cudnnGetErrorString(cudnnStatus_t(status)); }
};

// One cached graph.
struct Entry {
  GraphSpec::Key key{};
  std::shared_ptr<const Graph> graph;
  std::size_t workspace = 0;
  bool captured = false;  // a captured CUDA graph runs its plan: kept until the context is destroyed
};

// A graph evicted from the cache while one of its kernels may still run: destroyed once the event recorded on the
// stream at eviction has completed (checked without waiting at later evictions; waited for at teardown only).
// Calls on the context's resources are ordered across streams (call_scratch.h), so that event follows every
// earlier use.
struct Retired {
  std::shared_ptr<const Graph> graph;
  cudaEvent_t done = nullptr;
};

// The graphs of one GPU: plans are built for one architecture and belong to the handle they were built with.
class DeviceCache {
 public:
  explicit DeviceCache(int device) : device_(device) {}
  DeviceCache(const DeviceCache&) = delete;
  DeviceCache& operator=(const DeviceCache&) = delete;
  ~DeviceCache();

  // The cached graph for `spec`, built on a miss (the only slow step of the path); nullptr with `reason` set when
  // the call cannot have it: cuDNN cannot build it (remembered, so the next call refuses at once), or it would be
  // built while the stream captures a graph.
  Entry* entry_for(const GraphSpec& spec, cudnnHandle_t h, const Tuning& tuning, cudaStream_t stream,
                   std::string& reason);

 private:
  void collect_retired();
  void evict_one(cudaStream_t stream);

  int device_ = -1;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<GraphSpec::Key, std::list<Entry>::iterator, KeyHash> index_;
  std::unordered_map<GraphSpec::Key, std::string, KeyHash> failed_;  // cases cuDNN would not build, with its reason
  std::vector<Retired> retired_;
};

struct State : PathState {
  std::mutex mutex;  // a context is meant for one thread at a time; this keeps misuse from corrupting the cache
  std::vector<std::unique_ptr<DeviceCache>> caches;  // by device index; destroyed before the handles they use
  LibraryHandles<CudnnLibrary> handles;

  ~State() override { caches.clear(); }  // the plans first, then (members in reverse order) the handles
  DeviceCache& cache_for(int device);
};

// A call's graph, found with the context's cudnn state locked (`lock`) and the call's device current: the handle
// (made on first use, bound to the context's stream) and the cached graph of `spec`. `reason` is set, and nothing
// else, when the call cannot have them now.
struct GraphLookup {
  std::optional<std::string> reason;
  Entry* entry = nullptr;
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  std::unique_lock<std::mutex> lock;
};
GraphLookup find_graph(Context::Impl& ctx, int device, const GraphSpec& spec, const Tuning& tuning);

}  // namespace attnlab::cuda::cudnn
