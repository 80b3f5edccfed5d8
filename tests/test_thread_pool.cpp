// A context's CPU worker threads, seen through the public API: they start at its first multi-threaded call, are
// reused by every later call (the process's thread count stays put across calls), grow when a call asks for more,
// and end with the context. Calls on one context stay correct and give the same bytes however often they repeat
// and however the thread count changes between them.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness.h"

namespace attnlab_test {
namespace {

// The process's thread count as the kernel reports it, or -1 where /proc/self/status has none.
int process_threads() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// The thread count once it reaches `expected`, or what it is after 5 s. A joined thread can still be counted for
// a moment: the kernel lets join return before it has reaped the thread.
int settled_threads(int expected) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int now = process_threads();
  while (now != expected && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    now = process_threads();
  }
  return now;
}

// The thread count to compare against: after one thread has come and gone, since the first thread a process
// starts can bring a helper thread of the runtime with it (ThreadSanitizer's, for one), and once it is steady.
int baseline_threads() {
  std::thread([] {}).join();
  int now = process_threads();
  for (int i = 0; i < 500; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int next = process_threads();
    if (next == now) break;
    now = next;
  }
  return now;
}

#define SKIP_WITHOUT_PROC() \
  if (process_threads() < 0) GTEST_SKIP() << "no thread count in /proc/self/status on this system"

// Enough tasks in every phase of both paths (flash: 24 query blocks, 12 key blocks; naive: 80 row tasks, 12 key
// tasks) that a call on up to 8 threads uses all of them, and naive is far above its single-thread size limit.
Case pool_case(const std::string& path, DType dtype, int threads) {
  Case c;
  c.path = path;
  c.dtype = dtype;
  c.B = 2, c.T = 150, c.S = 150, c.N = 4, c.K = 2, c.Hqk = 64, c.Hv = 64;
  c.mask.causal = true;
  c.threads = threads;
  return c;
}

struct Outputs {
  std::vector<std::uint8_t> o, lse;
  bool operator==(const Outputs&) const = default;
};

Outputs run_forward(attnlab::Context& ctx, const Case& c, Tensors& t) {
  t.o.poison();
  t.lse.poison();
  attnlab::forward(ctx, forward_args(c, t));
  return {t.o.snapshot(), t.lse.snapshot()};
}

TEST(ThreadPool, RepeatedForwardCallsGiveSameBytes) {
  ATTNLAB_TEST_RNG(rng);
  for (const std::string& path : cpu_paths())
    for (DType dtype : {DType::f32, DType::bf16})
      for (int threads : {2, 3}) {
        const Case c = pool_case(path, dtype, threads);
        SCOPED_TRACE(c.str());
        Tensors t = make_inputs(c, rng);
        const ExpectedForward expected = expected_forward(c, t);
        attnlab::Context ctx;
        ctx.set_num_threads(threads);
        const Outputs first = run_forward(ctx, c, t);
        check_forward_outputs(c, t, expected);
        for (int r = 1; r < 50; ++r) ASSERT_TRUE(run_forward(ctx, c, t) == first) << "call " << r << " differs";
      }
}

TEST(ThreadPool, RepeatedBackwardCallsGiveSameBytes) {
  ATTNLAB_TEST_RNG(rng);
  for (const std::string& path : cpu_paths()) {
    const Case c = pool_case(path, DType::f32, 2);
    SCOPED_TRACE(c.str());
    Tensors t = make_inputs(c, rng);
    GradTensors g = make_grads(c, rng);
    attnlab::Context ctx;
    ctx.set_num_threads(c.threads);
    attnlab::forward(ctx, forward_args(c, t));
    std::vector<std::uint8_t> first[3];
    for (int r = 0; r < 20; ++r) {
      HostTensor* grads[3] = {&g.dq, &g.dk, &g.dv};
      for (HostTensor* x : grads) x->poison();
      attnlab::backward(ctx, backward_args(c, t, g));
      for (int i = 0; i < 3; ++i) {
        if (r == 0) first[i] = grads[i]->snapshot();
        ASSERT_EQ(grads[i]->snapshot(), first[i]) << "call " << r << " differs in gradient " << i;
      }
    }
    // Accuracy on the same context, after all those calls (check_backward's own forward and backward).
    Case on_ctx = c;
    on_ctx.context = &ctx;
    check_backward(on_ctx, rng);
  }
}

// The thread count changes between calls on one context: 1 (no pool threads), 2, 8 (the pool grows), 3 (it keeps
// its 7 threads and uses 2 of them). The task split does not depend on the worker count, so every call gives the
// bytes of the first.
TEST(ThreadPool, ThreadCountChangesBetweenCalls) {
  SKIP_WITHOUT_PROC();
  ATTNLAB_TEST_RNG(rng);
  for (const std::string& path : cpu_paths()) {
    SCOPED_TRACE(path);
    const int start = baseline_threads();
    attnlab::Context ctx;
    Outputs first;
    int most = 1;
    for (int threads : {1, 2, 8, 3}) {
      Case c = pool_case(path, DType::bf16, threads);
      c.context = &ctx;
      check_forward(c, rng);  // fresh inputs, full checks
      check_backward(c, rng);
      most = std::max(most, threads);
      EXPECT_EQ(settled_threads(start + most - 1), start + most - 1) << "after calls on " << threads << " threads";
    }
    const Case c = pool_case(path, DType::f32, 1);
    Tensors t = make_inputs(c, rng);
    for (int threads : {1, 2, 8, 3, 1}) {
      ctx.set_num_threads(threads);
      const Outputs out = run_forward(ctx, c, t);
      if (threads == 1 && first.o.empty()) first = out;
      EXPECT_TRUE(out == first) << "bytes on " << threads << " threads differ from 1 thread";
    }
  }
}

// What shows that the threads persist: while a context lives, the process has start + workers − 1 threads after
// every call, and the same number after 50 calls (threads started per call would be gone after each call).
TEST(ThreadPool, ThreadsPersistAcrossCalls) {
  SKIP_WITHOUT_PROC();
  ATTNLAB_TEST_RNG(rng);
  for (const std::string& path : cpu_paths())
    for (int threads : {2, 4}) {
      const Case c = pool_case(path, DType::f32, threads);
      SCOPED_TRACE(c.str());
      Tensors t = make_inputs(c, rng);
      GradTensors g = make_grads(c, rng);
      const int start = baseline_threads();
      {
        attnlab::Context ctx;
        ctx.set_num_threads(threads);
        EXPECT_EQ(process_threads(), start) << "a context starts no thread before its first call";
        for (int r = 0; r < 50; ++r) {
          attnlab::forward(ctx, forward_args(c, t));
          if (r % 10 == 9) attnlab::backward(ctx, backward_args(c, t, g));
          ASSERT_EQ(process_threads(), start + threads - 1) << "after call " << r;
        }
      }
      EXPECT_EQ(settled_threads(start), start) << "the context's threads outlived it";
    }
}

// Contexts created and destroyed in a loop, each right after multi-threaded calls (so its workers may still be on
// their way back to waiting), moved, or never used; then many at once on several threads. Nothing hangs (the test
// has a time limit) and every thread ends with its context.
TEST(ThreadPool, ContextsComeAndGoWithoutLeakingThreads) {
  SKIP_WITHOUT_PROC();
  ATTNLAB_TEST_RNG(rng);
  const Case c = pool_case("cpu-flash", DType::f32, 2);
  Tensors t = make_inputs(c, rng);
  const ExpectedForward expected = expected_forward(c, t);
  const int start = baseline_threads();

  for (int i = 0; i < 40; ++i) {
    attnlab::Context ctx;
    const int threads = 2 + i % 4;
    ctx.set_num_threads(threads);
    attnlab::forward(ctx, forward_args(c, t));
    if (i % 8 == 0) check_forward_outputs(c, t, expected);
    if (i % 2) attnlab::forward(ctx, forward_args(c, t));
  }
  EXPECT_EQ(settled_threads(start), start) << "after 40 contexts";

  {
    attnlab::Context unused;  // never called: no threads to start or stop
    unused.set_num_threads(4);
  }
  {
    attnlab::Context a;
    a.set_num_threads(3);
    attnlab::forward(a, forward_args(c, t));
    attnlab::Context b(std::move(a));  // the threads move with the context's state
    t.o.poison();
    attnlab::forward(b, forward_args(c, t));
    check_forward_outputs(c, t, expected);
    EXPECT_EQ(process_threads(), start + 2) << "after a move";
    attnlab::Context d;
    d.set_num_threads(2);
    attnlab::forward(d, forward_args(c, t));
    d = std::move(b);  // d's own thread ends; b's two now belong to d
    EXPECT_EQ(settled_threads(start + 2), start + 2) << "after a move assignment";
  }
  EXPECT_EQ(settled_threads(start), start) << "after the moved contexts";

  std::vector<Tensors> inputs(3);
  for (Tensors& mine : inputs) mine = make_inputs(c, rng);
  std::vector<std::string> errors(inputs.size());
  std::vector<std::thread> callers;
  for (std::size_t k = 0; k < inputs.size(); ++k)
    callers.emplace_back([&, k] {
      for (int i = 0; i < 10; ++i) {
        attnlab::Context ctx;
        ctx.set_num_threads(2 + (i + int(k)) % 3);
        try {
          attnlab::forward(ctx, forward_args(c, inputs[k]));
        } catch (const std::exception& e) {
          errors[k] = e.what();
        }
      }
    });
  for (std::thread& th : callers) th.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(settled_threads(start), start) << "after contexts on several threads";
}

}  // namespace
}  // namespace attnlab_test
