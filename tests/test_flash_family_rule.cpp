// Which member of path `flash` takes a small call (src/cuda/flash_family_rule.h): flash-sm80's small-problem kernel
// at head dim 64 with at most 256 keys, no query heads are packed and flash-sm80's grid leaves SMs idle;
// flash-sm90 everywhere else it runs. Host code: runs without a GPU.
#include <gtest/gtest.h>

#include "cuda/flash_family_rule.h"

namespace {

using attnlab::core::Dims;
using attnlab::cuda::small_call_runs_sm80;
using attnlab::cuda::small_call_shape;

constexpr int kH200Sms = 132;

Dims dims(std::int64_t B, std::int64_t T, std::int64_t S, std::int64_t N, std::int64_t K, std::int64_t H = 64) {
  Dims d;
  d.B = B, d.T = T, d.S = S, d.N = N, d.K = K, d.Hqk = d.Hv = H;
  return d;
}

bool on_h200(const Dims& d) {
  return small_call_runs_sm80(d, [] { return kH200Sms; });
}

TEST(FlashFamilyRule, TheCodelabShapeRunsSm80) {
  EXPECT_TRUE(on_h200(dims(4, 128, 128, 8, 8)));  // (4, 128, 8, 64): 32 blocks on 132 SMs
  EXPECT_TRUE(on_h200(dims(1, 1, 1, 1, 1)));
  EXPECT_TRUE(on_h200(dims(4, 113, 97, 8, 8)));
  EXPECT_TRUE(on_h200(dims(2, 256, 128, 8, 8)));  // two 128-row blocks a head: 32
  EXPECT_TRUE(on_h200(dims(4, 256, 256, 8, 8)));  // measured: 6.9 µs against flash-sm90's 8.2
  EXPECT_TRUE(on_h200(dims(4, 128, 129, 8, 8)));  // a second key tile
}

TEST(FlashFamilyRule, LongerKeysAndOtherHeadDimsStayOnSm90) {
  EXPECT_FALSE(on_h200(dims(4, 128, 257, 8, 8)));
  EXPECT_FALSE(on_h200(dims(4, 512, 512, 8, 8)));  // measured: flash-sm90 12.2 µs against 13.6
  EXPECT_FALSE(on_h200(dims(4, 128, 1024, 8, 8)));
  EXPECT_FALSE(on_h200(dims(4, 128, 4096, 8, 8)));
  EXPECT_FALSE(on_h200(dims(4, 128, 128, 8, 8, 128)));
  EXPECT_FALSE(on_h200(dims(4, 128, 128, 8, 8, 96)));
  Dims split = dims(4, 128, 128, 8, 8);
  split.Hv = 128;
  EXPECT_FALSE(on_h200(split));
}

TEST(FlashFamilyRule, GridsThatFillTheGpuStayOnSm90) {
  EXPECT_TRUE(on_h200(dims(16, 128, 128, 8, 8)));    // 128 blocks: below 132
  EXPECT_FALSE(on_h200(dims(33, 128, 128, 4, 4)));   // 132 blocks: every SM has one
  EXPECT_FALSE(on_h200(dims(32, 128, 128, 32, 32)));  // 1024 blocks
  EXPECT_FALSE(on_h200(dims(1, 40000, 128, 8, 8)));   // 313 query blocks a head
}

TEST(FlashFamilyRule, PackedQueryHeadsStayOnSm90) {
  // GQA with T ≤ 64: flash-sm90 packs the 4 query heads of a KV head into one block.
  EXPECT_FALSE(on_h200(dims(4, 64, 128, 32, 8)));
  EXPECT_FALSE(on_h200(dims(1, 1, 128, 8, 1)));  // MQA decode-like
  EXPECT_TRUE(on_h200(dims(4, 65, 128, 8, 2)));  // T > 64: no packing
  EXPECT_TRUE(on_h200(dims(4, 64, 128, 8, 8)));  // MHA: nothing to pack
}

TEST(FlashFamilyRule, TheDeviceIsAskedOnlyForShapesTheRuleCovers) {
  int asked = 0;
  auto count = [&] {
    ++asked;
    return kH200Sms;
  };
  EXPECT_FALSE(small_call_runs_sm80(dims(4, 128, 4096, 8, 8), count));
  EXPECT_FALSE(small_call_runs_sm80(dims(4, 128, 128, 8, 8, 128), count));
  EXPECT_EQ(asked, 0);
  EXPECT_TRUE(small_call_runs_sm80(dims(4, 128, 128, 8, 8), count));
  EXPECT_EQ(asked, 1);
  // A GPU with fewer SMs than the grid's blocks keeps the call on flash-sm90.
  EXPECT_FALSE(small_call_runs_sm80(dims(4, 128, 128, 8, 8), [] { return 16; }));
}

TEST(FlashFamilyRule, EmptyAndDegenerateShapesAreNotSmallCalls) {
  EXPECT_FALSE(small_call_shape(dims(4, 0, 128, 8, 8)));
  EXPECT_FALSE(small_call_shape(dims(4, 128, 0, 8, 8)));
  EXPECT_FALSE(small_call_shape(dims(4, 128, 128, 8, 0)));  // K = 0: no packing rule applies, no heads to run
}

}  // namespace
