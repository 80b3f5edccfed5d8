// The timing pieces bench, sweep and heads share: a workload (one shape + options), its tensors on the path's
// device, and one timed row per (workload, path), measured the lab's way (timing.h).
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
};

// Bytes a call must move at least: each input read once, each output written once.
double io_bytes(const Workload& w);

// The device a registered path runs on; `fallback` for "auto" and unknown names.
attnlab::Device path_device(const std::string& path, attnlab::Device fallback);
// "cpu", or the GPU's name.
std::string device_label(attnlab::Device device);

// Times `path` on `w` and returns the row: ms median/min/max, TFLOP/s, GB/s, first call, workspace. A path that
// refuses or fails gives a row with ok = false and the reason in note; invalid arguments are thrown.
ResultRow bench_one(const Workload& w, const std::string& path, attnlab::Device device, const TimingPlan& plan,
                    int threads);

// "{:.3f}" of a measured value, "—" for one that was not measured.
std::string fmt_opt(const std::optional<double>& v, const char* spec);

}  // namespace lab
