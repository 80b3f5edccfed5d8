// Forward features of docs/design.md §2, one test each and in combination, for every CPU path and dtype: causal
// masks of both alignments with T < S and T > S, sliding windows, per-batch sequence lengths (0-length batches
// included), softcap, additive bias (f32 and the inputs' dtype, broadcast, −inf entries), boolean masks with fully
// masked rows, GQA and MQA, strided non-contiguous inputs and outputs, explicit scale, thread counts.
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>

#include "harness.h"

namespace attnlab_test {
namespace {

using attnlab::MaskAlign;

class ForwardFeatures : public ::testing::TestWithParam<std::tuple<std::string, DType>> {
 protected:
  // A modest odd-shaped case; tests adjust what they exercise.
  Case base(std::int64_t T = 37, std::int64_t S = 53) const {
    Case c;
    c.path = std::get<0>(GetParam());
    c.dtype = std::get<1>(GetParam());
    c.B = 2, c.T = T, c.S = S, c.N = 2, c.K = 2, c.Hqk = 40, c.Hv = 72;
    return c;
  }
  // Both T < S and T > S, both alignments.
  void check_both_shapes_and_alignments(Case c, Rng& rng) {
    for (auto [T, S] : {std::pair<std::int64_t, std::int64_t>{37, 53}, {53, 37}})
      for (MaskAlign align : {MaskAlign::top_left, MaskAlign::bottom_right}) {
        c.T = T, c.S = S;
        c.mask.align = align;
        check_forward(c, rng);
      }
  }
};

TEST_P(ForwardFeatures, CausalTopLeft) {
  ATTNLAB_TEST_RNG(rng);
  for (auto [T, S] : {std::pair<std::int64_t, std::int64_t>{37, 53}, {53, 37}, {64, 64}}) {
    Case c = base(T, S);
    c.mask.causal = true;
    check_forward(c, rng);
  }
}

TEST_P(ForwardFeatures, CausalBottomRight) {
  ATTNLAB_TEST_RNG(rng);
  // With T > S the first T − S rows see no key: O = 0, LSE = −inf.
  for (auto [T, S] : {std::pair<std::int64_t, std::int64_t>{37, 53}, {53, 37}, {1, 77}}) {
    Case c = base(T, S);
    c.mask.causal = true;
    c.mask.align = MaskAlign::bottom_right;
    check_forward(c, rng);
  }
}

TEST_P(ForwardFeatures, WindowLeftOnly) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.mask.window_left = 5;
  check_both_shapes_and_alignments(c, rng);
}

TEST_P(ForwardFeatures, WindowRightOnly) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.mask.window_right = 3;
  check_both_shapes_and_alignments(c, rng);
}

TEST_P(ForwardFeatures, WindowBothSides) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.mask.window_left = 4;
  c.mask.window_right = 2;
  check_both_shapes_and_alignments(c, rng);
  c.mask.window_left = 0;  // the diagonal only: rows off the key range are empty
  c.mask.window_right = 0;
  check_both_shapes_and_alignments(c, rng);
}

TEST_P(ForwardFeatures, WindowHugeValues) {
  // A window wider than any sequence (up to INT64_MAX) is the same as no window on that side.
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  for (std::int64_t w : {std::int64_t(1) << 40, std::numeric_limits<std::int64_t>::max()})
    for (auto [left, right] : {std::pair{w, std::int64_t(-1)}, {std::int64_t(-1), w}, {w, w}}) {
      c.mask.window_left = left;
      c.mask.window_right = right;
      c.mask.causal = false;
      check_both_shapes_and_alignments(c, rng);
      c.mask.causal = true;
      check_both_shapes_and_alignments(c, rng);
    }
}

TEST_P(ForwardFeatures, WindowWithCausal) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.mask.causal = true;
  c.mask.window_left = 6;
  check_both_shapes_and_alignments(c, rng);
  c.mask.window_left = -1;
  c.mask.window_right = 4;  // causal wins: right bound 0
  check_both_shapes_and_alignments(c, rng);
}

TEST_P(ForwardFeatures, SeqlensQueryAndKey) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base(29, 41);
  c.B = 4;
  c.q_lens = {29, 5, 17, 1};
  c.kv_lens = {41, 9, 1, 40};
  check_forward(c, rng);
  c.kv_lens.clear();  // only query lengths
  check_forward(c, rng);
  c.q_lens.clear();  // only key lengths
  c.kv_lens = {3, 41, 40, 1};
  check_forward(c, rng);
}

