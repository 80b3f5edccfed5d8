// The shape of one split-KV kernel instance (split_kv_kernel.cuh): head dim, and how its four warps share a block.
//
// A block holds kRows query rows — (token, query head) pairs of one KV head, all query heads of a token next to
// each other (GQA packing) — and walks 64-key tiles. With few rows (decode: 1–4 tokens × 4–8 heads) the warps
// would idle on a 64-row tile, so they split it by keys instead: kRowWarps warps each take 16 rows, and the
// kKeyGroups = 4 / kRowWarps warps of one row slice take a quarter, half or all of each key tile, and merge their
// partial softmax states at the end.
#pragma once

#include "cuda/flash/smem_tile.cuh"

namespace attnlab::cuda::serving {

template <class ElementT, int kHeadDimT, int kRowWarpsT>
struct SplitKvTraits {
  using Element = ElementT;
  static constexpr int kHeadDim = kHeadDimT;  // Hqk = Hv
  static constexpr int kRowWarps = kRowWarpsT;
  static_assert(kRowWarps == 1 || kRowWarps == 2 || kRowWarps == 4, "1, 2 or 4 warps of rows");
  static constexpr int kWarps = 4, kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * kRowWarps;
  static constexpr int kKeyGroups = kWarps / kRowWarps;
  static constexpr int kBlockN = 64;                       // keys per tile
  static constexpr int kGroupKeys = kBlockN / kKeyGroups;  // keys of a tile one warp takes: 16, 32 or 64
  static constexpr int kNFrags = kGroupKeys / 8;           // n8 score fragments per warp
  static constexpr int kOFrags = kHeadDim / 8;             // n8 output fragments per warp
  static constexpr int kQKSteps = kHeadDim / 16;
  // Enough bytes in flight per SM to cover the memory latency at full bandwidth (about 26 KB at 4.3 TB/s and
  // 800 ns): two blocks of three 32 KB stages at Hqk 128, one block of two 64 KB stages at 256.
  static constexpr int kStages = kHeadDim <= 64 ? 4 : kHeadDim <= 128 ? 3 : 2;
  static constexpr int kBlocksPerSm = kHeadDim <= 128 ? 2 : 1;
  // Q's fragments held in registers through the block, or re-read from shared memory every step: at head dim 256
  // its 64 registers beside O's 128 spill.
  static constexpr bool kQInRegisters = kHeadDim <= 128;

  using QTile = flash::SmemTile<kRows, kHeadDim>;
  using KVTile = flash::SmemTile<kBlockN, kHeadDim>;
  static constexpr int kQBytes = QTile::kBytes;
  // Paged caches: the key rows of the next kStages key tiles, 64 (K, V) offsets each (split_kv_load.cuh, KeyRow).
  static constexpr int kPagesBytes = kStages * kBlockN * 16;
  static constexpr int kStageBytes = 2 * KVTile::kBytes;  // K then V
  // After the loop each warp leaves its rows' partial O (f32, rows padded by 8 floats against bank conflicts)
  // and their m and l where the stages were.
  static constexpr int kMergeStride = kHeadDim + 8;
  static constexpr int kMergeBytes = kWarps * 16 * (kMergeStride + 2) * 4;
  static constexpr int kStagesBytes = kStages * kStageBytes;
  static constexpr int kSmemBytes =
      kQBytes + kPagesBytes + (kStagesBytes > kMergeBytes ? kStagesBytes : kMergeBytes);
};

}  // namespace attnlab::cuda::serving
