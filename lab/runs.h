// The experiments as functions: each prints what its subcommand prints and returns its rows and verdict, so a
// subcommand's action and `attnlab lab` (which runs them all in the codelab's order) share one implementation.
// Invalid arguments and impossible setups throw attnlab::Error, as they do for the subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "case.h"
#include "experiment.h"
#include "timing.h"

namespace lab {

Outcome run_check();
Outcome run_compare(const Case& c);
Outcome run_causal(const Case& c);

struct BenchOptions {
  CaseFlags shape;         // the shape (and device, paths, dtype, ...) when no workloads file is given
  std::string workloads;   // a JSON file of workloads, replacing the shape
  std::string jsonl;       // append rows here too
  bool backward = false;
  bool graph = false;      // also time CUDA-graph replays of the calls (CUDA paths)
  TimingPlan plan;
  BenchOptions() { shape.dtype = "bf16"; }
};
Outcome run_bench(const BenchOptions& options);

struct SweepOptions {
  std::string what;                   // "seq" or "batch"
  std::vector<std::int64_t> values;   // empty: the codelab's
  CaseFlags shape;
  bool seq_given = false;             // batch sweeps run at T=256 unless -T was given
  std::string jsonl;
  bool graph = false;
  TimingPlan plan;
  SweepOptions() { shape.dtype = "bf16"; }
};
Outcome run_sweep(const SweepOptions& options);

struct HeadsOptions {
  CaseFlags shape;  // --kv-heads must not be given: heads chooses N, N/4, N/8
  std::string jsonl;
  TimingPlan plan;
  HeadsOptions() { shape.dtype = "bf16"; }
};
Outcome run_heads(const HeadsOptions& options);

// The codelab's FP8 cell (fp8.cpp): its shape, (4, 2048, 8, 64) causal, unless flags say otherwise.
struct Fp8Options {
  std::int64_t B = 4, T = 2048, N = 8, H = 64;
  bool causal = true;
  int steps = 4;                    // DelayedScaling steps: the first runs with scale 1, later ones with the recipe's
  std::vector<std::string> paths;   // bf16 paths to time and compare with (empty: every available GPU path)
  bool cpu_only = false;            // `attnlab lab --device cpu`: the GPU is not to be used
  std::uint64_t seed = 0;
  bool json = false;
  TimingPlan plan;
};
Outcome run_fp8(const Fp8Options& options);

}  // namespace lab