// The padding that lengths mark out may hold anything, NaN included (docs/design.md §2): no output may see it.
TEST_P(ForwardFeatures, SeqlensNaNInPadding) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base(29, 41);
  c.B = 3;
  c.q_lens = {29, 5, 0};
  c.kv_lens = {7, 41, 13};
  c.nan_padding = true;
  check_forward(c, rng);
  c.mask.causal = true;
  c.mask.align = attnlab::MaskAlign::bottom_right;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, SeqlensZeroLengthBatches) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base(29, 41);
  c.B = 4;
  c.q_lens = {0, 29, 7, 0};
  c.kv_lens = {41, 0, 13, 0};  // batch 1: no keys at all; batches 0 and 3: no queries
  check_forward(c, rng);
  c.mask.causal = true;
  c.mask.align = MaskAlign::bottom_right;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, SeqlensWithCausalAndWindow) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base(31, 23);
  c.B = 3;
  c.q_lens = {31, 12, 4};
  c.kv_lens = {9, 23, 17};  // q_len > kv_len, q_len < kv_len
  c.mask.causal = true;
  check_both_shapes_and_alignments(c, rng);
  c.mask.window_left = 3;
  c.T = 31, c.S = 23;
  for (MaskAlign align : {MaskAlign::top_left, MaskAlign::bottom_right}) {
    c.mask.align = align;
    check_forward(c, rng);
  }
}

TEST_P(ForwardFeatures, Softcap) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.scale = 1.0f;  // scores of tens: the cap matters
  c.softcap = 5.0f;
  check_forward(c, rng);
  c.softcap = 30.0f;
  c.mask.causal = true;
  c.mask.align = MaskAlign::bottom_right;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, BiasF32) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.bias = BiasKind::f32;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, BiasInputDtype) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.bias = BiasKind::same_dtype;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, BiasBroadcast) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.B = 3, c.N = 4;
  for (BiasKind kind : {BiasKind::f32, BiasKind::same_dtype}) {
    c.bias = kind;
    for (auto [per_b, per_n] : {std::pair{false, false}, {true, false}, {false, true}}) {
      c.bias_per_batch = per_b;
      c.bias_per_head = per_n;
      check_forward(c, rng);
    }
  }
}

TEST_P(ForwardFeatures, BiasExpandedWithZeroStrides) {
  // A broadcast bias passed the way frameworks expand it: full (B, N, T, S) shape, stride 0 over B and/or N.
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.B = 3, c.N = 4;
  c.expand_broadcast = true;
  for (BiasKind kind : {BiasKind::f32, BiasKind::same_dtype, BiasKind::bool_mask}) {
    c.bias = kind;
    for (auto [per_b, per_n] : {std::pair{false, false}, {true, false}, {false, true}}) {
      c.bias_per_batch = per_b;
      c.bias_per_head = per_n;
      check_forward(c, rng);
    }
  }
}

TEST_P(ForwardFeatures, BiasNegativeInfinity) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.bias = BiasKind::f32;
  c.neg_inf_bias = 0.3;
  c.hidden_rows = 3;  // rows whose every key has a −inf bias: O = 0, LSE = −inf
  check_forward(c, rng);
  c.bias = BiasKind::same_dtype;
  c.mask.causal = true;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, BoolMask) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.bias = BiasKind::bool_mask;
  c.hidden_rows = 4;
  check_forward(c, rng);
  for (auto [per_b, per_n] : {std::pair{false, false}, {true, false}, {false, true}}) {
    c.bias_per_batch = per_b;
    c.bias_per_head = per_n;
    check_forward(c, rng);
  }
}

TEST_P(ForwardFeatures, BoolMaskWithCausalAndSeqlens) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base(19, 23);
  c.bias = BiasKind::bool_mask;
  c.hidden_rows = 2;
  c.mask.causal = true;
  c.q_lens = {19, 11};
  c.kv_lens = {2, 23};
  check_both_shapes_and_alignments(c, rng);
}

