// What a Context owns. Paths keep their per-context state (library handles, plan caches, workspaces) here under
// their own name, created on first use and destroyed with the context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "attnlab/attention.h"
#include "core/thread_pool.h"

namespace attnlab {

struct PathState {
  virtual ~PathState() = default;
};

// Hidden: an implementation detail, not part of libattnlab's exported ABI.
struct __attribute__((visibility("hidden"))) Context::Impl {
  void* stream = nullptr;
  // Bumped by every set_stream(): GPU paths order a call after the last one that used the context's resources on
  // an earlier stream. A number, not the handle, since a new stream may reuse a destroyed one's handle.
  std::uint64_t stream_epoch = 0;
  int num_threads = 0;  // 0 = all hardware threads
  core::ThreadPool pool;  // the CPU paths' workers: none until the first multi-threaded call, then kept
  Tuning tuning = Tuning::from_environment();
  std::map<std::string, std::unique_ptr<PathState>, std::less<>> path_states;

  // Per call, reported in RunInfo: scratch bytes the path used, device allocations it made, and which member of a
  // family path ran (empty when the path runs its own kernels; `flash` names flash-sm80 or flash-sm90 here).
  std::size_t last_workspace_bytes = 0;
  int device_allocations = 0;
  std::string_view ran_member;

  // The state a path keeps in this context, default-constructed on first use.
  template <class State>
  State& state_for(std::string_view path) {
    auto it = path_states.find(path);
    if (it == path_states.end()) it = path_states.emplace(std::string(path), std::make_unique<State>()).first;
    return static_cast<State&>(*it->second);
  }
  // Threads a CPU path should use for this call.
  int threads() const;
};

}  // namespace attnlab
