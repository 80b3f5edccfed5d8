// attnlab bench — the codelab's timing step: each path at a shape (the codelab default (4, 128, 8, 64) unless
// flags say otherwise) or at every workload of a file (bench/workloads.json: docs/design.md §5's shapes, forward and
// backward), timed the lab's way (timing.h), with TFLOP/s, GB/s, the first call at the new shape, the host's
// time to issue one call (GPU paths: a call is launch-bound when it is near the median) and the path's
// workspace. Rows go to the terminal as a table, with --jsonl to a file peers' rows can join, and with --report to
// a report. --graph adds, for each CUDA path, a row timed from CUDA-graph replays (the launch floor). --dtype e4m3
// (or "dtype": "e4m3" in a workloads file, e.g. bench/workloads_fp8.json) times FP8 forward calls (call_set.h).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <attnlab/attention.h>

#include "bench_core.h"
#include "case.h"
#include "experiment.h"
#include "gpu.h"
#include "report/report_flags.h"
#include "results.h"
#include "runs.h"
#include "table.h"
#include "tensors.h"
#include "timing.h"

namespace lab {
namespace {

std::vector<Workload> load_workloads(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw attnlab::Error(attnlab::ErrorCode::invalid_argument, fmt::format("cannot read '{}'", file));
  nlohmann::json spec;
  try {
    in >> spec;
  } catch (const std::exception& e) {
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument, fmt::format("'{}' is not JSON: {}", file, e.what()));
  }
  const nlohmann::json& items = spec.is_object() ? spec.at("workloads") : spec;
  std::vector<Workload> out;
  for (const auto& it : items) {
    try {
      Workload w;
      w.name = it.value("name", "");
      w.experiment = it.value("experiment", "bench");
      w.B = it.at("B"), w.T = it.at("T"), w.N = it.at("N"), w.Hqk = it.at("Hqk");
      w.S = it.value("S", w.T), w.K = it.value("K", w.N), w.Hv = it.value("Hv", w.Hqk);
      w.dtype = attnlab::parse_dtype(it.value("dtype", std::string("bf16")));
      w.causal = it.value("causal", false);
      w.softcap = it.value("softcap", 0.0f);
      if (!(w.softcap >= 0.0f))
        throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                             fmt::format("'{}': workload {}: softcap must be ≥ 0 (0 = none)", file, out.size()));
      w.backward = it.value("direction", std::string("fwd")) == "bwd";
      out.push_back(w);
    } catch (const nlohmann::json::exception& e) {
      throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                           fmt::format("'{}': workload {}: {}", file, out.size(), e.what()));
    }
  }
  return out;
}

// Without --paths: every available path of the device (all GPU paths on cuda).
std::vector<std::string> bench_paths(attnlab::Device device) { return available_paths(device); }

std::vector<std::string> table_cells(const std::string& label, const std::string& path, const ResultRow& row) {
  if (!row.ok) return {label, path, "did not run", "", "", "", "", "", "", row.note.substr(0, 80)};
  return {label, path, fmt_opt(row.ms_median, "{:.4f}"), fmt_opt(row.ms_min, "{:.4f}"), fmt_opt(row.ms_max, "{:.4f}"),
          fmt_opt(row.tflops, "{:.1f}"), fmt_opt(row.gbps, "{:.0f}"), fmt_opt(row.first_call_ms, "{:.2f}"),
          fmt_opt(row.host_ms, "{:.4f}"),
          fmt_opt(row.workspace_bytes ? std::optional<double>(*row.workspace_bytes / (1 << 20)) : std::nullopt,
                  "{:.1f}")};
}

}  // namespace

