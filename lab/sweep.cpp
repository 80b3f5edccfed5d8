// attnlab sweep seq|batch|te — the codelab's sweeps: every path timed (timing.h) over sequence lengths
// T = S ∈ {64, …, 1024} at B=4, N=8, H=64 (step 7, `seq`), over batch sizes B ∈ {1, …, 16} at T=256 (step 7,
// `batch`), or over T = S ∈ {128, …, 2048} causal at the same B, N, H (step 9's TransformerEngine sweep, `te`, whose
// peers — TransformerEngine, JAX's xla and cudnn — come from bench/peers.py on bench/sweep_te.json). Shown as one
// table (rows = values, columns = paths) and the codelab's observation next to what was measured. --graph adds a
// column per CUDA path timed from CUDA-graph replays (graph_bench.cpp).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <attnlab/attention.h>

#include "bench_core.h"
#include "case.h"
#include "experiment.h"
#include "progress.h"
#include "report/report_flags.h"
#include "results.h"
#include "runs.h"
#include "table.h"
#include "timing.h"

namespace lab {
namespace {

std::vector<std::int64_t> default_values(const std::string& what) {
  if (what == "seq") return {64, 128, 256, 512, 1024};
  if (what == "te") return {128, 256, 512, 1024, 2048};  // the codelab's TE_SEQ_LENS
  return {1, 2, 4, 8, 16};
}

// The codelab runs TransformerEngine and JAX on the same shapes; this is how to get their rows next to ours.
constexpr const char* kTePeers =
    "peers: TransformerEngine (te) and JAX (jax-xla, jax-cudnn) on the same shapes: python3 bench/peers.py "
    "--workloads bench/sweep_te.json --peers jax-xla,jax-cudnn,te --out te-peers.jsonl, then add --report DIR "
    "--merge te-peers.jsonl here";

// The naive path (it materializes the scores) and the first fused one, for the codelab's comparison; empty names
// when the sweep has no such pair.
std::pair<std::string, std::string> naive_and_fused(const std::vector<std::string>& paths) {
  std::string naive, fused;
  for (const std::string& p : paths) {
    if (p.ends_with("-naive")) {
      if (naive.empty()) naive = p;
    } else if (fused.empty() && p != "auto") {
      fused = p;
    }
  }
  return {naive, fused};
}

// Growth exponent between the first and last value: time ∝ value^k (k ≈ 2 quadratic, ≈ 1 linear).
double growth(double t0, double t1, double v0, double v1) { return std::log(t1 / t0) / std::log(v1 / v0); }

}  // namespace

Outcome run_sweep(const SweepOptions& options) {
  SweepOptions f = options;
  const bool te = f.what == "te";
  const bool seq = f.what != "batch";  // te sweeps T = S as seq does, with the causal mask
  if (f.values.empty()) f.values = default_values(f.what);
  if (te) f.shape.causal = true;
  for (std::int64_t v : f.values)
    if (v < 1)
      throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                           fmt::format("--values: every value must be >= 1, got {}", v));
  if (!seq && !f.seq_given) f.shape.seq = 256;
  const Case c = resolve(f.shape, available_paths);
  const std::string experiment = te ? "sweep-te" : seq ? "sweep-seq" : "sweep-batch";
  const std::string var = seq ? "T" : "B";

  std::ofstream jsonl;
  if (!f.jsonl.empty()) {
    jsonl.open(f.jsonl, std::ios::app);
    if (!jsonl) throw attnlab::Error(attnlab::ErrorCode::invalid_argument, "cannot write '" + f.jsonl + "'");
  }

  // --graph times the CUDA paths once more from graph replays; the others are named in a note.
  std::vector<std::string> graphed, not_graphed;
  if (f.graph)
    for (const std::string& p : c.paths)
      (path_device(p, c.device) == attnlab::Device::cuda ? graphed : not_graphed).push_back(p);

