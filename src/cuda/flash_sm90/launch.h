// Host entry of the sm_90a flash kernels: one compiled instantiation per (element type, head dims, version), each
// in its own generated translation unit (src/CMakeLists.txt, instance.cu.in); sm90_instances.inc lists the head
// dims.
#pragma once

#include <cuda_runtime.h>

#include "attnlab/attention.h"
#include "cuda/flash_sm90/params.h"

namespace attnlab::cuda::sm90 {

// The kernel versions compiled for each instance (traits.h, kVersion), and the one a call runs unless
// Tuning::flash_config names another (tests and A/B runs): the fastest measured (docs/perf-notes-flash-sm90.md).
// Versions are numbered 1–4 (s1, s2, s3, s4); index 0 was s0, retired. s2, s3 and s4 need scale > 0; a call with
// another scale runs s1 (flash_sm90_path.cpp).
constexpr int kVersions = 5;
constexpr int kFirstVersion = 1;
constexpr int kDefaultVersion = 2;

// Whether version `version` is compiled at Q·Kᵀ head dim `head_qk` (src/CMakeLists.txt follows it). s3 is not at
// 256: there its persistent loop's state spilled to local memory beside O's 128 registers, and it measured slower
// than s2 (docs/perf-notes-flash-sm90.md). The path refuses such a call by this rule.
constexpr bool version_built(int head_qk, int version) { return !(version == 3 && head_qk == 256); }

// Launches the instantiation on `stream` over grid (query blocks, heads, batches). The caller has checked the
// device (compute capability 9.0) and built the tensor maps (tensor_maps.h).
template <class Element, int kHeadQK, int kHeadV, int kVersion>
void launch_forward(const KernelParams& params, int device, cudaStream_t stream);

// Is (dtype, Hqk, Hv) instantiated?
bool has_instance(DType dtype, int head_qk, int head_v);
// The same dispatch at run time; throws Error(internal) for a missing instance (the path's rules rule it out).
void launch_forward(DType dtype, int head_qk, int head_v, int version, const KernelParams& params, int device,
                    cudaStream_t stream);

// Rows per block (the grid's x extent is ⌈T / kBlockM⌉).
constexpr int kBlockM = 128;

}  // namespace attnlab::cuda::sm90