TEST_P(ForwardFeatures, GroupedQueryAttention) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.N = 8, c.K = 2;
  check_forward(c, rng);
  c.mask.causal = true;
  c.mask.align = MaskAlign::bottom_right;
  c.Hqk = c.Hv = 64;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, MultiQueryAttention) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.N = 8, c.K = 1;
  check_forward(c, rng);
  c.T = 1, c.S = 300;  // decode: one query, every head on one KV head
  c.mask.causal = true;
  c.mask.align = MaskAlign::bottom_right;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, StridedPaddedInputsAndOutputs) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.q_layout = c.k_layout = c.v_layout = c.o_layout = c.lse_layout = padded();
  check_forward(c, rng);
  c.N = 4, c.K = 2;
  c.bias = BiasKind::f32;  // strided bias too
  c.mask.causal = true;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, StridedPermutedInputsAndOutputs) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.N = 4, c.K = 2;
  c.q_layout = c.k_layout = c.v_layout = c.o_layout = permuted12();  // BNTH storage of BTNH tensors
  c.lse_layout = permuted01();
  check_forward(c, rng);
  c.q_layout = permuted12();  // mixed layouts in one call
  c.k_layout = padded();
  c.v_layout = dense();
  c.o_layout = padded();
  c.bias = BiasKind::bool_mask;
  c.hidden_rows = 1;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, MultiBlockMasks) {
  // Several 64-row / 64-key blocks with partial ones at the edges: blocks a mask hides entirely, partly or not at
  // all, for every mask that limits the visible key range.
  ATTNLAB_TEST_RNG(rng);
  Case c = base(203, 150);
  c.B = 2, c.N = 2, c.K = 1, c.Hqk = 24, c.Hv = 16;
  const std::pair<std::int64_t, std::int64_t> windows[] = {{-1, -1}, {70, -1}, {-1, 65}, {1, 0}, {130, 3}};
  for (auto [T, S] : {std::pair<std::int64_t, std::int64_t>{203, 150}, {150, 203}})
    for (MaskAlign align : {MaskAlign::top_left, MaskAlign::bottom_right})
      for (auto [left, right] : windows)
        for (bool causal : {false, true}) {
          c.T = T, c.S = S;
          c.mask.align = align;
          c.mask.causal = causal;
          c.mask.window_left = left;
          c.mask.window_right = right;
          check_forward(c, rng);
        }
  c.T = 203, c.S = 150;
  c.q_lens = {130, 203};
  c.kv_lens = {150, 63};
  c.mask = {};
  c.mask.causal = true;
  c.mask.align = MaskAlign::bottom_right;
  c.mask.window_left = 40;
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, ExplicitScale) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  for (float scale : {0.37f, 1.0f, -0.5f, 0.0f}) {  // any finite scale; 0 gives uniform attention
    c.scale = scale;
    check_forward(c, rng);
  }
}

TEST_P(ForwardFeatures, WithoutLse) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.with_lse = false;
  check_forward(c, rng);
  c.mask.causal = true;
  c.q_lens = {0, 30};
  check_forward(c, rng);
}

TEST_P(ForwardFeatures, HeadDimsSmallAndLarge) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base(13, 17);
  for (auto [hqk, hv] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 5}, {8, 1}, {256, 256}, {96, 160}}) {
    c.Hqk = hqk, c.Hv = hv;
    check_forward(c, rng);
  }
}

TEST_P(ForwardFeatures, ThreadCounts) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base(65, 97);
  c.N = 3, c.K = 1;
  c.mask.causal = true;
  for (int threads : {1, 2, 3, 7}) {
    c.threads = threads;
    check_forward(c, rng);
  }
}

TEST_P(ForwardFeatures, AllFeaturesTogether) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.B = 3, c.N = 8, c.K = 2, c.Hqk = 40, c.Hv = 24;
  c.scale = 0.21f;
  c.softcap = 3.0f;
  c.mask.causal = true;
  c.mask.window_left = 9;
  c.q_lens = {37, 20, 0};  // valid for both T×S = 37×53 and 53×37
  c.kv_lens = {37, 31, 5};
  c.bias = BiasKind::same_dtype;
  c.bias_per_head = false;
  c.neg_inf_bias = 0.05;
  c.q_layout = c.o_layout = permuted12();
  c.k_layout = c.v_layout = c.lse_layout = padded();
  check_both_shapes_and_alignments(c, rng);
}

TEST_P(ForwardFeatures, MqaWindowBoolMaskPermuted) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base(33, 21);
  c.N = 4, c.K = 1;
  c.mask.window_left = 2;
  c.mask.window_right = 5;
  c.bias = BiasKind::bool_mask;
  c.bias_per_batch = false;
  c.hidden_rows = 2;
  c.q_layout = c.k_layout = c.v_layout = c.o_layout = permuted12();
  check_both_shapes_and_alignments(c, rng);
}

TEST(FlashIsa, CapIsHonoured) {
  // With ATTNLAB_CPU_FLASH_ISA set, the narrower kernels really run (their name shows in the path summary).
  const char* cap = std::getenv("ATTNLAB_CPU_FLASH_ISA");
  if (cap == nullptr) GTEST_SKIP() << "ATTNLAB_CPU_FLASH_ISA is not set";
  for (const auto& p : attnlab::list_paths())
    if (p.name == "cpu-flash") {
      EXPECT_EQ(p.summary.find("avx512"), std::string::npos) << p.summary;
      if (std::string(cap) == "sse2") {
        EXPECT_NE(p.summary.find("sse2"), std::string::npos) << p.summary;
      }
    }
}

std::string path_dtype_name(const ::testing::TestParamInfo<std::tuple<std::string, DType>>& info) {
  std::string name = std::get<0>(info.param) + "_" + dtype_name(std::get<1>(info.param));
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPaths, ForwardFeatures,
                         ::testing::Combine(::testing::Values(std::string("cpu-naive"), std::string("cpu-flash")),
                                            ::testing::Values(DType::f32, DType::f16, DType::bf16)),
                         path_dtype_name);

}  // namespace
}  // namespace attnlab_test