  // rows[value index][path index]; graph_rows[value index][index in graphed]
  std::vector<std::vector<ResultRow>> rows(f.values.size()), graph_rows(f.values.size());
  {
    Progress bar(fmt::format("sweep {}", f.what), int(f.values.size() * (c.paths.size() + graphed.size())));
    for (std::size_t i = 0; i < f.values.size(); ++i) {
      const std::int64_t v = f.values[i];
      Workload w{"", experiment, c.B, c.T, c.S, c.N, c.K, c.Hqk, c.Hv, c.dtype, c.causal, false};
      if (seq) w.T = w.S = v;
      else w.B = v;
      for (const std::string& path : c.paths) {
        bar.step(fmt::format("{}={} {}", var, v, path));
        ResultRow row = bench_one(w, path, path_device(path, c.device), f.plan, c.threads);
        if (jsonl.is_open()) jsonl << to_json_line(row) << "\n" << std::flush;
        rows[i].push_back(std::move(row));
      }
      for (const std::string& path : graphed) {
        bar.step(fmt::format("{}={} {} graph", var, v, path));
        ResultRow row = bench_graph(w, path, attnlab::Device::cuda, f.plan, c.threads);
        if (jsonl.is_open()) jsonl << to_json_line(row) << "\n" << std::flush;
        graph_rows[i].push_back(std::move(row));
      }
    }
  }
  Outcome outcome;
  for (std::size_t i = 0; i < f.values.size(); ++i) {
    outcome.rows.insert(outcome.rows.end(), rows[i].begin(), rows[i].end());
    outcome.rows.insert(outcome.rows.end(), graph_rows[i].begin(), graph_rows[i].end());
  }
  const auto graph_note = [&](std::FILE* out) {
    if (!not_graphed.empty())
      fmt::print(out, "note: --graph: {}; {} timed without graphs\n", kGraphNeedsCuda, fmt::join(not_graphed, ", "));
  };
  if (c.json) {
    for (const ResultRow& row : outcome.rows) fmt::print("{}\n", to_json_line(row));
    graph_note(stderr);
    return outcome;
  }

  const std::string fixed = seq ? fmt::format("B={}, N={}/{}, H={}", c.B, c.N, c.K, c.Hqk)
                                : fmt::format("T={}, S={}, N={}/{}, H={}", c.T, c.S, c.N, c.K, c.Hqk);
  Table table(fmt::format("{} over {} ({}, {}{}, on {}): ms per call (median) and TFLOP/s",
                          te ? "The codelab's TransformerEngine sweep on attnlab's paths: sweep" : "Sweep", var, fixed,
                          attnlab::to_string(c.dtype), c.causal ? ", causal" : "",
                          c.device == attnlab::Device::cpu ? "the CPU paths: no GPU here or --device cpu"
                                                           : device_label(c.device)));
  std::vector<std::string> headers = {var};
  std::vector<Align> aligns = {Align::right};
  for (const std::string& p : c.paths) {
    headers.push_back(p + " ms"), headers.push_back("TFLOP/s");
    aligns.push_back(Align::right), aligns.push_back(Align::right);
  }
  for (const std::string& p : graphed) headers.push_back(p + " graph ms"), aligns.push_back(Align::right);
  table.columns(headers, aligns);
  for (std::size_t i = 0; i < f.values.size(); ++i) {
    std::vector<std::string> cells = {std::to_string(f.values[i])};
    for (const ResultRow& row : rows[i]) {
      cells.push_back(row.ok ? fmt_opt(row.ms_median, "{:.4f}") : "did not run");
      cells.push_back(row.ok ? fmt_opt(row.tflops, "{:.3g}") : "—");
    }
    for (const ResultRow& row : graph_rows[i]) cells.push_back(row.ok ? fmt_opt(row.ms_median, "{:.4f}") : "failed");
    table.row(cells);
  }
  table.print();
  for (const auto* all : {&rows, &graph_rows})
    for (const auto& per_value : *all)
      for (const ResultRow& row : per_value)
        if (!row.ok)
          fmt::print("{}{} at {}={}: {}\n", row.path, row.graph ? " (graph)" : "", var, seq ? row.T : row.B, row.note);
  graph_note(stdout);
  if (te) fmt::print("{}\n", kTePeers);

