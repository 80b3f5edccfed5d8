// parallel_for: run fn(task) for task in [0, tasks) on up to `threads` threads (work handed out one task at a
// time, so uneven tasks, e.g. causal rows, balance themselves). Plain std::thread: no OpenMP runtime to ship.
// fn must not throw; allocate everything a task needs before calling.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace attnlab::core {

template <class Fn>
void parallel_for(std::int64_t tasks, int threads, Fn&& fn) {
  const int workers = int(std::clamp<std::int64_t>(tasks, 1, std::max(threads, 1)));
  if (workers == 1) {
    for (std::int64_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  std::atomic<std::int64_t> next{0};
  auto work = [&](int worker) {
    for (std::int64_t t = next.fetch_add(1); t < tasks; t = next.fetch_add(1)) fn(t, worker);
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (int w = 1; w < workers; ++w) pool.emplace_back(work, w);
  work(0);
  for (auto& t : pool) t.join();
}

// Number of workers parallel_for will use (for sizing per-worker scratch before the call).
inline int parallel_workers(std::int64_t tasks, int threads) {
  return int(std::clamp<std::int64_t>(tasks, 1, std::max(threads, 1)));
}

}  // namespace attnlab::core
