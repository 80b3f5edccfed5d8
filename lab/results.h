// Result rows: one JSON object per measurement, with the keys every experiment (and the peers' scripts) share
// (docs/design.md §4). A value an experiment did not measure is null, never a made-up number.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lab {

struct ResultRow {
  std::string experiment;  // "compare", "bench", ...
  std::string path;        // the path that ran (or was asked for, when it did not run)
  std::string device;      // "cpu" / "cuda"
  std::string dtype;       // "f32", "f16", "bf16", ...
  std::int64_t B = 0, T = 0, S = 0, N = 0, K = 0, Hqk = 0, Hv = 0;
  bool causal = false;
  std::optional<std::string> window;  // "left,right" when a sliding window was used
  std::optional<double> ms_median, ms_min, ms_max;
  std::optional<double> tflops, gbps;
  std::optional<double> max_abs_err;  // against the experiment's reference
  bool ok = false;                    // ran, and the experiment's check (if any) passed
  std::string note;                   // a refusal's reason, "reference", ...
  // Extras after the shared keys, written only when set.
  std::optional<std::string> direction;       // "fwd" / "bwd" (bench)
  std::optional<double> first_call_ms;        // the first call at a new shape (plan builds included)
  std::optional<double> host_ms;              // GPU paths: the host's time to issue one call (launch cost)
  std::optional<double> workspace_bytes;      // scratch memory the path used
  std::optional<bool> graph;                  // true: timed as CUDA-graph replays (`attnlab bench` / `sweep --graph`)
  std::optional<double> softcap;              // the workload's softcap, when it has one (bench)
};

// One line of JSON, keys in the order of docs/design.md §4, no trailing newline. NaN and infinities become null.
std::string to_json_line(const ResultRow& row);

}  // namespace lab
