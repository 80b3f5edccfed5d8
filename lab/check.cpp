// attnlab check — the codelab's step 1: what machine this is, what this build of attnlab contains, which GPU
// there is, and which paths can run here (the C++ side of the codelab's HAS_CUDNN_SDPA probe).
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <attnlab/attention.h>

#include "case.h"
#include "experiment.h"
#include "gpu.h"
#include "machine.h"
#include "runner.h"
#include "runs.h"
#include "table.h"

namespace lab {
namespace {

void print_machine() {
  const CpuInfo cpu = cpu_info();
  const attnlab::BuildInfo build = attnlab::build_info();
  std::string cores = fmt::format("{} logical CPUs", cpu.logical_cpus);
  if (cpu.physical_cores > 0) cores += fmt::format(", {} physical cores", cpu.physical_cores);
  key_value_table("Machine", {{"CPU", cpu.model},
                              {"Cores", cores},
                              {"SIMD", build.cpu_isa + " (the widest the CPU paths use on this CPU)"}})
      .print();
  key_value_table("attnlab", {{"Version", build.version},
                              {"Compiler", build.compiler},
                              {"CUDA", build.cuda ? "compiled in" : "not compiled in (CPU-only build)"}})
      .print();
}

void print_gpus() {
  if (!gpu::compiled_in()) {
    key_value_table("GPU", {{"GPU", "no CUDA support compiled in"}}).print();
    return;
  }
  const gpu::Inventory inv = gpu::inventory();
  std::vector<std::pair<std::string, std::string>> rows = {
      {"CUDA runtime", inv.runtime_version.empty() ? "unknown" : inv.runtime_version},
      {"CUDA driver", inv.driver_version.empty() ? "none found" : inv.driver_version}};
  if (inv.devices.empty()) rows.emplace_back("GPU", inv.problem);
  key_value_table("GPU", rows).print();
  if (inv.devices.empty()) return;
  Table t;
  t.columns({"#", "name", "compute capability", "SMs", "memory", "shared memory / block"},
            {Align::right, Align::left, Align::left, Align::right, Align::right, Align::right});
  for (const gpu::DeviceInfo& d : inv.devices)
    t.row({std::to_string(d.index), d.name, fmt::format("{}.{}", d.cc_major, d.cc_minor), std::to_string(d.sm_count),
           fmt::format("{:.1f} GiB", double(d.memory_bytes) / (1ull << 30)),
           fmt::format("{} KiB", d.shared_memory_per_block_optin / 1024)});
  t.print();
}

// Whether `path` would run the codelab's default case in `dtype`. Asks the library (attnlab::why_not) with real
// tensors of that shape on the path's device; nothing runs.
struct Probe {
  bool runs = false;
  std::string reason;
};
Probe probe(const attnlab::PathInfo& path, attnlab::DType dtype) {
  CaseFlags flags;  // the codelab default (4, 128, 8, 64)
  flags.dtype = std::string(attnlab::to_string(dtype));
  flags.device = std::string(attnlab::to_string(path.device));
  flags.paths = {path.name};
  try {
    Runner runner(resolve(flags));
    const std::optional<std::string> why = runner.why_not(path.name);
    if (!why) return {true, ""};
    return {false, refusal_reason(path.name, *why)};
  } catch (const attnlab::Error& e) {
    return {false, e.what()};
  }
}

void print_paths() {
  const std::vector<attnlab::DType> dtypes = {attnlab::DType::f32, attnlab::DType::bf16};
  Table t("Paths in this build (\"runs f32\": would it run the codelab's default case (4, 128, 8, 64) in f32?)");
  std::vector<std::string> headers = {"path", "device", "available"};
  for (attnlab::DType d : dtypes) headers.push_back(fmt::format("runs {}", attnlab::to_string(d)));
  headers.push_back("why not");
  t.columns(headers);
  std::vector<std::pair<std::string, std::string>> summaries;
  for (const attnlab::PathInfo& p : attnlab::list_paths()) {
    std::vector<std::string> row = {p.name, std::string(attnlab::to_string(p.device)), p.available ? "yes" : "no"};
    std::vector<std::string> reasons;
    if (!p.available) reasons.push_back(p.unavailable);
    for (attnlab::DType d : dtypes) {
      if (!p.available) {
        row.push_back("-");
        continue;
      }
      const Probe r = probe(p, d);
      row.push_back(r.runs ? "yes" : "no");
      // Each distinct reason once: a path usually refuses both dtypes for the same reason.
      if (!r.runs && std::find(reasons.begin(), reasons.end(), r.reason) == reasons.end())
        reasons.push_back(r.reason);
    }
    row.push_back(fmt::format("{}", fmt::join(reasons, "; ")));
    t.row(row);
    summaries.emplace_back(p.name, p.summary);
  }
  t.print();
  // Summaries are long sentences: a table of their own keeps the table above narrow.
  key_value_table("What each path is", summaries).print();
  const attnlab::Device device = default_device();
  const std::vector<std::string> paths = default_paths(device);
  key_value_table("Defaults", {{"attnlab compare runs on", std::string(attnlab::to_string(device))},
                               {"with paths", paths.empty() ? "none" : fmt::format("{}", fmt::join(paths, ", "))}})
      .print();
}

}  // namespace

Outcome run_check() {
  print_machine();
  print_gpus();
  print_paths();
  return {};  // no rows: check measures nothing
}

Action attach_check(CLI::App& cmd) {
  cmd.footer("Prints the machine, this build of attnlab, its GPUs and the table of paths. Always exits 0 unless "
             "the library itself fails.");
  return [] { return run_check().passed ? 0 : 1; };
}

}  // namespace lab
