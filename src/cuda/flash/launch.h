// Host entry of the flash kernels: launch one (dtype, head dims) instantiation, choosing its tile configuration
// by the shared memory the device offers. Each instantiation is compiled in its own generated translation unit
// (see src/CMakeLists.txt and instance.cu.in); flash_instances.inc lists them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "attnlab/attention.h"
#include "cuda/flash/flash_params.h"

namespace attnlab::cuda::flash {

// Launches (Element, Hqk, Hv) on `stream` with the first configuration (tile_configs.h) whose shared memory
// ≤ smem_limit, or with pick ≥ 0 the pick-th configuration of the list if it fits (benchmarks compare them).
// Calls with a score modifier (softcap, bias, boolean mask) use the modifier list, whose kernels carry the extra
// per-element work. Returns whether a configuration fits; with launch == false it only answers that.
template <class Element, int kHeadQK, int kHeadV>
bool launch_forward(const FlashParams& params, std::size_t smem_limit, int pick, cudaStream_t stream,
                            bool launch);

// Is (dtype, Hqk, Hv) instantiated?
bool has_instance(DType dtype, int head_qk, int head_v);
// The same dispatch at run time; throws Error(internal) for a missing instance (why_not() rules those out).
bool launch_forward(DType dtype, int head_qk, int head_v, const FlashParams& params, std::size_t smem_limit,
                            int pick, cudaStream_t stream, bool launch);

}  // namespace attnlab::cuda::flash
