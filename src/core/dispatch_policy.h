// auto's choice, in one place: for a validated problem, the order in which `auto` tries the paths. Dispatch walks
// that order and runs the first path that accepts the call (its rules, and on a context whatever the call itself
// finds first, e.g. a cuDNN graph that fails to build), so a refusal falls through to the next path.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/problem.h"

namespace attnlab::core {

// What the policy decides on: which device, which direction, the element type, the size, and the GPU.
struct CallTraits {
  Device device = Device::cpu;
  Direction direction = Direction::forward;
  DType dtype = DType::f32;
  double flops = 0;  // 4·B·N·T·S·Hqk (mask-independent: the policy's thresholds were measured this way)
  int cc = 0;        // compute capability × 10 of the call's GPU; 0 on the CPU
  // The shape and mask, for rows measured on one kind of call only.
  std::int64_t T = 0, S = 0, Hqk = 0, Hv = 0;
  bool causal_only = false;  // a causal mask and nothing else: no window, softcap, bias, boolean mask or lengths
  bool unmasked = false;     // no mask and no modifier at all: none of the above, and not causal
};

CallTraits call_traits(const Problem& problem);  // defined in dispatch.cpp

// One row of the policy: when it applies, the order of paths, and the measurement it rests on.
struct PolicyRow {
  const char* applies;  // the condition, in words (for docs and messages)
  bool (*matches)(const CallTraits&);
  std::array<std::string_view, 4> order;  // path names, best first; empty names pad the array
  const char* evidence;                   // where the figures that justify the order are
};

// The rows, first match wins (dispatch_policy.cpp). Every problem matches exactly one row's condition or the last.
const PolicyRow& policy_row(const CallTraits& traits);

// Packed variable-length batches on the GPU (include/attnlab/serving.h): which of flash's two kernels `flash` and
// `auto` run them on. The split-KV kernel (cuda/serving/split_kv.h: any GPU from sm_80, packed or paged keys, GQA
// rows packed into one tile, keys split across blocks) is made for decode; the sm_90a kernel (cuda/flash_sm90/
// varlen.h) for prefill, where whole 128-row blocks of one head fill the GPU.
struct VarlenTraits {
  bool paged = false;
  std::int64_t max_seqlen_q = 0;
  std::int64_t query_blocks = 0;  // 128-row blocks of (sequence, query head) with at least one row
  int sm_count = 0;
};
// Whether the sm_90a kernel should run the batch, when it takes the call (its rules are the path's to check).
bool varlen_prefers_sm90(const VarlenTraits& traits);
// Whether `auto` should run a batch on cudnn before flash's kernels, when cudnn takes the call: a paged prefill,
// which the sm_90a kernel does not take and cuDNN's paged SDPA runs 1.5× faster than the split-KV kernel.
bool varlen_prefers_cudnn(const VarlenTraits& traits);
// The condition in words and the measurement it rests on.
extern const char* const kVarlenPolicy;

// Compute capability × 10 of CUDA device `index`, or 0 when this build has no CUDA paths or no such device
// (defined next to the registration list, which knows whether CUDA is compiled in).
int device_compute_capability(int index);

}  // namespace attnlab::core
