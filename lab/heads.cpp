// attnlab heads — the codelab's step 8: multi-head (MHA), grouped-query (GQA) and multi-query (MQA) attention. N
// query heads (8 by default) read K = N, N/4, N/8 key/value heads (8, 2, 1): the output shape does not change, the
// KV cache (K and V) shrinks by N/K, and the time stays similar or drops. Each path is timed the lab's way.
#include <algorithm>
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
#include "report/report_flags.h"
#include "results.h"
#include "runs.h"
#include "table.h"
#include "tensors.h"
#include "timing.h"

namespace lab {
namespace {

struct Variant {
  std::string name;  // MHA, GQA, MQA
  std::int64_t K;
};

// K = N, N/4, N/8 as the codelab's 8 → 8, 2, 1, kept only where K divides N and differs from the previous one.
std::vector<Variant> variants(std::int64_t N) {
  std::vector<Variant> out;
  for (std::int64_t k : {N, N / 4, N / 8}) {
    if (k < 1 || N % k != 0 || (!out.empty() && out.back().K == k)) continue;
    out.push_back({k == N ? "MHA" : k == 1 ? "MQA" : "GQA", k});
  }
  if (out.back().K != 1) out.push_back({"MQA", 1});  // small N (say 2): still show the single-KV-head end
  return out;
}

std::string mib(double bytes) { return fmt::format("{:.3f} MiB", bytes / double(1 << 20)); }

}  // namespace

Outcome run_heads(const HeadsOptions& f) {
  if (f.shape.kv_heads_option != nullptr && f.shape.kv_heads_option->count() > 0)
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                         "heads chooses the KV heads itself (N, N/4, N/8); drop --kv-heads");
  const Case c = resolve(f.shape, available_paths);
  const std::vector<Variant> vs = variants(c.N);
  const double elem = double(attnlab::size_of(c.dtype));

  std::ofstream jsonl;
  if (!f.jsonl.empty()) {
    jsonl.open(f.jsonl, std::ios::app);
    if (!jsonl) throw attnlab::Error(attnlab::ErrorCode::invalid_argument, "cannot write '" + f.jsonl + "'");
  }

  std::vector<std::int64_t> ks;
  std::vector<std::string> names;
  for (const Variant& v : vs) ks.push_back(v.K), names.push_back(v.name);

  Table shapes(fmt::format("{} query heads over {} KV heads ({}, on {})", c.N, fmt::join(ks, ", "),
                           attnlab::to_string(c.dtype),
                           c.device == attnlab::Device::cpu ? "the CPU paths: no GPU here or --device cpu"
                                                            : device_label(c.device)));
  shapes.columns({"variant", "Q", "K", "V", "O", "KV cache (K+V)", "vs MHA"},
                 {Align::left, Align::left, Align::left, Align::left, Align::left, Align::right, Align::right});
  const double mha_bytes = 2.0 * double(c.B * c.S * c.N * c.Hqk) * elem;
  std::vector<double> savings;
  for (const Variant& v : vs) {
    const double kv = double(c.B * c.S * v.K) * double(c.Hqk + c.Hv) * elem;
    savings.push_back(mha_bytes / kv);
    shapes.row({fmt::format("{} (K={})", v.name, v.K), format_shape(c.q_shape()),
                format_shape({c.B, c.S, v.K, c.Hqk}), format_shape({c.B, c.S, v.K, c.Hv}),
                format_shape(c.o_shape()), mib(kv),
                v.K == c.N ? std::string("baseline") : fmt::format("{:.0f}× smaller", mha_bytes / kv)});
  }

