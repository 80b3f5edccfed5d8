// attnlab causal — the codelab's step 6: the causal mask applied inside the kernel. Each path runs the same inputs
// without and with the mask; the first query position can see only key 0, so its output changes a lot, while the
// last one already sees every key and does not change. Then every path's causal output is checked against the
// reference's (the first path's).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <attnlab/attention.h>

#include "case.h"
#include "experiment.h"
#include "report/report_flags.h"
#include "results.h"
#include "runner.h"
#include "runs.h"
#include "table.h"

namespace lab {
namespace {

// The codelab's tolerances, as compare uses them: atol 1e-3 for f32, 1e-2 (and rtol 1e-2) for the half types.
double atol_for(attnlab::DType dtype) { return dtype == attnlab::DType::f32 ? 1e-3 : 1e-2; }
double rtol_for(attnlab::DType dtype) { return dtype == attnlab::DType::f32 ? 1e-5 : 1e-2; }

// max |a − b| over the elements of each query position (O is (B, T, N, Hv)); NaN propagates.
std::vector<double> per_position_diff(const Case& c, const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> out(std::size_t(c.T), 0.0);
  const std::size_t row = std::size_t(c.N * c.Hv);
  for (std::int64_t bi = 0; bi < c.B; ++bi)
    for (std::int64_t t = 0; t < c.T; ++t) {
      const std::size_t base = std::size_t(bi * c.T + t) * row;
      double& m = out[std::size_t(t)];
      for (std::size_t i = 0; i < row; ++i) {
        const double d = std::fabs(double(a[base + i]) - double(b[base + i]));
        if (std::isnan(d) || std::isnan(m)) m = std::numeric_limits<double>::quiet_NaN();
        else m = std::max(m, d);
      }
    }
  return out;
}

ResultRow row_for(const Case& c, const PathOutcome& out) {
  ResultRow row;
  row.experiment = "causal";
  row.path = out.ok() ? out.ran : out.requested;
  row.device = std::string(attnlab::to_string(out.device));
  row.dtype = std::string(attnlab::to_string(c.dtype));
  row.B = c.B, row.T = c.T, row.S = c.S, row.N = c.N, row.K = c.K, row.Hqk = c.Hqk, row.Hv = c.Hv;
  row.causal = true;
  return row;
}

}  // namespace

Outcome run_causal(const Case& c) {
  // With S ≠ T the last query row would not see every key (top-left diagonal), so the codelab's observation
  // would not hold; the step is about S = T.
  if (c.S != c.T)
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                         fmt::format("causal compares at S = T (the codelab's step 6); got T={} and S={}", c.T, c.S));
  Runner runner(c);
  for (const std::string& p : c.paths) runner.why_not(p);  // unknown paths and impossible shapes stop here
  const double atol = atol_for(c.dtype), rtol = rtol_for(c.dtype);
  // "Large" is what no rounding could produce: ten times the tolerance the paths are compared at.
  const double large = 10 * atol;

  if (!c.json)
    key_value_table(fmt::format("Causal vs full attention on the same inputs ({}, {}, Q/K/V {})",
                                c.device == attnlab::Device::cpu ? "CPU paths" : "GPU paths and the CPU reference",
                                attnlab::to_string(c.dtype), format_shape(c.q_shape())),
                    {{"Mask", "key j visible to query i iff j <= i (inside the kernel)"},
                     {"Paths", fmt::format("{}", fmt::join(c.paths, ", "))}})
        .print();

