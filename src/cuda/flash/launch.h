// Host entry of the flash kernels: launch one (dtype, head dims) instantiation, choosing its tile configuration
// by the shared memory the device offers. Each instantiation is compiled in its own generated translation unit
// (see src/CMakeLists.txt and instance.cu.in); flash_instances.inc lists them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "attnlab/attention.h"
#include "cuda/flash/config_choice.h"
#include "cuda/flash/flash_params.h"

namespace attnlab::cuda::flash {

// What the device offers a launch, and the benchmarks' override.
struct LaunchLimits {
  // Shared memory per block (the opt-in maximum, or ATTNLAB_FLASH_SMEM_LIMIT below it) and per SM (under
  // ATTNLAB_FLASH_SMEM_LIMIT, that limit + 1 KB).
  SmemBudget smem;
  int sm_count = 0;            // a grid with fewer blocks than SMs takes the small-problem list, if there is one
  int pick = -1;               // ≥ 0: the pick-th configuration of the list (ATTNLAB_FLASH_CONFIG), nothing else
  int device = 0;              // the device launched on, current when the launch runs (its opt-in is per device)
};

// Launches (Element, Hqk, Hv) on `stream` with the first configuration (tile_configs.h) whose shared memory fits
// limits.smem with the blocks per SM it was tuned for (config_choice.h), or with limits.pick ≥ 0 the pick-th
// configuration of the list if it fits a block (benchmarks and tests compare them). Calls with a score modifier
// (softcap, bias, boolean mask) use the modifier list, whose kernels carry the extra per-element work; problems
// too small to fill the GPU use the small-problem list where the head dims have one. Returns whether a
// configuration fits; with launch == false it only answers that.
template <class Element, int kHeadQK, int kHeadV>
bool launch_forward(const FlashParams& params, const LaunchLimits& limits, cudaStream_t stream, bool launch);

// Is (dtype, Hqk, Hv) instantiated?
bool has_instance(DType dtype, int head_qk, int head_v);
// The same dispatch at run time; throws Error(internal) for a missing instance (why_not() rules those out).
bool launch_forward(DType dtype, int head_qk, int head_v, const FlashParams& params, const LaunchLimits& limits,
                    cudaStream_t stream, bool launch);

}  // namespace attnlab::cuda::flash
