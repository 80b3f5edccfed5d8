// How the lab times a call (docs/design.md §4): warm-up calls first, then several groups of back-to-back calls; each
// group gives one per-call time (CUDA events on a GPU, a steady clock on the CPU) and the lab reports the median,
// min and max over groups. Calls receive their index so callers can rotate input sets.
#pragma once

#include <functional>

#include <attnlab/attention.h>

namespace lab {

struct TimingPlan {
  int warmup = 10;            // at least this many calls, and at least warmup_ms of them
  int repeats = 20;           // calls per group
  int groups = 7;
  double warmup_ms = 200.0;   // an idle GPU needs time to reach its clocks; `attnlab lab --quick` lowers it
};

struct Timing {
  double ms_median = 0, ms_min = 0, ms_max = 0;  // per call
  double first_call_ms = 0;  // the very first call at this shape, host clock until done (plan builds show here)
  // On a GPU: the host's time to issue one call (median over groups). Near ms_median, the calls are launch-bound.
  double host_ms_median = 0;
};

// Times fn(i). Throws whatever fn throws (e.g. attnlab::Error when a path refuses).
Timing measure(attnlab::Device device, const std::function<void(int)>& fn, TimingPlan plan);

// FLOPs of one attention call (docs/design.md §5): 2·B·N·T·S·(Hqk + Hv) (Q·Kᵀ and P·V), half when causal, 2.5× for
// a backward call. At Hqk = Hv this is the field's 4·B·N·T·S·H.
double attention_flops(std::int64_t B, std::int64_t N, std::int64_t T, std::int64_t S, std::int64_t Hqk,
                       std::int64_t Hv, bool causal, bool backward);

}  // namespace lab
