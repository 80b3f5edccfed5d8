// cpu-flash kernels for the baseline ISA of the build (SSE2 on x86-64; whatever the compiler targets elsewhere):
// the fallback on CPUs without AVX2, and the only kernels on other architectures.
#include "cpu/flash_plan.h"

namespace attnlab::cpu::flash::baseline {
inline constexpr int kLanes = 4;
inline constexpr int kGemmRows = 4;  // 4 × 2 = 8 of the 16 xmm registers hold accumulators
inline constexpr int kGemmVecs = 2;
#include "cpu/flash_tiles.h"
#include "cpu/flash_forward_kernel.h"
#include "cpu/flash_backward_kernel.h"
#if defined(__x86_64__)
constexpr Kernels kKernels{"sse2", kLanes, &forward_block, &backward_row_dots, &backward_key_block,
                            &backward_query_block};
#else
constexpr Kernels kKernels{"generic", kLanes, &forward_block, &backward_row_dots, &backward_key_block,
                            &backward_query_block};
#endif
}  // namespace attnlab::cpu::flash::baseline

namespace attnlab::cpu::flash {
const Kernels* kernels_baseline() { return &baseline::kKernels; }
}  // namespace attnlab::cpu::flash
