// How many splits the split-KV kernel cuts a call's keys into (src/cuda/serving/split_kv_splits.h): the batch that
// fills the GPU keeps one, decode at batch 1 gets enough to fill it, never more than its key tiles or the combine's
// 128, and a forced count is honoured as equal runs of key tiles; which counts merge in a thread-block cluster
// instead of the combine kernel. Host code: runs without a GPU.
#include <gtest/gtest.h>

#include "cuda/serving/split_kv_splits.h"

namespace {

using attnlab::cuda::serving::split_kv_blocks_per_sm;
using attnlab::cuda::serving::split_kv_cluster_merge;
using attnlab::cuda::serving::split_kv_splits;

constexpr std::int64_t kH200Slots = 132 * 2;  // SMs · blocks per SM at Hqk 128

TEST(SplitKvPlan, DecodeAtBatchOneFillsTheGpu) {
  EXPECT_EQ(split_kv_blocks_per_sm(128), 2);
  EXPECT_EQ(split_kv_blocks_per_sm(256), 1);
  // GQA 32/8, one token: 8 blocks against 264 slots ask for 33 splits of 512 key tiles: runs of 16, so 32.
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 32768, 0), 32);
  // 1000 keys are 16 tiles: no more splits than tiles.
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 1000, 0), 16);
  // 4100 keys (65 tiles) asked for 33: runs of 2, 33 splits, the last holding one tile.
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 4100, 0), 33);
}

TEST(SplitKvPlan, FullBatchesAndSingleTilesKeepOneSplit) {
  EXPECT_EQ(split_kv_splits(64 * 8, kH200Slots, 32768, 0), 1);  // batch 64 fills the GPU alone
  EXPECT_EQ(split_kv_splits(kH200Slots, kH200Slots, 32768, 0), 1);
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 64, 0), 1);  // one key tile
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 0, 0), 1);   // no keys
  EXPECT_EQ(split_kv_splits(0, kH200Slots, 32768, 0), 1);
}

TEST(SplitKvPlan, CappedAtTheCombinesSplits) {
  // One block against 264 slots would ask for 264: the combine takes 128.
  EXPECT_EQ(split_kv_splits(1, kH200Slots, 1 << 20, 0), 128);
}

TEST(SplitKvPlan, ForcedCountsAreEqualRuns) {
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 32768, 16), 16);
  EXPECT_EQ(split_kv_splits(64 * 8, kH200Slots, 32768, 4), 4);  // forced even where the batch fills the GPU
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 32768, 1000), 128);  // capped
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 64 * 10, 3), 3);     // 10 tiles in runs of 4, 4, 2
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 64 * 10, 4), 4);     // runs of 3, 3, 3, 1
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 64 * 10, 6), 5);     // runs of 2: five of them, none empty
  EXPECT_EQ(split_kv_splits(8, kH200Slots, 64, 8), 1);          // one tile cannot be split
  // As many tiles as the count, the last partly full, give exactly that count (test_gpu_serving.cpp's
  // CombineTakesEveryCount relies on it); 9000 keys (141 tiles) would round 32 down to 29.
  for (const int splits : {2, 31, 32, 33, 97, 128})
    EXPECT_EQ(split_kv_splits(4, kH200Slots, 64 * splits - 5, splits), splits);
  EXPECT_EQ(split_kv_splits(4, kH200Slots, 9000, 32), 29);
}

TEST(SplitKvPlan, ClustersMergeOneTileSplitsOrForcedCounts) {
  // B = 1, GQA 32/8 on the H200: 1000 keys are 16 one-tile splits, merged in clusters of 16.
  const int at_1k = split_kv_splits(8, kH200Slots, 1000, 0);
  EXPECT_EQ(at_1k, 16);
  EXPECT_TRUE(split_kv_cluster_merge(at_1k, 1000, 0));
  EXPECT_TRUE(split_kv_cluster_merge(split_kv_splits(8, kH200Slots, 512, 0), 512, 0));  // 8 tiles, 8 splits
  // 4100 keys: 33 splits of up to 2 tiles, and 32k: 32 of 16 tiles keep the combine.
  EXPECT_FALSE(split_kv_cluster_merge(split_kv_splits(8, kH200Slots, 4100, 0), 4100, 0));
  EXPECT_FALSE(split_kv_cluster_merge(split_kv_splits(8, kH200Slots, 32768, 0), 32768, 0));
  // B = 4 at 1k: 9 splits asked of 16 tiles are 8 runs of 2 tiles: the combine.
  const int b4 = split_kv_splits(32, kH200Slots, 1024, 0);
  EXPECT_EQ(b4, 8);
  EXPECT_FALSE(split_kv_cluster_merge(b4, 1024, 0));
  // One split needs no merge at all.
  EXPECT_FALSE(split_kv_cluster_merge(1, 64, 0));
  EXPECT_FALSE(split_kv_cluster_merge(split_kv_splits(64 * 8, kH200Slots, 1024, 0), 1024, 0));
}

TEST(SplitKvPlan, ForcedCountsChooseTheMergeBySize) {
  // Forced 2–16: clusters at any length (v8's plan at 32k, for A/B runs); above 16: the combine, even where the
  // keys hold fewer tiles than that and every split is one tile.
  EXPECT_TRUE(split_kv_cluster_merge(split_kv_splits(8, kH200Slots, 32768, 16), 32768, 16));
  EXPECT_TRUE(split_kv_cluster_merge(split_kv_splits(8, kH200Slots, 64 * 10, 5), 64 * 10, 5));
  EXPECT_TRUE(split_kv_cluster_merge(split_kv_splits(8, kH200Slots, 64 * 10, 2), 64 * 10, 2));
  EXPECT_FALSE(split_kv_cluster_merge(split_kv_splits(8, kH200Slots, 32768, 32), 32768, 32));  // v7's plan
  const int capped = split_kv_splits(8, kH200Slots, 64 * 10, 33);  // 10 tiles: 10 splits of one tile
  EXPECT_EQ(capped, 10);
  EXPECT_FALSE(split_kv_cluster_merge(capped, 64 * 10, 33));
  EXPECT_FALSE(split_kv_cluster_merge(split_kv_splits(8, kH200Slots, 64, 4), 64, 4));  // one tile: one split
}

}  // namespace
