// Tile shapes per head-dim pair, best first; a launch takes the first whose shared memory fits the device
// (227 KB per block on sm_90, 163 KB on sm_80, 99 KB on sm_86/sm_89) with as many blocks per SM as it was tuned
// for (config_choice.h). Every pair ends with a configuration of at most 99 KB, so every sm_80+ GPU has one; tests
// force those on large GPUs too (ATTNLAB_FLASH_SMEM_LIMIT), and tests/test_flash_configs.cpp checks the choice for
// each of those GPUs.
//
// Why these shapes (measured on the H200, docs/perf-notes-flash-sm80.md): registers per thread ≈ O + S (+ Q)
// fragments plus addressing must stay ≤ 255 without spills (-Xptxas -v, scripts/sass-check.sh). 4 warps × 32 rows
// share each K/V fragment between two m16 fragments (half the shared-memory traffic per MMA): the fastest at head
// dim 64. At 96 and from 192 up only 8 warps × 16 rows fit the O accumulator. At 128 the same 4 warps × 32 rows
// (O alone is 128 registers) fit without spills only since the copy loop rebuilds its per-thread addresses per
// tile (smem_tile.cuh) and O's rescale sits behind a branch (softmax.cuh); at 96 KB two such blocks share an
// H100/H200 SM, so one block's prologue and epilogue overlap the other's main loop: 7 % faster than 8 warps at
// T = 512 and 5 % at 1k (docs/perf-notes-flash-sm80.md, v6e). On an A100 or sm_86/89 GPU two do not fit an SM, and the launch
// takes the 8-warp configurations after it (not measured there). With 8 warps × 16 rows, one block per SM runs in
// lockstep under a per-step block barrier unless per-slot mbarriers (pipeline.cuh) let the warps drift apart: +9 %
// with 128-key tiles (355 vs 326 TFLOP/s on the H200). Modifier calls keep 8 warps × 16 rows with a block barrier.
// At 64 the mbarrier version, with each tile released at the next step's wait, is 2–8 % faster than the barrier
// one (docs/perf-notes-flash-sm80.md, v6a). SmallList (optional): for grids that leave SMs idle
// with the list's first configuration, where one block's latency is the call's time; at 64, 64-row blocks halve
// it per warp and double the blocks (the codelab's default shape: 4.3 vs 5.6 µs per call under graph replay).
#pragma once

#include "cuda/flash/config_choice.h"
#include "cuda/flash/kernel_traits.h"

namespace attnlab::cuda::flash {

// List: calls without score modifiers. ModifierList: calls with softcap, bias or a boolean mask, whose per-element
// loads and tanh need registers; where the plain list's best configuration would spill with them, the modifier
// list starts lower. SmallList: both kinds of call, when the problem is small (launch.cuh).
//                                   Element Hqk  Hv   BM   BN  warps stages Q in regs [blocks/SM]
template <class E, int kHeadQK, int kHeadV>
struct TileConfigs;
template <class E>
struct TileConfigs<E, 32, 32> {
  using List = TypeList<KernelTraits<E, 32, 32, 128, 64, 4, 2, true>>;      // 40 KB
  using ModifierList = List;
};
template <class E>
struct TileConfigs<E, 64, 64> {
  using List = TypeList<KernelTraits<E, 64, 64, 128, 64, 4, 3, false, 1, true>,  // 64 KB, mbarriers
                        KernelTraits<E, 64, 64, 128, 64, 4, 2, false>>;           // 48 KB, 32 rows per warp
  using ModifierList = TypeList<KernelTraits<E, 64, 64, 128, 64, 4, 2, false>>;
  using SmallList = TypeList<KernelTraits<E, 64, 64, 64, 64, 4, 2, true>>;  // 40 KB, 16 rows per warp
};
template <class E>
struct TileConfigs<E, 96, 96> {
  using List = TypeList<KernelTraits<E, 96, 96, 128, 64, 8, 2, true>>;      // 72 KB
  using ModifierList = List;
};
template <class E>
struct TileConfigs<E, 128, 128> {
  // H100/H200 take the first, A100 the third, sm_86/89 the last; the second (v6's default) only by index.
  using List = TypeList<KernelTraits<E, 128, 128, 128, 64, 4, 2, false, 2>,        // 96 KB, FA2's shape: 2 blocks/SM
                        KernelTraits<E, 128, 128, 128, 128, 8, 3, true, 1, true>,  // 224 KB, mbarriers
                        KernelTraits<E, 128, 128, 128, 64, 8, 3, true, 1, true>,   // 128 KB, mbarriers
                        KernelTraits<E, 128, 128, 128, 64, 8, 2, true>>;           // 96 KB
  using ModifierList = TypeList<KernelTraits<E, 128, 128, 128, 64, 8, 2, true>>;
};
template <class E>
struct TileConfigs<E, 192, 192> {
  using List = TypeList<KernelTraits<E, 192, 192, 128, 64, 8, 2, true>,     // 144 KB
                        KernelTraits<E, 192, 192, 64, 32, 4, 2, true>>;     // 72 KB
  using ModifierList = List;
};
template <class E>
struct TileConfigs<E, 192, 128> {
  using List = TypeList<KernelTraits<E, 192, 128, 128, 64, 8, 2, true>,     // 128 KB
                        KernelTraits<E, 192, 128, 64, 32, 4, 2, true>>;     // 64 KB
  using ModifierList = List;
};
template <class E>
struct TileConfigs<E, 256, 256> {
  using List = TypeList<KernelTraits<E, 256, 256, 128, 64, 8, 2, false>,    // 192 KB
                        KernelTraits<E, 256, 256, 128, 32, 8, 2, false>,    // 128 KB
                        KernelTraits<E, 256, 256, 64, 16, 4, 2, false>>;    // 64 KB
  // With modifiers the 64-key tile spilled 220 bytes on sm_80.
  using ModifierList = TypeList<KernelTraits<E, 256, 256, 128, 32, 8, 2, false>,
                                KernelTraits<E, 256, 256, 64, 16, 4, 2, false>>;
};

// f32 (3xTF32: three MMAs per product, plus the P staging rows) is the accurate path, not the fast one: one
// configuration per head dim, every one ≤ 99 KB so that it runs on every sm_80+ GPU. None at 256 (see
// src/CMakeLists.txt): its accumulators spill.
#define ATTNLAB_FLASH_F32_CONFIG(HQK, HV, BM, BN, WARPS)                      \
  template <>                                                                 \
  struct TileConfigs<float, HQK, HV> {                                        \
    using List = TypeList<KernelTraits<float, HQK, HV, BM, BN, WARPS, 2, false>>; \
    using ModifierList = List;                                                \
  };
ATTNLAB_FLASH_F32_CONFIG(32, 32, 64, 64, 4)     // 56 KB
ATTNLAB_FLASH_F32_CONFIG(64, 64, 64, 64, 4)     // 96 KB
ATTNLAB_FLASH_F32_CONFIG(96, 96, 64, 32, 4)     // 80 KB
ATTNLAB_FLASH_F32_CONFIG(128, 128, 64, 16, 4)   // 68 KB
ATTNLAB_FLASH_F32_CONFIG(192, 192, 32, 16, 2)   // 74 KB
ATTNLAB_FLASH_F32_CONFIG(192, 128, 64, 16, 4)   // 92 KB
#undef ATTNLAB_FLASH_F32_CONFIG

}  // namespace attnlab::cuda::flash
