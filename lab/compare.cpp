// attnlab compare — the codelab's steps 3–5: random Q, K, V in (B, T, N, H), the naive path (scores materialized)
// and the fused path(s) on the same inputs, and the comparison the codelab makes: max |naive − fused| and
// allclose(atol=1e-3), next to what the codelab says the learner should see.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <attnlab/attention.h>

#include "case.h"
#include "experiment.h"
#include "gpu.h"
#include "report/report_flags.h"
#include "results.h"
#include "runner.h"
#include "runs.h"
#include "table.h"

namespace lab {
namespace {

// The codelab's tolerances: f32 uses jnp.allclose(atol=1e-3) with its default rtol=1e-5 (step 5); the half
// types use rtol=atol=1e-2, what it uses for its bf16 comparison (step 6).
// Written the way the codelab writes them: 1e-3, not 0.001.
std::string sci(double x) {
  const double e = std::round(std::log10(x));
  return std::fabs(x - std::pow(10.0, e)) < 1e-12 * x ? fmt::format("1e{}", int(e)) : fmt::format("{:g}", x);
}
struct Tolerance {
  double atol, rtol;
  std::string label() const {
    return rtol <= 1e-5 ? fmt::format("atol={}", sci(atol)) : fmt::format("rtol={}, atol={}", sci(rtol), sci(atol));
  }
};
Tolerance tolerance_for(attnlab::DType dtype) {
  return dtype == attnlab::DType::f32 ? Tolerance{1e-3, 1e-5} : Tolerance{1e-2, 1e-2};
}

std::string device_name(attnlab::Device device) {
  if (device == attnlab::Device::cpu) return "CPU";
  const gpu::Inventory inv = gpu::inventory();
  return inv.devices.empty() ? "GPU" : fmt::format("GPU ({})", inv.devices.front().name);
}

void print_inputs(Runner& r) {
  const Case& c = r.spec();
  // The same values go to every device a path runs on.
  std::vector<std::string> where;
  for (attnlab::Device d : {attnlab::Device::cpu, attnlab::Device::cuda})
    if (std::any_of(c.paths.begin(), c.paths.end(), [&](const std::string& p) { return r.device_of(p) == d; }))
      where.push_back(device_name(d));
  const std::string dtype(attnlab::to_string(c.dtype));
  Table t(fmt::format("Attention inputs on {}{}", fmt::join(where, " and "), c.causal ? " (causal mask)" : ""));
  t.columns({"Array", "Shape", "Dtype", "Layout"});
  t.row({"Q (query)", format_shape(c.q_shape()), dtype, "(B, T, N, H)"});
  t.row({"K (key)", format_shape(c.k_shape()), dtype, "(B, S, K, H)"});
  t.row({"V (value)", format_shape(c.v_shape()), dtype, "(B, S, K, H)"});
  t.print();
}

void print_path(const Case& c, const PathOutcome& out, bool reference) {
  const std::string title = fmt::format("{}{}", out.requested, reference ? " (reference)" : "");
  if (!out.ok()) {
    key_value_table(title, {{out.refused() ? "Did not run" : "Failed", refusal_reason(out.requested, out.message)}})
        .print();
    return;
  }
  key_value_table(title, {{"Output shape", format_shape(c.o_shape())},
                          {"Output dtype", std::string(attnlab::to_string(c.dtype))},
                          {"Path that ran", fmt::format("{} (on {})", out.ran, attnlab::to_string(out.device))}})
      .print();
}

ResultRow row_for(const Case& c, const PathOutcome& out) {
  ResultRow row;
  row.experiment = "compare";
  row.path = out.ok() ? out.ran : out.requested;
  row.device = std::string(attnlab::to_string(out.device));
  row.dtype = std::string(attnlab::to_string(c.dtype));
  row.B = c.B, row.T = c.T, row.S = c.S, row.N = c.N, row.K = c.K, row.Hqk = c.Hqk, row.Hv = c.Hv;
  row.causal = c.causal;
  row.ok = out.ok();
  row.note = out.ok() ? "" : refusal_reason(out.requested, out.message);
  return row;
}

std::string fmt_diff(double d) { return std::isnan(d) ? "nan (an output element is NaN)" : fmt::format("{:.2e}", d); }

}  // namespace

Outcome run_compare(const Case& c) {
  if (c.paths.size() < 2)
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                         fmt::format("compare needs two or more paths (the first is the reference), got '{}'",
                                     fmt::join(c.paths, ",")));
  Runner runner(c);
  // Ask before running anything: impossible shapes and unknown path names stop here with the library's message,
  // and a reference that cannot run leaves nothing to compare against.
  std::optional<std::string> ref_refusal;
  for (const std::string& p : c.paths) {
    auto why = runner.why_not(p);
    if (&p == &c.paths.front()) ref_refusal = why;
  }
  const std::string& ref_name = c.paths.front();
  if (const auto& why = ref_refusal)
    throw attnlab::Error(attnlab::ErrorCode::unsupported,
                         fmt::format("{} (compare needs its reference, the first of --paths, to run)", *why));

