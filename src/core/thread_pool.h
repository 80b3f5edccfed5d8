// ThreadPool: the CPU worker threads of one Context. Starting a std::thread per call costs a clone, a fresh stack
// and a join on every call; these threads start at the context's first multi-threaded call and wait between calls.
// One context is used from one thread at a time (attention.h), so a pool runs one job at a time and needs no
// protection against concurrent run() calls; different contexts never share a pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace attnlab::core {

class ThreadPool {
 public:
  ThreadPool() = default;
  ~ThreadPool();  // stops and joins every worker; never throws
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs body(arg, w) for every w in [0, workers): w = 0 on the calling thread, the others on pool threads, and
  // returns when every one of them has returned. Starts the threads the call needs that are not running yet. body
  // must not throw. If the system refuses a new thread, the job runs on the threads there are (callers hand out
  // work dynamically, so fewer workers change only the speed).
  void run(int workers, void (*body)(void*, int), void* arg) noexcept;

 private:
  // The job word: (job number << kWorkerBits) | workers of that job. One atomic word, so that a thread not taking
  // part in a job learns so without reading any other field, which the next job may already be writing.
  static constexpr int kWorkerBits = 16;
  static constexpr std::uint64_t kWorkerMask = (std::uint64_t(1) << kWorkerBits) - 1;

  int grow(int threads) noexcept;
  void worker_loop(int index, std::uint64_t seen) noexcept;
  std::uint64_t wait_for_job(std::uint64_t seen) noexcept;
  void wait_until_done() noexcept;

  std::vector<std::thread> threads_;  // touched only by the thread calling run() and the destructor
  std::mutex mutex_;
  std::condition_variable job_posted_;  // workers wait here for the job word to change
  std::condition_variable job_done_;    // run() waits here for the last worker of its job
  std::atomic<std::uint64_t> job_{0};
  std::atomic<int> running_{0};  // pool threads still inside the current job's body
  std::atomic<bool> stop_{false};
  // The current job. Written only while no pool thread is inside a job (running_ == 0), read by its workers.
  void (*body_)(void*, int) = nullptr;
  void* arg_ = nullptr;
};

}  // namespace attnlab::core
