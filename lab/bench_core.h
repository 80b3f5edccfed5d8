// The timing pieces bench, sweep and heads share: a workload (one shape + options), its tensors on the path's
// device (call_set.h), and one timed row per (workload, path), measured the lab's way (timing.h); with --graph,
// one more row per CUDA path from CUDA-graph replays of the same calls (graph_bench.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <attnlab/attention.h>

#include "results.h"
#include "tensors.h"
#include "timing.h"

namespace lab {

struct Workload {
  std::string name, experiment = "bench";
  std::int64_t B, T, S, N, K, Hqk, Hv;
  attnlab::DType dtype;
  bool causal = false;
  bool backward = false;
  float softcap = 0.0f;  // 0 = none (Options::softcap)
};

// Bytes a call must move at least: each input read once, each output written once.
double io_bytes(const Workload& w);

// The device a registered path runs on; `fallback` for "auto" and unknown names.
attnlab::Device path_device(const std::string& path, attnlab::Device fallback);
// "cpu", or the GPU's name.
std::string device_label(attnlab::Device device);

// The row's identity (experiment, path, device, dtype, shape, direction), nothing measured yet.
ResultRow workload_row(const Workload& w, const std::string& path, attnlab::Device device);

// How many input sets to rotate: several when one set would sit in the GPU's L2 between calls (timing the cache,
// not the path), else one.
int input_sets(const Workload& w, attnlab::Device device);

// Times `path` on `w` and returns the row: ms median/min/max, TFLOP/s, GB/s, first call, workspace. A path that
// refuses or fails gives a row with ok = false and the reason in note; invalid arguments are thrown.
ResultRow bench_one(const Workload& w, const std::string& path, attnlab::Device device, const TimingPlan& plan,
                    int threads);

// Times CUDA-graph replays of `path` on `w` (CUDA paths): after warm-up, plan.repeats back-to-back calls are
// captured into one graph on a stream the lab owns, and replays are timed like bench_one's groups (per call:
// replay time / calls). The row has graph = true and a note starting "graph replay"; when the path cannot be
// captured (a synchronous copy, an allocation during capture, ...) ok = false and the note says
// "graph capture failed: <reason>". The stream is never left capturing.
ResultRow bench_graph(const Workload& w, const std::string& path, attnlab::Device device, const TimingPlan& plan,
                      int threads);

// What --graph says about a path that is not a CUDA path.
inline constexpr const char* kGraphNeedsCuda = "CUDA graphs need a CUDA path";

// "{:.3f}" of a measured value, "—" for one that was not measured.
std::string fmt_opt(const std::optional<double>& v, const char* spec);

}  // namespace lab
