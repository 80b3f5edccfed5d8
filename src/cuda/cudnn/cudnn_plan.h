// From a validated Problem to what the cudnn path does with it: the support rules (each failure is a reason a
// user can act on) and, when the call is supported, the graph spec and the fix-up kernels around it. Pure host
// arithmetic: no allocation on the device, no launch, cheap enough to run on every call.
#pragma once

#include <optional>
#include <string>

#include "core/problem.h"
#include "cuda/cudnn/cudnn_graphs.h"

namespace attnlab::cuda::cudnn {

struct Runtime {
  int cudnn_version = 0;  // cudnnGetVersion() of the loaded library, e.g. 91400 for 9.14.0
  int cc = 0;             // compute capability × 10 of the call's device
  int sm_count = 0;       // its multiprocessors
};

struct Plan {
  GraphSpec spec;
  bool user_lengths = false;  // padding lengths come from the call: copied / clamped into the workspace
  bool full_lengths = false;  // padding mask with constant lengths T / S (cuDNN needs it for some T > S masks)
  // Forward: cuDNN's Stats go to the workspace (no LSE requested, or the caller's LSE is not packed (B, N, T)).
  // Backward: the caller's LSE is copied (and −inf made +inf) into packed workspace stats first.
  bool stats_in_workspace = false;
  bool empty_rows = false;   // some query row may see no key
  bool unseen_keys = false;  // some key may be seen by no query row
  bool check_stats = false;  // a bias is present: a row of only −inf scores shows as non-finite Stats
  bool forward_fixup = false;
  bool backward_prepare = false;
  bool backward_fixup = false;
  // FP8 forward on compute capability 9.x at Hqk < 128: the call runs as batch_chunks graphs of spec.B batches each,
  // one wave of query tiles apiece, their amaxes combined (docs/design.md §7); 1 everywhere else.
  std::int64_t batch_chunks = 1;
};

// "9.14.0" for 91400 (cudnnGetVersion()'s encoding since cuDNN 9).
std::string version_string(int version);

// The reason the cudnn path cannot run `p`, or nullopt with `plan` filled.
std::optional<std::string> make_plan(const core::Problem& p, const Runtime& rt, Plan& plan);

// For the serving calls (cudnn_varlen.cpp): the head-dim rules and the mask as cuDNN's band (spec.bottom_right,
// left_bound, right_bound) of the padded forward problem `p` that stands for a packed or paged batch (its T and S
// the graph's maximum lengths, its mask the call's).
std::optional<std::string> head_dims_and_band(const core::Problem& p, const Runtime& rt, GraphSpec& spec);

}  // namespace attnlab::cuda::cudnn
