// Host entry of the sm_90a flash kernels: one compiled instantiation per (element type, head dims, version), each
// in its own generated translation unit (src/CMakeLists.txt, instance.cu.in); sm90_instances.inc lists the head
// dims.
#pragma once

#include <cuda_runtime.h>

#include "attnlab/attention.h"
#include "cuda/flash_sm90/params.h"
#include "cuda/flash_sm90/versions.h"  // kVersions, version_built

namespace attnlab::cuda::sm90 {

// Launches the instantiation on `stream` over grid (query blocks, heads, batches). The caller has checked the
// device (compute capability 9.0) and built the tensor maps (tensor_maps.h).
template <class Element, int kHeadQK, int kHeadV, int kVersion>
void launch_forward(const KernelParams& params, int device, cudaStream_t stream);

// Is (dtype, Hqk, Hv) instantiated?
bool has_instance(DType dtype, int head_qk, int head_v);
// The same dispatch at run time; throws Error(internal) for a missing instance (the path's rules rule it out).
void launch_forward(DType dtype, int head_qk, int head_v, int version, const KernelParams& params, int device,
                    cudaStream_t stream);

// s5 on a device of `sms` SMs over `blocks` blocks: whether its CTAs walk several blocks each, and so need the
// block counter (KernelParams::tile_counter: a 16-byte piece of scratch, zeroed before the launch). A call of at
// most one block per SM launches one CTA per block and needs neither.
constexpr bool dynamic_walk_needs_counter(long long blocks, int sms) { return blocks > sms; }

}  // namespace attnlab::cuda::sm90
