// Which flash-sm90 kernel version a call runs by default and where each version is built
// (src/cuda/flash_sm90/versions.h): the measured winners per head dim, length and mask (docs/perf-notes-flash-sm90.md,
// versions table). Host code: runs without a GPU.
#include <gtest/gtest.h>

#include "cuda/flash_sm90/versions.h"

namespace {

using attnlab::cuda::sm90::default_version;
using attnlab::cuda::sm90::version_built;

attnlab::core::Problem problem(std::int64_t head_dim, std::int64_t T, std::int64_t S, bool causal = false,
                               int window_left = -1) {
  attnlab::core::Problem p;
  p.dims.B = 1, p.dims.T = T, p.dims.S = S, p.dims.N = 8, p.dims.K = 8;
  p.dims.Hqk = p.dims.Hv = head_dim;
  p.mask.causal = causal;
  p.mask.window_left = window_left;
  return p;
}

TEST(Sm90Versions, HeadDim64ByLengthAndMask) {
  EXPECT_EQ(default_version(problem(64, 128, 128), false), 5);    // the codelab's shape: s7 0.75× s5 there
  EXPECT_EQ(default_version(problem(64, 511, 511), false), 5);
  EXPECT_EQ(default_version(problem(64, 512, 512), false), 7);    // 256-key tiles: 1.07–1.09× s5 at 512–2k
  EXPECT_EQ(default_version(problem(64, 2047, 2047), false), 7);
  EXPECT_EQ(default_version(problem(64, 2048, 2048), false), 11);  // s11 1.02–1.04× s7 at 2k
  EXPECT_EQ(default_version(problem(64, 2047, 8192), false), 7);   // the shorter length decides
  EXPECT_EQ(default_version(problem(64, 4095, 4095), false), 11);
  EXPECT_EQ(default_version(problem(64, 4096, 4096), false), 6);    // s6 from 4k: s11 0.96–1.02× it there
  EXPECT_EQ(default_version(problem(64, 16383, 16383), false), 6);
  EXPECT_EQ(default_version(problem(64, 16384, 16384), false), 11);  // 1.02–1.04× s6
  EXPECT_EQ(default_version(problem(64, 2047, 2047, true), false), 5);  // causal below 2k: s5
  EXPECT_EQ(default_version(problem(64, 2048, 2048, true), false), 11);
  EXPECT_EQ(default_version(problem(64, 4096, 4096, true), false), 11);
  EXPECT_EQ(default_version(problem(64, 8191, 8191, true), false), 11);
  EXPECT_EQ(default_version(problem(64, 8192, 3000, true), false), 11);  // S < T: the shorter length decides
  EXPECT_EQ(default_version(problem(64, 8192, 8192, true), false), 6);    // causal 8k: s11 within 1–2 % of s6
  EXPECT_EQ(default_version(problem(64, 16383, 16383, true), false), 6);
  EXPECT_EQ(default_version(problem(64, 16384, 16384, true), false), 11);
  EXPECT_EQ(default_version(problem(64, 4096, 4096, false, 256), false), 5);  // windows: s7, s11 not measured
  EXPECT_EQ(default_version(problem(64, 8191, 8191, false, 256), false), 5);
  EXPECT_EQ(default_version(problem(64, 8192, 8192, false, 256), false), 6);
  EXPECT_EQ(default_version(problem(64, 16384, 16384, true, 256), false), 6);
  auto right_only = problem(64, 4096, 4096);
  right_only.mask.window_right = 0;  // a window on one side is a window
  EXPECT_EQ(default_version(right_only, false), 5);
}

TEST(Sm90Versions, OtherHeadDimsAndPackedBatches) {
  EXPECT_EQ(default_version(problem(128, 4096, 4096), false), 26);  // s26: s15 with lazy row maxima
  EXPECT_EQ(default_version(problem(128, 512, 512, true), false), 26);
  EXPECT_EQ(default_version(problem(128, 16384, 16384, true), false), 26);
  EXPECT_EQ(default_version(problem(128, 8192, 8192, false, 256), false), 5);  // windows: s15, s26 not measured
  auto h192_128 = problem(192, 4096, 4096);
  h192_128.dims.Hv = 128;
  EXPECT_EQ(default_version(h192_128, false), 5);  // s15 and s26 are built at 128/128 alone
  EXPECT_EQ(default_version(problem(96, 512, 512), false), 5);
  EXPECT_EQ(default_version(problem(256, 4096, 4096), false), 13);  // s5 is not built at 256; s13: s4's tiles
  EXPECT_EQ(default_version(problem(256, 512, 512), false), 13);
  EXPECT_EQ(default_version(problem(256, 1024, 1024, true), false), 13);
  EXPECT_EQ(default_version(problem(256, 1023, 8192, true), false), 2);  // causal and short: s4 0.97× s2
  EXPECT_EQ(default_version(problem(256, 8192, 8192, false, 256), false), 2);  // windows: s4 not measured
  EXPECT_EQ(default_version(problem(256, 4096, 4096), true), 2);
  EXPECT_EQ(default_version(problem(192, 4096, 4096), false), 2);  // s5 is not built at 192/192
  EXPECT_EQ(default_version(problem(64, 4096, 4096), true), 5);   // packed batches: s5 where measured
  EXPECT_EQ(default_version(problem(128, 4096, 4096), true), 5);
  EXPECT_EQ(default_version(problem(96, 4096, 4096), true), 2);
}

TEST(Sm90Versions, EveryDefaultIsBuilt) {
  for (const std::int64_t head_dim : {64, 96, 128, 192, 256})
    for (const std::int64_t length : {1, 128, 512, 2048, 4096, 8192, 16384})
      for (const bool causal : {false, true})
        for (const bool packed : {false, true}) {
          const auto p = problem(head_dim, length, length, causal);
          EXPECT_TRUE(version_built(int(head_dim), int(head_dim), default_version(p, packed)))
              << head_dim << " " << length << " " << causal << " " << packed;
        }
  EXPECT_FALSE(version_built(128, 128, 7));
  EXPECT_FALSE(version_built(256, 256, 5));
  EXPECT_FALSE(version_built(192, 192, 5));
  EXPECT_FALSE(version_built(256, 256, 3));
  EXPECT_TRUE(version_built(64, 64, 7));
  EXPECT_TRUE(version_built(64, 64, 11));  // s11: s6's three consumer warpgroups, at head dim 64 alone
  EXPECT_FALSE(version_built(128, 128, 11));
  EXPECT_TRUE(version_built(256, 256, 13));  // s13: s4's 80-key tiles, at head dim 256 alone
  EXPECT_FALSE(version_built(128, 128, 13));
  EXPECT_FALSE(version_built(64, 64, 13));
  EXPECT_TRUE(version_built(128, 128, 15));  // s15: s5 with FlashAttention-3's K/V order, at head dim 128 alone
  EXPECT_FALSE(version_built(64, 64, 15));
  EXPECT_FALSE(version_built(256, 256, 15));
  EXPECT_TRUE(version_built(128, 128, 26));  // s26: s15 with lazy row maxima, at head dim 128 alone
  EXPECT_FALSE(version_built(64, 64, 26));
  EXPECT_FALSE(version_built(256, 256, 26));
}

TEST(Sm90Versions, NumberedOnesExist) {
  using attnlab::cuda::sm90::version_exists;
  for (const int v : {1, 2, 3, 4, 5, 6, 7, 11, 13, 15, 26}) EXPECT_TRUE(version_exists(v)) << v;
  // s0 retired; s8 … s10, s12, s14, s16, s20, s21, s24, s25 and s27 … s31 not kept; 17 … 19, 22 and 23
  // probes; 27 is also the first past the list
  for (const int v : {-1, 0, 8, 9, 10, 12, 14, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 29, 30, 31})
    EXPECT_FALSE(version_exists(v)) << v;
}

}  // namespace
