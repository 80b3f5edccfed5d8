// parallel_for: run fn(task, worker) for task in [0, tasks) on up to `threads` workers of a context's ThreadPool
// (work handed out one task at a time, so uneven tasks, e.g. causal rows, balance themselves). The calling thread
// is worker 0. Plain std::thread underneath: no OpenMP runtime to ship.
// fn must not throw; allocate everything a task needs before calling.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "core/thread_pool.h"

namespace attnlab::core {

// Number of workers parallel_for will use at most (for sizing per-worker scratch before the call); every worker
// index fn sees is below it.
inline int parallel_workers(std::int64_t tasks, int threads) {
  return int(std::clamp<std::int64_t>(tasks, 1, std::max(threads, 1)));
}

template <class Fn>
void parallel_for(ThreadPool& pool, std::int64_t tasks, int threads, Fn&& fn) {
  const int workers = parallel_workers(tasks, threads);
  if (workers == 1) {
    for (std::int64_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  std::atomic<std::int64_t> next{0};
  auto work = [&](int worker) {
    for (std::int64_t t = next.fetch_add(1); t < tasks; t = next.fetch_add(1)) fn(t, worker);
  };
  using Work = decltype(work);
  pool.run(workers, [](void* w, int worker) { (*static_cast<Work*>(w))(worker); }, &work);
}

}  // namespace attnlab::core
