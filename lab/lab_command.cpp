// attnlab lab — the whole codelab in one command: check, compare, causal, bench (the default shape), sweep seq,
// sweep batch, heads, sweep te and fp8, in that order, on one device and dtype (sweep te and fp8 keep the codelab's
// bf16 / e4m3). Each experiment prints what its own subcommand prints, under a heading naming that subcommand;
// every row goes into one report (--report, default lab-report). fp8 where there is no FP8 attention says why and
// prints the C++ that would use it: shown as skipped, not as a failure.
// Exit status: 1 when a correctness check failed (compare's allclose, causal's checks) or an experiment could not
// run at all; timing observations that disagree with the codelab are flagged, as in the experiments themselves.
#include <exception>
#include <functional>
#include <memory>
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
#include "runs.h"
#include "table.h"

namespace lab {
namespace {

constexpr const char* kDefaultReportDir = "lab-report";

struct LabOptions {
  std::string device;  // empty: cuda when a CUDA path is available here, else cpu
  std::vector<std::string> paths;
  std::string dtype;   // empty: bf16 on cuda (every GPU path runs it, cuDNN included), f32 on cpu
  std::uint64_t seed = 0;
  int threads = 0;
  TimingPlan plan;
  bool quick = false;
  bool graph = false;
  ReportFlags report;
  CLI::Option *warmup = nullptr, *repeats = nullptr, *groups = nullptr;
};

// One experiment of the lab: how to run it, and the subcommand that prints the same (shown in its heading).
struct Step {
  std::string name;
  std::string command;   // "attnlab compare --device cpu --dtype f32"
  bool checks;           // its outcome's `passed` is a correctness verdict (compare, causal)
  bool observes;         // it prints the codelab's observation
  std::function<Outcome()> run;
};

// What became of a step, for the summary and the exit status.
struct Result {
  const Step* step = nullptr;
  std::size_t rows = 0;
  bool error = false;  // threw: it could not run at all
  Outcome outcome;
};

std::string yes_no(bool ok, const char* yes, const char* no) { return ok ? yes : no; }

std::vector<Step> plan_steps(const LabOptions& o, const CaseFlags& base, const TimingPlan& plan) {
  // The flags every step shares, as the subcommand would take them.
  std::string common = fmt::format("--device {} --dtype {}", base.device, base.dtype);
  if (!base.paths.empty()) common += fmt::format(" --paths {}", fmt::join(base.paths, ","));
  if (base.seed != 0) common += fmt::format(" --seed {}", base.seed);
  if (base.threads != 0) common += fmt::format(" --threads {}", base.threads);
  // Timing flags only where they differ from the subcommands' defaults (--quick's shorter warm-up time has no flag).
  const TimingPlan defaults;
  std::string timing;
  if (plan.warmup != defaults.warmup) timing += fmt::format(" --warmup {}", plan.warmup);
  if (plan.repeats != defaults.repeats) timing += fmt::format(" --repeats {}", plan.repeats);
  if (plan.groups != defaults.groups) timing += fmt::format(" --groups {}", plan.groups);
  const std::string graph = o.graph ? " --graph" : "";
  // --quick sweeps fewer values; the others keep the codelab's.
  const std::vector<std::int64_t> seq_values = o.quick ? std::vector<std::int64_t>{64, 128, 256}
                                                       : std::vector<std::int64_t>{};
  const std::vector<std::int64_t> batch_values = o.quick ? std::vector<std::int64_t>{1, 2, 4}
                                                         : std::vector<std::int64_t>{};
  // The TE sweep's 2048 costs the CPU's naive path seconds per call: on the CPU it stops at the seq sweep's 1024.
  const std::vector<std::int64_t> te_values = o.quick                  ? std::vector<std::int64_t>{128, 256}
                                              : base.device == "cpu" ? std::vector<std::int64_t>{128, 256, 512, 1024}
                                                                     : std::vector<std::int64_t>{};
  const auto values_flag = [](const std::vector<std::int64_t>& v) {
    return v.empty() ? std::string() : fmt::format(" --values {}", fmt::join(v, ","));
  };

  std::vector<Step> steps;
  steps.push_back({"check", "attnlab check", false, false, [] { return run_check(); }});
  steps.push_back({"compare", "attnlab compare " + common, true, true, [base] { return run_compare(resolve(base)); }});
  steps.push_back({"causal", "attnlab causal " + common, true, true, [base] { return run_causal(resolve(base)); }});
  BenchOptions bench;
  bench.shape = base;
  bench.plan = plan;
  bench.graph = o.graph;
  steps.push_back({"bench", "attnlab bench " + common + timing + graph, false, false,
                   [bench] { return run_bench(bench); }});
  for (const std::string what : {"seq", "batch"}) {  // a copy each: it is captured below
    SweepOptions sweep;
    sweep.what = what;
    sweep.values = what == "seq" ? seq_values : batch_values;
    sweep.shape = base;
    sweep.plan = plan;
    sweep.graph = o.graph;
    steps.push_back({"sweep " + what, "attnlab sweep " + what + " " + common + values_flag(sweep.values) + timing +
                                          graph,
                     false, true, [sweep] { return run_sweep(sweep); }});
  }
  HeadsOptions heads;
  heads.shape = base;
  heads.plan = plan;
  steps.push_back({"heads", "attnlab heads " + common + timing, false, true, [heads] { return run_heads(heads); }});
  // Step 9 of the codelab: TransformerEngine's causal bf16 sweep on our paths, then its FP8 cell. Both keep the
  // codelab's dtypes (bf16; bf16 vs e4m3) unless --dtype names one for the sweep.
  SweepOptions te;
  te.what = "te";
  te.values = te_values;
  te.shape = base;
  te.shape.dtype = o.dtype.empty() ? "bf16" : o.dtype;
  te.plan = plan;
  te.graph = o.graph;
  std::string te_common = fmt::format("--device {} --dtype {}", base.device, te.shape.dtype);
  if (!base.paths.empty()) te_common += fmt::format(" --paths {}", fmt::join(base.paths, ","));
  if (base.seed != 0) te_common += fmt::format(" --seed {}", base.seed);
  if (base.threads != 0) te_common += fmt::format(" --threads {}", base.threads);
  steps.push_back({"sweep te", "attnlab sweep te " + te_common + values_flag(te.values) + timing + graph, false, true,
                   [te] { return run_sweep(te); }});
  Fp8Options fp8;
  fp8.seed = base.seed;
  fp8.plan = plan;
  // The lab's --paths name the bf16 paths fp8 compares with when they are GPU paths (the cell runs on the GPU).
  if (base.device == "cuda") fp8.paths = base.paths;
  fp8.cpu_only = base.device == "cpu";
  std::string fp8_flags = base.seed != 0 ? fmt::format(" --seed {}", base.seed) : "";
  if (!fp8.paths.empty()) fp8_flags += fmt::format(" --paths {}", fmt::join(fp8.paths, ","));
  steps.push_back({"fp8", "attnlab fp8" + fp8_flags + timing, true, true, [fp8] { return run_fp8(fp8); }});
  return steps;
}

void print_summary(const std::vector<Result>& results, const std::string& where) {
  Table t(fmt::format("Lab summary ({})", where));
  t.columns({"experiment", "rows", "correctness", "codelab's observation"}, {Align::left, Align::right});
  for (const Result& r : results) {
    const Step& s = *r.step;
    if (r.error) {
      t.row({s.name, "—", "ERROR (see above)", "—"});
      continue;
    }
    if (!r.outcome.skipped.empty()) {  // cannot run on this machine (fp8 without FP8 attention): said above
      t.row({s.name, std::to_string(r.rows), "— (not here: see above)", "—"});
      continue;
    }
    t.row({s.name, std::to_string(r.rows), s.checks ? yes_no(r.outcome.passed, "✓ passed", "✗ FAILED") : "—",
           s.observes ? yes_no(r.outcome.as_expected, "✓ as expected",
                               s.checks ? "✗ mismatch" : "✗ mismatch (timing: flagged, not fatal)")
                      : "—"});
  }
  t.print();
}

int run_lab(const LabOptions& o) {
  CaseFlags base;  // the codelab's default shape (4, 128, 8, 64)
  const attnlab::Device device = o.device.empty() ? default_device()
                                 : o.device == "cuda" ? attnlab::Device::cuda
                                                      : attnlab::Device::cpu;
  base.device = std::string(attnlab::to_string(device));
  base.dtype = !o.dtype.empty() ? o.dtype : device == attnlab::Device::cuda ? "bf16" : "f32";
  base.paths = o.paths;
  base.seed = o.seed;
  base.threads = o.threads;
  resolve(base);  // --device cuda without a GPU, or no path at all, stops here with the reason
  // Before anything runs: the report folder must be writable and the peers' files readable.
  const PendingReport report(o.report);

  // --quick: fewer and shorter timing groups unless the flags say otherwise (for CI and the tests).
  TimingPlan plan = o.plan;
  if (o.quick) {
    if (o.warmup->count() == 0) plan.warmup = 2;
    if (o.repeats->count() == 0) plan.repeats = 5;
    if (o.groups->count() == 0) plan.groups = 3;
    plan.warmup_ms = 20.0;
  }

  const std::vector<Step> steps = plan_steps(o, base, plan);
  const std::string where = fmt::format("{}, {}", device_label(device), base.dtype);
  std::vector<Result> results;
  std::vector<ResultRow> rows;
  {
    Progress bar("lab", int(steps.size()));
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      clear_progress_line();
      fmt::print("== [{}/{}] {} ({}) ==\n\n", i + 1, steps.size(), s.name, s.command);
      std::fflush(stdout);  // the heading before the bar and anything the step writes to stderr
      bar.step(s.name);
      Result r;
      r.step = &s;
      try {
        r.outcome = s.run();
        r.rows = r.outcome.rows.size();
        rows.insert(rows.end(), r.outcome.rows.begin(), r.outcome.rows.end());
      } catch (const std::exception& e) {
        // One experiment that cannot run (a path refusing the reference, out of memory) does not stop the others.
        clear_progress_line();
        fmt::print(stderr, "attnlab: error: {}: {}\n", s.name, e.what());
        r.error = true;
      }
      results.push_back(std::move(r));
      std::fflush(stdout);
    }
  }

