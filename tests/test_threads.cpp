// Concurrency: "one context per thread" (attention.h). Threads, each with its own Context, call forward and
// backward at the same time; every result must be correct, and repeated forward calls give the same bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace attnlab_test {
namespace {

struct Job {
  Case c;
  Tensors t;
  ExpectedForward expected;
  std::vector<std::vector<std::uint8_t>> o_runs, lse_runs;
  std::string error;
};

Job make_job(const Case& c, Rng& rng) {
  Job j;
  j.c = c;
  j.t = make_inputs(c, rng);
  j.expected = expected_forward(c, j.t);
  return j;
}

// Runs every job on its own thread, each `repeats` times, all released at once.
void run_concurrently(std::vector<Job>& jobs, int repeats) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (Job& job : jobs)
    threads.emplace_back([&job, &ready, repeats, n = int(jobs.size())] {
      attnlab::Context ctx;
      if (job.c.threads) ctx.set_num_threads(job.c.threads);
      ++ready;
      while (ready.load() < n) std::this_thread::yield();
      for (int r = 0; r < repeats; ++r) {
        job.t.o.poison();
        job.t.lse.poison();
        try {
          const attnlab::RunInfo info = attnlab::forward(ctx, forward_args(job.c, job.t));
          if (info.path != job.c.path) job.error = "ran " + info.path;
        } catch (const std::exception& e) {
          job.error = e.what();
          return;
        }
        job.o_runs.push_back(job.t.o.snapshot());
        job.lse_runs.push_back(job.t.lse.snapshot());
      }
    });
  for (auto& th : threads) th.join();
}

void check_jobs(const std::vector<Job>& jobs) {
  for (const Job& job : jobs) {
    SCOPED_TRACE(job.c.str());
    ASSERT_EQ(job.error, "");
    check_forward_outputs(job.c, job.t, job.expected);
    for (std::size_t r = 1; r < job.o_runs.size(); ++r) {
      EXPECT_EQ(job.o_runs[r], job.o_runs[0]) << "run " << r << " gave different O bytes";
      EXPECT_EQ(job.lse_runs[r], job.lse_runs[0]) << "run " << r << " gave different LSE bytes";
    }
  }
}

TEST(Threads, TwoContextsForwardAtOnce) {
  ATTNLAB_TEST_RNG(rng);
  Case a;
  a.path = "cpu-flash";
  a.dtype = DType::bf16;
  a.B = 2, a.T = 150, a.S = 171, a.N = 4, a.K = 2, a.Hqk = 64, a.Hv = 40;
  a.mask.causal = true;
  Case b;
  b.path = "cpu-naive";
  b.dtype = DType::f32;
  b.B = 3, b.T = 97, b.S = 130, b.N = 3, b.K = 1, b.Hqk = 40, b.Hv = 72;
  b.bias = BiasKind::f32;
  b.softcap = 6.0f;
  std::vector<Job> jobs;
  jobs.push_back(make_job(a, rng));
  jobs.push_back(make_job(b, rng));
  run_concurrently(jobs, 4);
  check_jobs(jobs);
}

TEST(Threads, SamePathManyContextsWithInnerThreads) {
  ATTNLAB_TEST_RNG(rng);
  std::vector<Job> jobs;
  for (int i = 0; i < 4; ++i) {
    Case c;
    c.path = i % 2 ? "cpu-flash" : "cpu-naive";
    c.dtype = i < 2 ? DType::f16 : DType::f32;
    c.B = 2, c.T = 60 + i, c.S = 90 - i, c.N = 2, c.K = 1, c.Hqk = 32, c.Hv = 32;
    c.mask.window_left = 10;
    c.q_lens = {60 + i, 17};
    c.threads = 2;  // each context runs its own worker threads
    jobs.push_back(make_job(c, rng));
  }
  run_concurrently(jobs, 3);
  check_jobs(jobs);
}

TEST(Threads, TwoContextsBackwardAtOnce) {
  ATTNLAB_TEST_RNG(rng);
  std::vector<Case> cases(2);
  cases[0].path = "cpu-flash";
  cases[0].dtype = DType::f32;
  cases[1].path = "cpu-naive";
  cases[1].dtype = DType::bf16;
  for (Case& c : cases) {
    c.B = 2, c.T = 70, c.S = 83, c.N = 4, c.K = 2, c.Hqk = 32, c.Hv = 24;
    c.mask.causal = true;
  }
  // Inputs, forward outputs and the reference gradients first; then both backward calls at once.
  std::vector<Tensors> t;
  std::vector<GradTensors> g;
  std::vector<ref::Backward> r64, same, given;
  for (int i = 0; i < 2; ++i) {
    t.push_back(make_inputs(cases[i], rng));
    g.push_back(make_grads(cases[i], rng));
    attnlab::Context ctx;
    attnlab::forward(ctx, forward_args(cases[i], t[i]));
    const ref::Problem p = reference_problem(cases[i], t[i]);
    r64.push_back(ref::backward(p, g[i].d_o.values()));
    const std::vector<double> o = t[i].o.values();
    same.push_back(ref::backward_in_dtype(p, g[i].d_o.values(), cases[i].dtype, &o));
    const std::vector<double> lse = t[i].lse.values();
    given.push_back(ref::backward(p, g[i].d_o.values(), &o, &lse));
  }
  std::atomic<int> ready{0};
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      attnlab::Context ctx;
      ++ready;
      while (ready.load() < 2) std::this_thread::yield();
      try {
        attnlab::backward(ctx, backward_args(cases[i], t[i], g[i]));
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(cases[i].str());
    EXPECT_EQ(errors[i], "");
    EXPECT_TRUE(meets_criterion("dQ", cases[i].dtype, g[i].dq.values(), r64[i].dq, same[i].dq,
                                &given[i].dq, true));
    EXPECT_TRUE(meets_criterion("dK", cases[i].dtype, g[i].dk.values(), r64[i].dk, same[i].dk,
                                &given[i].dk, true));
    EXPECT_TRUE(meets_criterion("dV", cases[i].dtype, g[i].dv.values(), r64[i].dv, same[i].dv,
                                &given[i].dv, true));
  }
}

}  // namespace
}  // namespace attnlab_test