  if (!c.json) print_inputs(runner);
  const Tolerance tol = tolerance_for(c.dtype);
  const PathOutcome ref = runner.run(ref_name);
  std::vector<ResultRow> rows = {row_for(c, ref)};
  rows.back().note = "reference";
  if (!c.json) print_path(c, ref, true);
  if (!ref.ok()) throw attnlab::Error(ref.error, ref.message);

  int compared = 0, mismatched = 0, failed = 0;
  for (std::size_t i = 1; i < c.paths.size(); ++i) {
    const PathOutcome out = runner.run(c.paths[i]);
    if (!c.json) print_path(c, out, false);
    ResultRow row = row_for(c, out);
    if (!out.ok()) {
      // A refusal is an answer (the codelab's "clear error instead of a silent fallback"); any other failure is not.
      if (!out.refused()) ++failed;
      rows.push_back(row);
      continue;
    }
    ++compared;
    const double diff = max_abs_diff(ref.output, out.output);
    const bool close = allclose(ref.output, out.output, tol.atol, tol.rtol);  // the codelab's argument order
    row.max_abs_err = diff;
    row.ok = close;
    row.note = fmt::format("vs {}: {} ({})", ref.ran, close ? "close" : "NOT close", tol.label());
    if (out.requested != out.ran) row.note += fmt::format("; asked for {}", out.requested);
    rows.push_back(row);
    if (!close) ++mismatched;
    if (c.json) continue;
    key_value_table(fmt::format("{} vs {}", out.ran, ref.ran),
                    {{fmt::format("Max |{} − {}|", ref.ran, out.ran), fmt_diff(diff)},
                     {fmt::format("Outputs close ({})", tol.label()), close ? "True" : "False"}})
        .print();
    print_observation(
        fmt::format("same shape and dtype, small max difference, True for {}", tol.label()),
        fmt::format("shape {} and dtype {} for both, max difference {}, {}", format_shape(c.o_shape()),
                    attnlab::to_string(c.dtype), fmt_diff(diff), close ? "True" : "False"),
        close);
  }
  if (c.json)
    for (const ResultRow& row : rows) fmt::print("{}\n", to_json_line(row));

  if (failed > 0)
    fmt::print(stderr, "attnlab: error: {} path(s) failed while running; see {}\n", failed,
               c.json ? "the rows' notes" : "the tables above");
  if (mismatched > 0)
    fmt::print(stderr, "attnlab: error: {} path(s) differ from the reference {} beyond {}\n", mismatched, ref.ran,
               tol.label());
  if (compared == 0 && failed == 0)
    fmt::print(stderr, "attnlab: error: nothing to compare: every path but the reference refused this case\n");
  Outcome outcome;
  outcome.rows = std::move(rows);
  outcome.passed = failed == 0 && mismatched == 0 && compared > 0;
  outcome.as_expected = mismatched == 0;
  return outcome;
}

Action attach_compare(CLI::App& cmd) {
  auto flags = std::make_shared<CaseFlags>();
  auto report = std::make_shared<ReportFlags>();
  add_case_flags(cmd, *flags);
  add_report_flags(cmd, *report);
  cmd.footer("The first path is the reference; every other path is compared with it. Exits 1 when a path differs "
             "from the reference, fails, or nothing could be compared.");
  return [flags, report] {
    const Case c = resolve(*flags);  // bad flags stop before the report folder is made
    return run_with_report(*report, "attnlab compare", c.json, [&] { return run_compare(c); });
  };
}

}  // namespace lab
