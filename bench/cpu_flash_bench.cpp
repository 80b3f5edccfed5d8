// cpu-flash throughput and memory.
//
//   cpu_flash_bench [Google Benchmark flags]   GFLOP/s of the forward (and backward) pass, f32, on all hardware
//                                              threads (and forward on 1 thread)
//   cpu_flash_bench --rss T [bwd]              peak RSS of one call at (B, T, N, H) = (1, T, 8, 64), S = T, run in a
//                                              fresh process: shows the extra memory does not grow with T·S
//
// FLOPs are counted as docs/design.md §5 does: 4·B·N·T·S·H for the forward (half under a causal mask),
// 2.5× that backward.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "attnlab/attention.h"

namespace {

struct Case {
  std::int64_t B, T, N, H;
  bool causal;
};

// Q, K, V, O (and the backward tensors) of one case, filled with uniform(−1, 1) values.
struct Tensors {
  Case c;
  std::vector<float> q, k, v, o, lse, d_o, dq, dk, dv;
  explicit Tensors(const Case& cs, bool backward) : c(cs) {
    const std::size_t n = std::size_t(c.B * c.T * c.N * c.H);
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto* t : {&q, &k, &v}) {
      t->resize(n);
      for (float& x : *t) x = u(rng);
    }
    o.assign(n, 0.0f);
    lse.assign(std::size_t(c.B * c.N * c.T), 0.0f);
    if (backward) {
      d_o.resize(n);
      for (float& x : d_o) x = u(rng);
      dq.assign(n, 0.0f);
      dk.assign(n, 0.0f);
      dv.assign(n, 0.0f);
    }
  }
  attnlab::TensorView view(std::vector<float>& t) {
    return attnlab::TensorView::contiguous(t.data(), attnlab::DType::f32, {c.B, c.T, c.N, c.H});
  }
  attnlab::ForwardArgs forward_args() {
    attnlab::ForwardArgs a;
    a.q = view(q), a.k = view(k), a.v = view(v), a.o = view(o);
    a.lse = attnlab::TensorView::contiguous(lse.data(), attnlab::DType::f32, {c.B, c.N, c.T});
    a.options.path = "cpu-flash";
    a.options.mask.causal = c.causal;
    return a;
  }
  attnlab::BackwardArgs backward_args() {
    attnlab::BackwardArgs a;
    a.q = view(q), a.k = view(k), a.v = view(v), a.o = view(o), a.d_o = view(d_o);
    a.dq = view(dq), a.dk = view(dk), a.dv = view(dv);
    a.lse = attnlab::TensorView::contiguous(lse.data(), attnlab::DType::f32, {c.B, c.N, c.T});
    a.options.path = "cpu-flash";
    a.options.mask.causal = c.causal;
    return a;
  }
};

double forward_flops(const Case& c) {
  return 4.0 * double(c.B * c.N) * double(c.T) * double(c.T) * double(c.H) * (c.causal ? 0.5 : 1.0);
}

// state.range(0): threads (the hardware thread count for the headline numbers; 1 to see one core's throughput,
// whose CPU-time column is not disturbed by other processes sharing the machine).
void BM_forward(benchmark::State& state, Case c) {
  Tensors t(c, false);
  attnlab::Context ctx;
  ctx.set_num_threads(int(state.range(0)));
  const attnlab::ForwardArgs args = t.forward_args();
  for (auto _ : state) {
    attnlab::forward(ctx, args);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(forward_flops(c) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_backward(benchmark::State& state, Case c) {
  Tensors t(c, true);
  attnlab::Context ctx;
  ctx.set_num_threads(int(state.range(0)));
  attnlab::forward(ctx, t.forward_args());
  const attnlab::BackwardArgs args = t.backward_args();
  for (auto _ : state) {
    attnlab::backward(ctx, args);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.5 * forward_flops(c) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void register_benchmarks() {
  const Case cases[] = {
      {4, 1024, 8, 64, false}, {4, 1024, 8, 64, true}, {1, 4096, 8, 64, false}, {1, 4096, 8, 64, true}};
  const int all = int(std::max(1u, std::thread::hardware_concurrency()));
  auto name = [](const char* dir, const Case& c) {
    return std::string(dir) + "_f32/B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_N" +
           std::to_string(c.N) + "_H" + std::to_string(c.H) + (c.causal ? "_causal" : "");
  };
  for (const Case& c : cases)
    benchmark::RegisterBenchmark(name("fwd", c).c_str(), BM_forward, c)
        ->ArgName("threads")->Arg(all)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (const Case& c : cases)
    benchmark::RegisterBenchmark(name("bwd", c).c_str(), BM_backward, c)
        ->ArgName("threads")->Arg(all)->UseRealTime()->Unit(benchmark::kMillisecond);
}

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;  // KiB on Linux
}

// Peak RSS with only the tensors allocated and touched, then after one call: the difference is what the call adds.
int rss_mode(std::int64_t T, bool backward) {
  const Case c{1, T, 8, 64, false};
  Tensors t(c, backward);
  attnlab::Context ctx;
  const long before = peak_rss_kib();
  attnlab::forward(ctx, t.forward_args());
  const long after_fwd = peak_rss_kib();
  long after_bwd = after_fwd;
  if (backward) {
    attnlab::backward(ctx, t.backward_args());
    after_bwd = peak_rss_kib();
  }
  const double scores_mib = double(c.B * c.N) * double(T) * double(T) * 4.0 / (1 << 20);
  std::printf("T=S=%lld B=1 N=8 H=64 f32: tensors %.1f MiB; peak RSS before call %ld KiB, after forward %ld KiB "
              "(+%ld KiB)",
              static_cast<long long>(T), double(t.q.size() * 4 * (backward ? 8 : 4)) / (1 << 20), before, after_fwd,
              after_fwd - before);
  if (backward) std::printf(", after backward %ld KiB (+%ld KiB)", after_bwd, after_bwd - after_fwd);
  std::printf("; a materialized B·N·T·S f32 score matrix would be %.0f MiB\n", scores_mib);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--rss") == 0)
    return rss_mode(std::atoll(argv[2]), argc >= 4 && std::strcmp(argv[3], "bwd") == 0);
  register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
