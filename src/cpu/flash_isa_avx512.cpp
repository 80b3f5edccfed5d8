// cpu-flash kernels built for AVX-512. Only this region is compiled with AVX-512 enabled, so the library still runs
// on any x86-64; flash.cpp calls these kernels only after the CPU reported avx512f.
#include "cpu/flash_plan.h"  // first: every header, parsed for the baseline ISA (see flash_plan.h)

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif

namespace attnlab::cpu::flash::avx512 {
inline constexpr int kLanes = 16;
inline constexpr int kGemmRows = 6;  // 6 × 4 = 24 of the 32 zmm registers hold accumulators
inline constexpr int kGemmVecs = 4;
#include "cpu/flash_tiles.h"
#include "cpu/flash_forward_kernel.h"
#include "cpu/flash_backward_kernel.h"
constexpr Kernels kKernels{"avx512f", kLanes, &forward_block, &backward_row_dots, &backward_key_block,
                            &backward_query_block};
}  // namespace attnlab::cpu::flash::avx512

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace attnlab::cpu::flash {
const Kernels* kernels_avx512() { return &avx512::kKernels; }
}  // namespace attnlab::cpu::flash

#else
namespace attnlab::cpu::flash {
const Kernels* kernels_avx512() { return nullptr; }
}  // namespace attnlab::cpu::flash
#endif
