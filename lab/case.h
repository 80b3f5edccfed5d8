// The problem an experiment runs, as the common flags describe it (docs/design.md §4: --device, --paths, shape flags,
// --dtype, --causal, --json), and what the defaults resolve to on this machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <attnlab/attention.h>

#include "tensors.h"
#include "timing.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace lab {

// The flags as parsed. Defaults are the codelab's: (B, T, N, H) = (4, 128, 8, 64), S = T, K = N, f32.
struct CaseFlags {
  std::int64_t batch = 4;
  std::int64_t seq = 128;
  std::int64_t kv_seq = 128;
  std::int64_t heads = 8;
  std::int64_t kv_heads = 8;
  std::int64_t head_dim = 64;
  std::string dtype = "f32";
  bool causal = false;
  std::string device;               // empty: cuda when a CUDA path is available here, else cpu
  std::vector<std::string> paths;   // empty: the experiment's default
  std::uint64_t seed = 0;
  int threads = 0;                  // CPU paths' threads, 0 = all
  bool json = false;
  // Options whose default depends on another flag (S = T, K = N unless given).
  CLI::Option* kv_seq_option = nullptr;
  CLI::Option* kv_heads_option = nullptr;
};

// Declares the common flags on a subcommand. `fp8`: --dtype also takes e4m3 (the timing commands, whose calls get
// FP8 inputs and scales from call_set.h; the comparing ones have no FP8 reference).
void add_case_flags(CLI::App& command, CaseFlags& flags, bool fp8 = false);

// The timing flags bench, sweep, heads and lab share: --warmup, --repeats, --groups, in the help group `group`.
void add_timing_flags(CLI::App& command, TimingPlan& plan, const char* group);

// The flags resolved against this build and machine.
struct Case {
  std::int64_t B, T, S, N, K, Hqk, Hv;
  attnlab::DType dtype;
  bool causal;
  attnlab::Device device;
  std::vector<std::string> paths;
  std::uint64_t seed;
  int threads;
  bool json;

  Shape q_shape() const { return {B, T, N, Hqk}; }
  Shape k_shape() const { return {B, S, K, Hqk}; }
  Shape v_shape() const { return {B, S, K, Hv}; }
  Shape o_shape() const { return {B, T, N, Hv}; }
};

using PathsFor = std::vector<std::string> (*)(attnlab::Device);
std::vector<std::string> default_paths(attnlab::Device device);

// `paths_for` chooses the paths when --paths was not given (an experiment may want others than compare's); it
// receives the resolved device. Throws attnlab::Error when --device cuda cannot work here.
Case resolve(const CaseFlags& flags, PathsFor paths_for = default_paths);

// cuda when this build has a CUDA path that is available on this machine, else cpu.
attnlab::Device default_device();
// Every path of `device` that is available here, in registration order.
std::vector<std::string> available_paths(attnlab::Device device);
// What compare (and later experiments) run without --paths: the available paths of `device`, the naive one first
// (the reference); on cuda, cpu-naive leads as the reference.

}  // namespace lab
