// cpu-flash kernels built for AVX2 + FMA (x86-64-v3 CPUs). Only this region is compiled with AVX2 and FMA enabled,
// so the library still runs on any x86-64; flash.cpp calls these kernels only after the CPU reported avx2 and fma.
#include "cpu/flash_plan.h"  // first: every header, parsed for the baseline ISA (see flash_plan.h)

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace attnlab::cpu::flash::avx2 {
inline constexpr int kLanes = 8;
inline constexpr int kGemmRows = 6;  // 6 × 2 = 12 of the 16 ymm registers hold accumulators
inline constexpr int kGemmVecs = 2;
#include "cpu/flash_tiles.h"
#include "cpu/flash_forward_kernel.h"
#include "cpu/flash_backward_kernel.h"
constexpr Kernels kKernels{"avx2+fma", kLanes, &forward_block, &backward_row_dots, &backward_key_block,
                            &backward_query_block};
}  // namespace attnlab::cpu::flash::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace attnlab::cpu::flash {
const Kernels* kernels_avx2() { return &avx2::kKernels; }
}  // namespace attnlab::cpu::flash

#else
namespace attnlab::cpu::flash {
const Kernels* kernels_avx2() { return nullptr; }
}  // namespace attnlab::cpu::flash
#endif