  std::vector<ResultRow> rows;
  std::optional<PathOutcome> reference;  // the first path's causal output
  int mismatched = 0, failed = 0, compared = 0;
  for (const std::string& path : c.paths) {
    const PathOutcome full = runner.run(path, false);
    const PathOutcome causal = full.ok() ? runner.run(path, true) : full;
    ResultRow row = row_for(c, causal);
    if (!full.ok() || !causal.ok()) {
      const PathOutcome& bad = full.ok() ? causal : full;
      if (!bad.refused()) ++failed;
      row.note = refusal_reason(path, bad.message);
      rows.push_back(row);
      if (!c.json)
        key_value_table(path, {{bad.refused() ? "Did not run" : "Failed", row.note}}).print();
      continue;
    }
    ++compared;
    const std::vector<double> diff = per_position_diff(c, causal.output, full.output);
    const double first = diff.front(), last = diff.back();
    double mean = 0;
    for (double d : diff) mean += d;
    mean /= double(diff.size());
    // T = 1: the only position is both first and last and sees every key, so nothing may change.
    const bool first_ok = c.T == 1 ? first <= atol : first > large;
    const bool last_ok = last <= atol;  // NaN fails both
    const bool ok = first_ok && last_ok;
    if (!ok) ++mismatched;

    std::string vs_ref = "reference";
    if (!reference) {
      reference = causal;
    } else {
      const double d = max_abs_diff(reference->output, causal.output);
      const bool close = allclose(causal.output, reference->output, atol, rtol);
      row.max_abs_err = d;
      if (!close) ++mismatched;
      vs_ref = fmt::format("{:.2e} vs {} ({})", d, reference->ran, close ? "close" : "NOT close");
      row.ok = close;
    }
    row.ok = ok && (rows.empty() || row.ok);
    row.note = fmt::format("first position {:.3e}, last {:.3e}, mean {:.3e}; {}", first, last, mean, vs_ref);
    rows.push_back(row);
    if (c.json) continue;

    Table t(fmt::format("{}: max |causal − full| per query position", causal.ran));
    t.columns({"position", "max |causal − full|", "codelab says", "check"}, {Align::left, Align::right});
    t.row({"first (t=0)", fmt::format("{:.3e}", first),
           c.T == 1 ? "no difference (T=1: it sees every key)" : "large difference — causal restricts it to itself",
           first_ok ? "✓" : "✗"});
    t.row({fmt::format("last (t={})", c.T - 1), fmt::format("{:.3e}", last),
           "no difference — it already sees every key", last_ok ? "✓" : "✗"});
    t.row({"mean over positions", fmt::format("{:.3e}", mean), "in between", ""});
    t.print();
    print_observation("first position: large difference, last position: none",
                      fmt::format("first position {:.3e} (large means > {:.0e}), last position {:.3e} (none means "
                                  "<= {:.0e})",
                                  first, large, last, atol),
                      ok);
  }

  if (c.json) {
    for (const ResultRow& row : rows) fmt::print("{}\n", to_json_line(row));
  } else if (rows.size() > 1) {
    Table t(fmt::format("Causal outputs vs the reference {} (allclose rtol={:g}, atol={:g})",
                        reference ? reference->ran : c.paths.front(), rtol, atol));
    t.columns({"path", "max |path − reference|", "close"}, {Align::left, Align::right});
    for (const ResultRow& row : rows)
      t.row({row.path, row.max_abs_err ? fmt::format("{:.2e}", *row.max_abs_err) : "—",
             row.max_abs_err ? (row.note.ends_with("(close)") ? "True" : "False")
                             : (row.note.ends_with("reference") ? "reference" : "did not run")});
    t.print();
  }
  if (failed > 0) fmt::print(stderr, "attnlab: error: {} path(s) failed while running\n", failed);
  if (mismatched > 0)
    fmt::print(stderr, "attnlab: error: {} mismatch(es) with the codelab's observation or the reference\n",
               mismatched);
  if (compared == 0 && failed == 0) fmt::print(stderr, "attnlab: error: no path could run this case\n");
  Outcome outcome;
  outcome.rows = std::move(rows);
  outcome.passed = failed == 0 && mismatched == 0 && compared > 0;
  outcome.as_expected = mismatched == 0;
  return outcome;
}

Action attach_causal(CLI::App& cmd) {
  auto flags = std::make_shared<CaseFlags>();
  auto report = std::make_shared<ReportFlags>();
  add_case_flags(cmd, *flags);
  add_report_flags(cmd, *report);
  cmd.footer("Each path runs with and without the causal mask (--causal is implied). The first path is the "
             "reference for the causal outputs. Exits 1 when a measurement disagrees with the codelab or a path "
             "differs from the reference.");
  return [flags, report] {
    const Case c = resolve(*flags);  // bad flags stop before the report folder is made
    return run_with_report(*report, "attnlab causal", c.json, [&] { return run_causal(c); });
  };
}

}  // namespace lab
