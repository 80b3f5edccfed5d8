// The sm_90a flash kernel's shape: tile sizes, warpgroup roles, register split and shared-memory layout. One
// struct per (element type, head dim); everything the kernel's parts size themselves by is here.
#pragma once

#include <cstdint>

namespace attnlab::cuda::sm90 {

// kVersionIndex: the consumer loop, 0 = s0 (each GEMM waited for before the next step), 1 = s1 (the next Q·Kᵀ
// issued with this tile's P·V, and ping-pong between the consumer warpgroups), 2 = s2 (s1 with the softmax on raw
// scores: one FFMA and one MUFU.EX2 per probability; scale > 0 only); docs/perf-notes.md, flash-sm90.
template <class ElementT, int kHeadDim, int kVersionIndex>
struct Traits {
  using Element = ElementT;
  static constexpr int kVersion = kVersionIndex;
  static_assert(kHeadDim == 128, "the sm_90a kernel is instantiated at head dim 128 so far");
  static constexpr int kHead = kHeadDim;
  // A block owns 128 query rows: two consumer warpgroups of 64 rows each (wgmma's M), one K/V tile of 128 keys per
  // step (wgmma's N for Q·Kᵀ), and one producer warpgroup that only issues TMA.
  static constexpr int kBlockM = 128;
  static constexpr int kBlockN = 128;
  static constexpr int kConsumers = 2;
  static constexpr int kRowsPerConsumer = kBlockM / kConsumers;  // 64 = wgmma M
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kStages = 2;  // K and V slots each
  // setmaxnreg: the producer gives registers back so the consumers can hold S (64), O (64) and P (32) per thread.
  // 24·128 + 240·256 = 64 512 ≤ the SM's 65 536.
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;

  // Shared memory, every tile 1024-byte aligned (the 128-byte swizzle repeats every 8 rows of 128 bytes). A tile of
  // R rows × 128 head-dim columns is two column halves of R rows × 128 bytes (64 elements), one TMA box each.
  static constexpr int kRowBytes = 128;                 // 64 elements of 2 bytes: one swizzled row
  static constexpr int kHalves = kHead * 2 / kRowBytes;  // 2
  static constexpr int kQHalfBytes = kBlockM * kRowBytes;
  static constexpr int kKVHalfBytes = kBlockN * kRowBytes;
  static constexpr int kQBytes = kQHalfBytes * kHalves;    // 32 KB; O is staged here for its TMA store
  static constexpr int kKVBytes = kKVHalfBytes * kHalves;  // 32 KB per K or V slot
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr int kBarrierOffset = kVOffset + kStages * kKVBytes;
  // Barriers: Q full, then per stage K full, K empty, V full, V empty.
  static constexpr int kBarriers = 1 + 4 * kStages;
  static constexpr int kSmemBytes = kBarrierOffset + 8 * kBarriers;
  // The dynamic allocation asks 1 KB more, so the kernel can round its base up to 1024 bytes.
  static constexpr int kSmemAllocation = kSmemBytes + 1024;
};

}  // namespace attnlab::cuda::sm90
