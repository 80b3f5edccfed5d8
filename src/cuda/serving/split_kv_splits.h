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

// The most splits one thread-block cluster merges (split_kv_cluster.cuh): 16, the largest cluster an sm_90 GPU
// launches (a non-portable size; 8 is the portable one).
constexpr int kSplitKvMaxClusterSplits = 16;

// Whether a call's `splits` (split_kv_splits' count) merge inside a thread-block cluster on sm_90 instead of in the
// combine kernel, when Tuning::split_kv_cluster_merge allows it and the device can hold such a cluster (the plan
// asks both; split_kv.cpp). Measured on the H200 (docs/perf-notes-serving.md, split-KV v8 and v8b): a cluster merge
// pays where each split is one key tile — 1.23–1.29× the combine at B = 1 with 1024 keys in 16 splits (v8), v8b
// 1.2–1.35× at 512 keys and never behind at 1024 — and loses where a split streams many tiles, because a call's
// clusters of 16 run two blocks to an SM on about half the SMs (0.74× at 32k keys). So: 2–16 splits that are each
// one key tile; a forced count (`forced` > 0, Tuning::split_kv_splits) of 2–16 merges in clusters at any length
// (for tests and A/B runs), one above 16 keeps the combine.
inline bool split_kv_cluster_merge(int splits, std::int64_t max_seqlen_k, std::int64_t forced) {
  if (splits < 2 || splits > kSplitKvMaxClusterSplits) return false;
  if (forced > 0) return forced <= kSplitKvMaxClusterSplits;
  const std::int64_t key_tiles = (max_seqlen_k + kSplitKvBlockKeys - 1) / kSplitKvBlockKeys;
  return splits >= key_tiles;
}

}  // namespace attnlab::cuda::serving