Outcome run_bench(const BenchOptions& flags) {
  const Case c = resolve(flags.shape, bench_paths);
  std::vector<Workload> workloads;
  if (!flags.workloads.empty()) {
    workloads = load_workloads(flags.workloads);
  } else {
    Workload w{"", "bench", c.B, c.T, c.S, c.N, c.K, c.Hqk, c.Hv, c.dtype, c.causal, flags.backward};
    workloads.push_back(w);
  }
  std::ofstream jsonl;
  if (!flags.jsonl.empty()) {
    jsonl.open(flags.jsonl, std::ios::app);
    if (!jsonl) throw attnlab::Error(attnlab::ErrorCode::invalid_argument, "cannot write '" + flags.jsonl + "'");
  }
  Outcome outcome;
  const auto emit = [&](const ResultRow& row) {
    if (jsonl.is_open()) jsonl << to_json_line(row) << "\n" << std::flush;
    if (c.json) fmt::print("{}\n", to_json_line(row));
    outcome.rows.push_back(row);
  };
  std::vector<std::string> not_graphed;  // --graph: paths that are not CUDA paths, named once in a note
  Table table("Time per call (median of groups; CUDA events on a GPU, steady clock on the CPU)");
  table.columns({"workload", "path", "ms median", "min", "max", "TFLOP/s", "GB/s", "first call ms", "host ms",
                 "workspace MiB"});
  for (const Workload& w : workloads) {
    const std::string label =
        fmt::format("{} {} B={} T={} S={} N={}/{} H={}{}{}", w.backward ? "bwd" : "fwd", attnlab::to_string(w.dtype),
                    w.B, w.T, w.S, w.N, w.K, w.Hqk, w.Hv != w.Hqk ? fmt::format("/{}", w.Hv) : "",
                    w.causal ? " causal" : "");
    for (const std::string& path : c.paths) {
      const attnlab::Device device = path_device(path, c.device);
      const ResultRow row = bench_one(w, path, device, flags.plan, c.threads);
      emit(row);
      table.row(table_cells(label, path, row));
      if (!flags.graph) continue;
      if (device != attnlab::Device::cuda) {
        if (std::find(not_graphed.begin(), not_graphed.end(), path) == not_graphed.end()) not_graphed.push_back(path);
        continue;
      }
      // Only a path that ran gets a graph row: the reason it did not run is in its own row already.
      if (!row.ok) continue;
      const ResultRow graphed = bench_graph(w, path, device, flags.plan, c.threads);
      emit(graphed);
      table.row(table_cells(label, path + " (graph replay)", graphed));
    }
  }
  if (!c.json) table.print();
  if (!c.json && std::any_of(workloads.begin(), workloads.end(), [](const Workload& w) { return is_fp8(w.dtype); }))
    fmt::print("note: e4m3 rows time the attention call alone: Q, K, V already FP8 (random values quantized with "
               "scale 1), O written in e4m3 with scale_o = 1, P quantized with scale_s = 448; 'attnlab fp8' times "
               "the codelab's FP8 cell with the DelayedScaling recipe\n");
  if (!not_graphed.empty()) {
    // A note, not an error: the CPU paths were timed as usual. With --json, stdout stays JSON lines.
    fmt::print(c.json ? stderr : stdout, "note: --graph: {}; {} {} timed without graphs\n", kGraphNeedsCuda,
               fmt::join(not_graphed, ", "), not_graphed.size() == 1 ? "is a CPU path," : "are CPU paths,");
  }
  return outcome;
}

Action attach_bench(CLI::App& cmd) {
  auto flags = std::make_shared<BenchOptions>();
  auto report = std::make_shared<ReportFlags>();
  add_case_flags(cmd, flags->shape, /*fp8=*/true);
  const char* timing = "Timing";
  cmd.add_option("--workloads", flags->workloads, "JSON file of workloads (e.g. bench/workloads.json); replaces "
                                                  "the shape flags")->check(CLI::ExistingFile)->group(timing);
  cmd.add_flag("--backward", flags->backward, "time backward calls (dQ, dK, dV) instead of forward")->group(timing);
  add_timing_flags(cmd, flags->plan, timing);
  cmd.add_flag("--graph", flags->graph, "also time CUDA-graph replays of --repeats calls per CUDA path (the launch "
                                        "floor): one more row each")->group(timing);
  cmd.add_option("--jsonl", flags->jsonl, "append result rows (JSON lines) to this file")->group(timing);
  add_report_flags(cmd, *report);
  return [flags, report] {
    return run_with_report(*report, "attnlab bench", flags->shape.json, [&] { return run_bench(*flags); });
  };
}

}  // namespace lab
