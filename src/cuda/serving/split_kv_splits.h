// How many splits the split-KV kernel cuts each block's keys into (split_kv.cpp's plan; also the diagnostic program
// tests/split_kv_phases.cu, so that it times the library's own choice). Host code, no CUDA.
#pragma once

#include <algorithm>
#include <cstdint>

namespace attnlab::cuda::serving {

constexpr int kSplitKvBlockKeys = 64;  // SplitKvTraits::kBlockN
constexpr int kSplitKvMaxSplits = 128;  // split_kv_combine.cuh's kMaxCombineSplits

// Blocks one SM holds at once (SplitKvTraits::kBlocksPerSm).
constexpr int split_kv_blocks_per_sm(std::int64_t head_dim) { return head_dim <= 128 ? 2 : 1; }

// `blocks` (query tiles · KV heads · sequences) against `slots` (SMs · blocks per SM): a batch that fills the GPU
// keeps one split; one that does not gets enough splits to fill it, no more than it has key tiles. `forced` > 0
// (Tuning::split_kv_splits) asks for that many instead. The count is then the number of equal runs of key tiles
// the request gives, so that no split is empty.
inline int split_kv_splits(std::int64_t blocks, std::int64_t slots, std::int64_t max_seqlen_k, std::int64_t forced) {
  const std::int64_t key_tiles = (max_seqlen_k + kSplitKvBlockKeys - 1) / kSplitKvBlockKeys;
  std::int64_t want = 1;
  if (forced > 0 && key_tiles > 1)
    want = std::min<std::int64_t>({forced, key_tiles, kSplitKvMaxSplits});
  else if (forced <= 0 && blocks > 0 && blocks < slots && key_tiles > 1)
    want = std::min<std::int64_t>({(slots + blocks - 1) / blocks, key_tiles, kSplitKvMaxSplits});
  if (want <= 1) return 1;
  const std::int64_t per_split = (key_tiles + want - 1) / want;
  return int((key_tiles + per_split - 1) / per_split);
}

}  // namespace attnlab::cuda::serving
