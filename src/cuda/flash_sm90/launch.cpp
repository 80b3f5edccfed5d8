// Run-time dispatch onto the compiled sm_90a instantiations. The list lives in src/CMakeLists.txt, which generates
// the instance files and sm90_instances.inc (one ATTNLAB_SM90_INSTANCE(Hqk, Hv) line per head-dim pair, each in
// bf16 and f16).
#include "cuda/flash_sm90/launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "cuda/flash_sm90/traits.h"  // compiled_version

namespace attnlab::cuda::sm90 {

bool has_instance(DType dtype, int head_qk, int head_v) {
  if (dtype != DType::bf16 && dtype != DType::f16) return false;
#define ATTNLAB_SM90_INSTANCE(HQK, HV) \
  if (head_qk == HQK && head_v == HV) return true;
#include "cuda/flash_sm90/sm90_instances.inc"
#undef ATTNLAB_SM90_INSTANCE
  return false;
}

namespace {
// A version built at some head dims only (versions.h, version_built); the path's rules refuse the others first.
template <class Element, int kHeadQK, int kHeadV, int kVersion>
void launch_where_built(const KernelParams& params, int device, cudaStream_t stream) {
  if constexpr (version_built(kHeadQK, kHeadV, kVersion))
    return launch_forward<Element, kHeadQK, kHeadV, kVersion>(params, device, stream);
  core::fail(ErrorCode::internal, "flash-sm90: s{} is not built at head dims {}/{} (the path's rules rule it out)",
             kVersion, kHeadQK, kHeadV);
}

template <class Element, int kHeadQK, int kHeadV>
void launch_version(int version, const KernelParams& params, int device, cudaStream_t stream) {
  static_assert(kVersions == 32);
  if (version == 31) return launch_where_built<Element, kHeadQK, kHeadV, 31>(params, device, stream);
  if (version == 30) return launch_where_built<Element, kHeadQK, kHeadV, 30>(params, device, stream);
  if (version == 29) return launch_where_built<Element, kHeadQK, kHeadV, 29>(params, device, stream);
  if (version == 26) return launch_where_built<Element, kHeadQK, kHeadV, 26>(params, device, stream);
  if (version == 15) return launch_where_built<Element, kHeadQK, kHeadV, 15>(params, device, stream);
  if (version == 13) return launch_where_built<Element, kHeadQK, kHeadV, 13>(params, device, stream);
  if (version == 11) return launch_where_built<Element, kHeadQK, kHeadV, 11>(params, device, stream);
  if (version == 7) return launch_where_built<Element, kHeadQK, kHeadV, 7>(params, device, stream);
  if (version == 6) return launch_where_built<Element, kHeadQK, kHeadV, 6>(params, device, stream);
  if (version == 5) return launch_where_built<Element, kHeadQK, kHeadV, 5>(params, device, stream);
  if (version == 4) {
    if constexpr (compiled_version(kHeadQK, 4) == 4)
      return launch_forward<Element, kHeadQK, kHeadV, 4>(params, device, stream);
    return launch_forward<Element, kHeadQK, kHeadV, 2>(params, device, stream);
  }
  if (version == 3) return launch_where_built<Element, kHeadQK, kHeadV, 3>(params, device, stream);
  if (version == 2) return launch_forward<Element, kHeadQK, kHeadV, 2>(params, device, stream);
  return launch_forward<Element, kHeadQK, kHeadV, 1>(params, device, stream);
}
}  // namespace

void launch_forward(DType dtype, int head_qk, int head_v, int version, const KernelParams& params, int device,
                    cudaStream_t stream) {
#define ATTNLAB_SM90_INSTANCE(HQK, HV)                                              \
  if (head_qk == HQK && head_v == HV && dtype == DType::bf16)                       \
    return launch_version<__nv_bfloat16, HQK, HV>(version, params, device, stream); \
  if (head_qk == HQK && head_v == HV && dtype == DType::f16)                        \
    return launch_version<__half, HQK, HV>(version, params, device, stream);
#include "cuda/flash_sm90/sm90_instances.inc"
#undef ATTNLAB_SM90_INSTANCE
  core::fail(ErrorCode::internal, "flash-sm90: no kernel for {} with head dims {}/{}", to_string(dtype), head_qk,
             head_v);
}

}  // namespace attnlab::cuda::sm90