  // What the codelab says to look for, and what this sweep measured. Seq: the fused path's advantage grows with T
  // (the naive path materializes the O(T²) score matrix) — judged by the naive / fused time ratio. Batch: larger
  // batches amortize launch overhead and fill the device — judged by TFLOP/s not falling from the smallest to the
  // largest B. The growth exponents (over the last step, where per-call overhead matters least) are shown as
  // information only: at small sizes a launch-bound GPU path grows far slower than the work.
  const std::size_t first = 0, last = f.values.size() - 1, prev = last > 0 ? last - 1 : 0;
  const double vp = double(f.values[prev]), vl = double(f.values[last]);
  std::vector<std::string> growths;
  bool throughput_ok = true;
  for (std::size_t p = 0; p < c.paths.size(); ++p) {
    const ResultRow &a = rows[first][p], &b = rows[prev][p], &z = rows[last][p];
    if (!a.ok || !b.ok || !z.ok || vp == vl) continue;
    const double k = growth(*b.ms_median, *z.ms_median, vp, vl);
    growths.push_back(fmt::format("{} ×{:.1f} overall, ∝ {}^{:.1f} from {} to {}, {:.3g} → {:.3g} TFLOP/s",
                                  c.paths[p], *z.ms_median / *a.ms_median, var, k, f.values[prev], f.values[last],
                                  *a.tflops, *z.tflops));
    throughput_ok = throughput_ok && *z.tflops >= *a.tflops;
  }
  const auto [naive, fused] = naive_and_fused(c.paths);
  std::string ratio_text;
  bool ratio_ok = true;
  const auto index_of = [&](const std::string& n) {
    return std::size_t(std::find(c.paths.begin(), c.paths.end(), n) - c.paths.begin());
  };
  if (!naive.empty() && !fused.empty()) {
    const std::size_t ni = index_of(naive), fi = index_of(fused);
    const auto ratio = [&](std::size_t i) -> std::optional<double> {
      if (!rows[i][ni].ok || !rows[i][fi].ok) return std::nullopt;
      return *rows[i][ni].ms_median / *rows[i][fi].ms_median;
    };
    const auto r0 = ratio(first), r1 = ratio(last);
    if (r0 && r1) {
      ratio_text = fmt::format("; {} / {} time: {:.2f}× at {}={}, {:.2f}× at {}={}", naive, fused, *r0, var,
                               f.values[first], *r1, var, f.values[last]);
      ratio_ok = !seq || *r1 >= *r0;
    }
  }
  const std::string expected =
      te  ? "causal bf16 attention from 128 to 2048: time grows with T, and the fused paths' advantage over the "
            "naive one grows with it (the naive path materializes the (B, N, T, S) scores, masked half included); "
            "the codelab sets TransformerEngine's fused attention next to JAX's on the same shapes (peers)"
      : seq ? "the fused path's advantage over the naive one grows with T: the naive path materializes the O(T²) "
            "(B, N, T, S) score matrix, the fused one keeps O(T) memory"
          : "larger batches amortize launch overhead and use the device better: TFLOP/s rises with B until memory "
            "or compute is the bottleneck";
  const std::string observed =
      growths.empty() ? "fewer than two values ran: nothing to compare"
                      : fmt::format("from {}={} to {}={}: {}{}", var, f.values[first], var, f.values[last],
                                    fmt::join(growths, "; "), ratio_text);
  // Timing disagreements are reported, not fatal: a busy machine or tiny sizes can bend them.
  const bool as_expected = !growths.empty() && (seq ? ratio_ok : throughput_ok);
  print_observation(expected, observed, as_expected);
  outcome.as_expected = as_expected;
  return outcome;
}

Action attach_sweep(CLI::App& cmd) {
  auto f = std::make_shared<SweepOptions>();
  auto report = std::make_shared<ReportFlags>();
  cmd.add_option("what", f->what, "seq: T = S over --values at B=4, N=8, H=64; batch: B over --values at T=256; "
                                  "te: the codelab's TransformerEngine sweep, causal T = S over 128…2048")
      ->required()->check(CLI::IsMember({"seq", "batch", "te"}));
  add_case_flags(cmd, f->shape, /*fp8=*/true);
  CLI::Option* seq_option = cmd.get_option("--seq");
  const char* sweep = "Sweep";
  cmd.add_option("--values", f->values, "comma-separated values to sweep (default seq: 64,128,256,512,1024; "
                                        "batch: 1,2,4,8,16; te: 128,256,512,1024,2048)")->delimiter(',')->group(sweep);
  add_timing_flags(cmd, f->plan, sweep);
  cmd.add_flag("--graph", f->graph, "also time CUDA-graph replays of each CUDA path (one more column each)")
      ->group(sweep);
  cmd.add_option("--jsonl", f->jsonl, "append result rows (JSON lines) to this file")->group(sweep);
  add_report_flags(cmd, *report);
  cmd.footer("A progress bar is drawn on stderr when it is a terminal. Timing observations that disagree with the "
             "codelab are flagged but do not change the exit status.");
  return [f, report, seq_option] {
    f->seq_given = seq_option->count() > 0;
    return run_with_report(*report, "attnlab sweep " + f->what, f->shape.json, [&] { return run_sweep(*f); });
  };
}

}  // namespace lab
