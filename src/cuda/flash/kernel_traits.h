// The compile-time shape of one flash kernel: head dims, tile sizes, warps, pipeline depth, and what follows from
// them (fragments per warp, shared-memory layout and size). Which traits run on which GPU is tile_configs.h's job.
#pragma once

#include <cstdint>

namespace attnlab::cuda::flash {

template <class Element_, int kHeadQK_, int kHeadV_, int kBlockM_, int kBlockN_, int kWarps_, int kStages_,
          bool kQInRegisters_, int kBlocksPerSm_ = 1, bool kMbarriers_ = false>
struct KernelTraits {
  using Element = Element_;                  // __half, __nv_bfloat16 or float
  static constexpr int kHeadQK = kHeadQK_;   // head dim of Q and K
  static constexpr int kHeadV = kHeadV_;     // head dim of V and O
  static constexpr int kBlockM = kBlockM_;   // query rows per block
  static constexpr int kBlockN = kBlockN_;   // keys per main-loop step
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStages = kStages_;   // K/V tiles in flight (cp.async ring)
  // Q's fragments live in registers for the whole main loop when they fit next to the accumulators; otherwise
  // they are re-read from shared memory (ldmatrix) at every step, as FlashAttention-2 does for large head dims.
  static constexpr bool kQInRegisters = kQInRegisters_;
  // Thread blocks per SM the register allocation must allow (__launch_bounds__): 2 caps registers at
  // 65536 / (2 · kThreads) per thread so that two blocks' barriers and loads overlap.
  static constexpr int kBlocksPerSm = kBlocksPerSm_;
  // How warps wait for K/V tiles (pipeline.cuh): a block barrier per step, or per-slot mbarriers that let warps
  // drift apart by up to a tile (needs ≥ 3 stages to keep a tile of prefetch).
  static constexpr bool kMbarriers = kMbarriers_;

  // f16/bf16 run on m16n8k16, f32 on m16n8k8 (TF32, three times: ptx.cuh); either way one k step is two
  // 16-byte chunks of a shared-memory row.
  static constexpr int kElementBytes = int(sizeof(Element));
  static constexpr bool kF32 = kElementBytes == 4;
  static constexpr int kMmaK = 32 / kElementBytes;

  // Each warp owns kRowsPerWarp query rows (kMFrags m16 fragments) and all kBlockN keys of a step.
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMFrags = kRowsPerWarp / 16;
  static constexpr int kNFrags = kBlockN / 8;        // n8 fragments of the score tile S
  static constexpr int kOFrags = kHeadV / 8;         // n8 fragments of the output O
  static constexpr int kQKSteps = kHeadQK / kMmaK;   // k steps of Q·Kᵀ
  static constexpr int kPVSteps = kBlockN / kMmaK;   // k steps of P·V
  // Accumulator registers per thread: the O and S fragments. From 192 (3/4 of the 255-register budget; of the
  // lists only 4 warps × 32 rows at Hv 128 get there) the kernel gives up a few instructions per step for
  // registers: the copy loop rebuilds its addresses per tile (smem_tile.cuh) and O's rescale sits behind a branch
  // (softmax.cuh). Below it both cost time (docs/perf-notes-flash-sm80.md, v6b and v7), so other kernels keep the plain code.
  static constexpr int kAccumulatorRegisters = kMFrags * (kOFrags + kNFrags) * 4;
  static constexpr bool kSaveRegisters = kAccumulatorRegisters >= 192;

  static_assert(kRowsPerWarp % 16 == 0 && kMFrags >= 1, "warps own whole m16 fragments");
  static_assert(kBlockN % 16 == 0 && kHeadQK % 32 == 0 && kHeadV % 32 == 0, "whole k steps, n16 pairs");
  static_assert(kStages >= 2 + int(kMbarriers_), "at least double buffering (triple with mbarriers)");
  static_assert(!kF32 || !kQInRegisters, "f32 Q fragments are re-read (and split) per step");

  // Shared memory: Q, then kStages × (K tile, V tile), then (f32 only) each warp's P rows: TF32 P·V takes P as an
  // A operand through ldmatrix, whose layout the f32 accumulator does not match. The output tile is staged in
  // Q's place at the end.
  static constexpr int kQBytes = kBlockM * kHeadQK * kElementBytes;
  static constexpr int kKBytes = kBlockN * kHeadQK * kElementBytes;
  static constexpr int kVBytes = kBlockN * kHeadV * kElementBytes;
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr int kPBytes = kF32 ? kBlockM * kBlockN * 4 : 0;
  static constexpr int kBarrierBytes = kMbarriers ? 2 * kStages * 8 : 0;
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + kPBytes + kBarrierBytes;
  static_assert(kHeadV <= kHeadQK, "the output tile is staged in Q's shared memory");
};

}  // namespace attnlab::cuda::flash