  // times[variant][path]
  std::vector<std::vector<ResultRow>> rows(vs.size());
  for (std::size_t i = 0; i < vs.size(); ++i) {
    Workload w{vs[i].name, "heads", c.B, c.T, c.S, c.N, vs[i].K, c.Hqk, c.Hv, c.dtype, c.causal, false};
    for (const std::string& path : c.paths) {
      ResultRow row = bench_one(w, path, path_device(path, c.device), f.plan, c.threads);
      if (jsonl.is_open()) jsonl << to_json_line(row) << "\n" << std::flush;
      if (c.json) fmt::print("{}\n", to_json_line(row));
      rows[i].push_back(std::move(row));
    }
  }
  Outcome outcome;
  for (const auto& per_variant : rows) outcome.rows.insert(outcome.rows.end(), per_variant.begin(), per_variant.end());
  if (c.json) return outcome;

  shapes.print();
  Table times("Time per call (ms, median of groups) and TFLOP/s");
  std::vector<std::string> headers = {"variant"};
  std::vector<Align> aligns = {Align::left};
  for (const std::string& p : c.paths) {
    headers.push_back(p + " ms"), headers.push_back("TFLOP/s");
    aligns.push_back(Align::right), aligns.push_back(Align::right);
  }
  times.columns(headers, aligns);
  for (std::size_t i = 0; i < vs.size(); ++i) {
    std::vector<std::string> cells = {fmt::format("{} (K={})", vs[i].name, vs[i].K)};
    for (const ResultRow& row : rows[i]) {
      cells.push_back(row.ok ? fmt_opt(row.ms_median, "{:.4f}") : "did not run");
      cells.push_back(row.ok ? fmt_opt(row.tflops, "{:.3g}") : "—");
    }
    times.row(cells);
  }
  times.print();

  // Time "similar or lower": within 25% of MHA's on every path that ran all variants (timing noise at small
  // sizes is of that order on a CPU).
  std::vector<std::string> per_path;
  bool time_ok = true;
  for (std::size_t p = 0; p < c.paths.size(); ++p) {
    if (!std::all_of(rows.begin(), rows.end(), [&](const auto& r) { return r[p].ok; })) continue;
    std::vector<std::string> ms;
    for (std::size_t i = 0; i < vs.size(); ++i) {
      ms.push_back(fmt::format("{:.4f}", *rows[i][p].ms_median));
      time_ok = time_ok && *rows[i][p].ms_median <= 1.25 * *rows[0][p].ms_median;
    }
    per_path.push_back(fmt::format("{} {} ms", c.paths[p], fmt::join(ms, " / ")));
  }
  std::vector<std::string> saving_text;
  for (std::size_t i = 1; i < vs.size(); ++i)
    saving_text.push_back(fmt::format("{:.0f}× ({})", savings[i], vs[i].name));
  outcome.as_expected = time_ok && !per_path.empty();
  print_observation(
      fmt::format("same output shape; KV cache {} smaller; time similar or lower",
                  fmt::join(saving_text, " / ")),
      fmt::format("output {} for every variant; KV cache {} smaller; time {}: {}", format_shape(c.o_shape()),
                  fmt::join(saving_text, " / "), fmt::join(names, " / "),
                  per_path.empty() ? "no path ran every variant" : fmt::format("{}", fmt::join(per_path, "; "))),
      outcome.as_expected);
  for (const auto& per_variant : rows)
    for (const ResultRow& row : per_variant)
      if (!row.ok) fmt::print("{} at K={}: {}\n", row.path, row.K, row.note);
  return outcome;
}

Action attach_heads(CLI::App& cmd) {
  auto f = std::make_shared<HeadsOptions>();
  auto report = std::make_shared<ReportFlags>();
  add_case_flags(cmd, f->shape);
  const char* timing = "Timing";
  add_timing_flags(cmd, f->plan, timing);
  cmd.add_option("--jsonl", f->jsonl, "append result rows (JSON lines) to this file")->group(timing);
  add_report_flags(cmd, *report);
  cmd.footer("Timing observations that disagree with the codelab are flagged but do not change the exit status.");
  return [f, report] {
    return run_with_report(*report, "attnlab heads", f->shape.json, [&] { return run_heads(*f); });
  };
}

}  // namespace lab
