// Host entry of the sm_90a flash kernels: one compiled instantiation per (element type, head dims, version), each
// in its own generated translation unit (src/CMakeLists.txt, instance.cu.in); sm90_instances.inc lists the head
// dims.
#pragma once

#include <cuda_runtime.h>

#include "attnlab/attention.h"
#include "cuda/flash_sm90/params.h"

namespace attnlab::cuda::sm90 {

// The kernel versions compiled for each instance (traits.h, kVersion). Versions are numbered 1–7 (s1 … s7); index
// 0 was s0, retired. s2 and later need scale > 0; a call with another scale runs s1 (flash_sm90_path.cpp).
constexpr int kVersions = 8;
constexpr int kFirstVersion = 1;

// Whether version `version` is compiled at head dims `head_qk`/`head_v` (src/CMakeLists.txt follows it). The
// persistent versions keep a walk's state beside O: s3 is not at 256, where it spilled to local memory beside O's
// 128 registers (and measured slower than s2), s5 not at 192/192 and 256, where it spilled with its consumers at
// 224 registers (traits.h; docs/perf-notes-flash-sm90.md). s6's three consumer warpgroups and s7's 256-key tiles
// exist at head dim 64 alone (traits.h, query_block_rows and key_tile_rows). The path refuses such a call by this
// rule.
constexpr bool version_built(int head_qk, int head_v, int version) {
  if (version == 3) return head_qk != 256;
  if (version == 5) return head_qk != 256 && !(head_qk == 192 && head_v == 192);
  if (version == 6 || version == 7) return head_qk == 64 && head_v == 64;
  return true;
}

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