  print_summary(results, where);
  if (rows.empty()) {
    fmt::print(stderr, "attnlab: error: no experiment produced rows; no report written\n");
    return 1;
  }
  report.write(rows, fmt::format("attnlab lab ({})", where), stdout);
  bool ok = true;
  for (const Result& r : results) ok = ok && !r.error && (!r.step->checks || r.outcome.passed);
  return ok ? 0 : 1;
}

}  // namespace

Action attach_lab(CLI::App& cmd) {
  auto o = std::make_shared<LabOptions>();
  const char* run = "Run";
  cmd.add_option("--device", o->device, "where the tensors live (default: cuda when a CUDA path is available)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->group(run);
  cmd.add_option("--paths", o->paths, "comma-separated paths for every experiment, the first is the reference "
                                      "(default: each experiment's own)")
      ->delimiter(',')->group(run);
  cmd.add_option("--dtype", o->dtype, "element type for every experiment (default: bf16 on cuda, f32 on cpu)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))->group(run);
  cmd.add_option("--seed", o->seed, "seed of the random inputs")->capture_default_str()->group(run);
  cmd.add_option("--threads", o->threads, "threads for CPU paths (0 = all)")->check(CLI::NonNegativeNumber)
      ->capture_default_str()->group(run);
  const char* timing = "Timing";
  add_timing_flags(cmd, o->plan, timing);
  o->warmup = cmd.get_option("--warmup");
  o->repeats = cmd.get_option("--repeats");
  o->groups = cmd.get_option("--groups");
  cmd.add_flag("--quick", o->quick, "a short run for CI: 2 warm-up calls, 3 groups of 5, sweeps over 64,128,256, "
                                    "1,2,4 and (te) 128,256 (explicit timing flags still win)")->group(timing);
  cmd.add_flag("--graph", o->graph, "bench and sweeps also time CUDA-graph replays of the CUDA paths")->group(timing);
  add_report_flags(cmd, o->report, kDefaultReportDir);
  cmd.footer("Runs check, compare, causal, bench, sweep seq, sweep batch, heads, sweep te and fp8 at the codelab's "
             "shapes, each under a heading with the command that prints the same, then a summary, and writes the "
             "report. Exits 1 when a correctness check fails or an experiment cannot run (fp8 without FP8 attention "
             "here is skipped, not failed); timing observations that disagree with the codelab are flagged only.");
  return [o] { return run_lab(*o); };
}

}  // namespace lab
