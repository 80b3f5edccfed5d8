// Run-time dispatch onto the compiled (dtype, head dims) instantiations. The lists of head-dim pairs live in one
// place, src/CMakeLists.txt, which generates both the instance files and flash_instances.inc.
#include "cuda/flash/launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"

namespace attnlab::cuda::flash {

// flash_instances.inc has one ATTNLAB_FLASH_HEAD_DIMS(Hqk, Hv) line per head-dim pair (bf16 and f16) and one
// ATTNLAB_FLASH_F32_HEAD_DIMS(Hqk, Hv) line per pair that also has f32.
bool has_instance(DType dtype, int head_qk, int head_v) {
  if (dtype == DType::f32) {
#define ATTNLAB_FLASH_HEAD_DIMS(HQK, HV)
#define ATTNLAB_FLASH_F32_HEAD_DIMS(HQK, HV) \
  if (head_qk == HQK && head_v == HV) return true;
#include "cuda/flash/flash_instances.inc"
#undef ATTNLAB_FLASH_HEAD_DIMS
#undef ATTNLAB_FLASH_F32_HEAD_DIMS
    return false;
  }
#define ATTNLAB_FLASH_HEAD_DIMS(HQK, HV) \
  if (head_qk == HQK && head_v == HV) return true;
#define ATTNLAB_FLASH_F32_HEAD_DIMS(HQK, HV)
#include "cuda/flash/flash_instances.inc"
#undef ATTNLAB_FLASH_HEAD_DIMS
#undef ATTNLAB_FLASH_F32_HEAD_DIMS
  return false;
}

bool launch_forward(DType dtype, int head_qk, int head_v, const FlashParams& params, const LaunchLimits& limits,
                    cudaStream_t stream, bool launch) {
#define ATTNLAB_FLASH_HEAD_DIMS(HQK, HV)                                                        \
  if (head_qk == HQK && head_v == HV && dtype == DType::bf16)                                   \
    return launch_forward<__nv_bfloat16, HQK, HV>(params, limits, stream, launch);              \
  if (head_qk == HQK && head_v == HV && dtype == DType::f16)                                    \
    return launch_forward<__half, HQK, HV>(params, limits, stream, launch);
#define ATTNLAB_FLASH_F32_HEAD_DIMS(HQK, HV)                                                    \
  if (head_qk == HQK && head_v == HV && dtype == DType::f32)                                    \
    return launch_forward<float, HQK, HV>(params, limits, stream, launch);
#include "cuda/flash/flash_instances.inc"
#undef ATTNLAB_FLASH_HEAD_DIMS
#undef ATTNLAB_FLASH_F32_HEAD_DIMS
  core::fail(ErrorCode::internal, "flash: no kernel for {} with head dims {}/{}", to_string(dtype), head_qk, head_v);
}

}  // namespace attnlab::cuda::flash
