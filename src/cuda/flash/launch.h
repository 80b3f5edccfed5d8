// Host entry of the flash kernels: launch one (dtype, head dims) instantiation, choosing its tile configuration
// by the shared memory the device offers. Each instantiation is compiled in its own generated translation unit
// (see src/CMakeLists.txt and instance.cu.in); flash_instances.inc lists them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "attnlab/attention.h"
#include "cuda/flash/flash_params.h"

namespace attnlab::cuda::flash {

// What a launch chose (or would choose). Plain numbers: a call must not pay for formatting text.
struct LaunchChoice {
  bool fits = false;  // some configuration fits the shared-memory limit
  int block_m = 0, block_n = 0, warps = 0, stages = 0, blocks_per_sm = 0;
  bool q_in_registers = false;
  std::size_t smem_bytes = 0;
};
// "128x64, 8 warps, 2 stages, Q in registers, 96 KB" (perf notes, messages).
std::string describe(const LaunchChoice& choice);

// Launches (Element, Hqk, Hv) on `stream` with the first configuration (tile_configs.h) whose shared memory
// ≤ smem_limit, or with pick ≥ 0 the pick-th configuration of the list if it fits (benchmarks compare them).
// Calls with a score modifier (softcap, bias, boolean mask) use the modifier list, whose kernels carry the extra
// per-element work. With launch == false only reports the choice.
template <class Element, int kHeadQK, int kHeadV>
LaunchChoice launch_forward(const FlashParams& params, std::size_t smem_limit, int pick, cudaStream_t stream,
                            bool launch);

// Is (dtype, Hqk, Hv) instantiated?
bool has_instance(DType dtype, int head_qk, int head_v);
// The same dispatch at run time; throws Error(internal) for a missing instance (why_not() rules those out).
LaunchChoice launch_forward(DType dtype, int head_qk, int head_v, const FlashParams& params, std::size_t smem_limit,
                            int pick, cudaStream_t stream, bool launch);

}  // namespace attnlab::cuda::flash
