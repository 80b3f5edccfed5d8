// ThreadPool. A job is posted by bumping the job word under the mutex and waking every worker; workers whose index
// is below the job's worker count run the body, then the last one to finish wakes run(). The next job is posted
// only after running_ has dropped to zero, so no worker of job k ever sees job k+1's body or argument.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace attnlab::core {

namespace {

// How long a thread polls before it blocks, when waiting for the next job (workers) or for the last worker of
// the job (the caller). Waking a blocked thread goes through the kernel, and on a virtual machine through the
// hypervisor when the thread's vCPU has gone idle: tens of µs per wake-up. A short poll catches the common
// cases without it (the next call of a caller calling back to back, the phases of one backward call, workers
// finishing their last task a moment after the caller) and costs at most this much CPU time per job otherwise.
constexpr std::chrono::microseconds kSpin{50};

// Polls pred() for up to kSpin; true as soon as it holds. Between polls it yields rather than executing pause:
// a thread that shares its CPU with the one it waits for (more workers than CPUs, or the scheduler has not yet
// moved it) then lets that one run; a pause loop made jobs after idle gaps slower on a virtual machine than no
// polling at all (docs/perf-notes.md, "CPU thread pool").
template <class Pred>
bool spin_until(Pred pred) noexcept {
  const auto end = std::chrono::steady_clock::now() + kSpin;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return pred();
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_relaxed);
    // A new job word with no workers: wakes every thread, and none of them runs anything.
    job_.store(((job_.load(std::memory_order_relaxed) >> kWorkerBits) + 1) << kWorkerBits, std::memory_order_release);
  }
  job_posted_.notify_all();
  // join fails only for a thread that is not joinable or is the caller: neither can be a pool thread here.
  for (std::thread& t : threads_) t.join();
}

int ThreadPool::grow(int threads) noexcept {
  const std::uint64_t current = job_.load(std::memory_order_relaxed);
  while (int(threads_.size()) < threads) {
    try {
      // A new thread starts having "seen" the current job word, so it waits for the job about to be posted.
      threads_.emplace_back(&ThreadPool::worker_loop, this, int(threads_.size()) + 1, current);
    } catch (...) {  // std::system_error (no more threads) or bad_alloc: run on the threads there are
      break;
    }
  }
  return int(threads_.size());
}

void ThreadPool::run(int workers, void (*body)(void*, int), void* arg) noexcept {
  workers = std::min<int>(workers, int(kWorkerMask));
  if (workers > 1) workers = std::min(workers, grow(workers - 1) + 1);
  if (workers <= 1) {
    body(arg, 0);
    return;
  }
  body_ = body;
  arg_ = arg;
  running_.store(workers - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::uint64_t number = (job_.load(std::memory_order_relaxed) >> kWorkerBits) + 1;
    job_.store((number << kWorkerBits) | std::uint64_t(workers), std::memory_order_release);
  }
  job_posted_.notify_all();
  body(arg, 0);
  wait_until_done();
}

void ThreadPool::wait_until_done() noexcept {
  auto done = [this] { return running_.load(std::memory_order_acquire) == 0; };
  if (spin_until(done)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  job_done_.wait(lock, done);
}

std::uint64_t ThreadPool::wait_for_job(std::uint64_t seen) noexcept {
  auto posted = [this, seen] { return job_.load(std::memory_order_acquire) != seen; };
  if (!spin_until(posted)) {
    std::unique_lock<std::mutex> lock(mutex_);
    job_posted_.wait(lock, posted);
  }
  return job_.load(std::memory_order_acquire);
}

void ThreadPool::worker_loop(int index, std::uint64_t seen) noexcept {
  for (;;) {
    seen = wait_for_job(seen);
    if (stop_.load(std::memory_order_relaxed)) return;  // stop_ is stored before the job word that announces it
    if (std::uint64_t(index) >= (seen & kWorkerMask)) continue;  // not one of this job's workers
    body_(arg_, index);
    if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Taking the mutex orders this against run()'s check-then-wait, so the wake-up cannot be lost.
      { std::lock_guard<std::mutex> lock(mutex_); }
      job_done_.notify_one();
    }
  }
}

}  // namespace attnlab::core
