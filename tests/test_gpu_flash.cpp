// The sm_80 family (path flash-sm80) beyond the shared GPU grid (test_gpu.cpp runs path flash — on an H100/H200
// flash-sm90 where it takes the call — through the odd-shape grid and every feature, f32 included): score modifiers at odd sizes, f32 against the naive chain at the codelab's shape, the
// ≤ 99 KB tile configurations forced on a large GPU, every configuration of each list by index, padded key tails
// holding NaN, many shapes through one context, and its refusals. Every test skips visibly without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "device_mirror.h"
#include "harness.h"

namespace attnlab_test {
namespace {

Case flash_case(DType dtype) {
  Case c;
  c.device = Device::cuda;
  c.path = "flash-sm80";
  c.dtype = dtype;
  return c;
}

// A context whose tuning steers the flash path (attention.h, Tuning), changed through one field:
//   flash_smem_limit lowers the shared memory it may use (the configurations meant for sm_86/sm_89 then run here);
//   flash_config runs one configuration of the list alone (never the small-problem list);
//   flash_section_heads sets the scheduling section under banded masks.
// Per context, not through the process environment: nothing else in the process sees it.
template <class Field, class Value>
void tune(attnlab::Context& ctx, Field attnlab::Tuning::*field, Value value) {
  attnlab::Tuning tuning = ctx.tuning();
  tuning.*field = value;
  ctx.set_tuning(tuning);
}

// Whether flash takes the case in `ctx` (its tuning counts: a forced configuration past the list's end is refused).
bool flash_accepts(attnlab::Context& ctx, const Case& c, Rng& rng) {
  const Tensors t = make_inputs(c, rng);
  DeviceMirror mirror;
  return !attnlab::why_not(ctx, "flash-sm80", device_forward_args(c, t, mirror)).has_value();
}

// Hand-made inputs (check_forward draws its own): one flash call on device copies of `t`, O and LSE against the
// reference computed from the same buffers.
void check_forward_on_device(const Case& c, Tensors& t) {
  const ExpectedForward expected = expected_forward(c, t);
  DeviceMirror mirror;
  attnlab::Context ctx;
  attnlab::forward(ctx, device_forward_args(c, t, mirror));
  mirror.synchronize();
  mirror.download(t.o);
  mirror.download(t.lse);
  check_forward_outputs(c, t, expected);
}

class GpuFlash : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { ATTNLAB_REQUIRE_GPU(); }
};

TEST_P(GpuFlash, SoftcapBiasBoolMaskOddSizes) {
  ATTNLAB_TEST_RNG(rng);
  Case c = flash_case(GetParam());
  c.B = 2, c.T = 45, c.S = 97, c.N = 4, c.K = 2;
  c.softcap = 5.0f;
  check_forward(c, rng);
  c.mask.causal = true;
  check_forward(c, rng);
  c.mask = {};
  c.softcap = 0.0f;
  c.bias = BiasKind::f32;  // f32 bias with half inputs, rows of odd length
  check_forward(c, rng);
  c.bias = BiasKind::same_dtype;
  c.bias_per_head = false;
  c.neg_inf_bias = 0.1;
  check_forward(c, rng);
  c.neg_inf_bias = 0.0;
  c.bias = BiasKind::bool_mask;
  c.hidden_rows = 3;  // rows the mask hides entirely: O = 0, LSE = −inf
  check_forward(c, rng);
  c.softcap = 3.0f;
  c.mask.window_left = 10, c.mask.window_right = 4;
  check_forward(c, rng);
}

// Each head-dim pair with the configuration chosen under 99 KB (sm_86/sm_89) and under 163 KB (sm_80), on
// shapes that cross several query and key tiles, with and without a causal mask.
TEST_P(GpuFlash, SmallSharedMemoryConfigurations) {
  ATTNLAB_TEST_RNG(rng);
  for (const std::int64_t limit : {101376, 166912}) {
    SCOPED_TRACE(::testing::Message() << "flash_smem_limit " << limit);
    attnlab::Context small;
    tune(small, &attnlab::Tuning::flash_smem_limit, limit);
    for (auto [hqk, hv] : {std::pair{32, 32}, {64, 64}, {96, 96}, {128, 128}, {192, 192}, {192, 128}, {256, 256}}) {
      if (GetParam() == DType::f32 && hqk == 256) continue;  // refused: GpuFlashErrors below
      Case c = flash_case(GetParam());
      c.B = 1, c.T = 203, c.S = 333, c.N = 2, c.K = 1, c.Hqk = hqk, c.Hv = hv;
      c.context = &small;
      check_forward(c, rng);
      c.mask.causal = true;
      c.mask.align = attnlab::MaskAlign::bottom_right;
      check_forward(c, rng);
    }
  }
}

// Every configuration of every head-dim pair's lists in turn (the path refuses a pick past a list's end), on a
// shape that crosses several query and key tiles with GQA: causal and not, then softcap and bias through the
// modifier list. Without the forced pick this small grid would take the small-problem list, which the odd-shape
// grid and the feature tests cover.
TEST_P(GpuFlash, EveryConfigurationOfTheList) {
  ATTNLAB_TEST_RNG(rng);
  for (auto [hqk, hv] : {std::pair{32, 32}, {64, 64}, {96, 96}, {128, 128}, {192, 192}, {192, 128}, {256, 256}}) {
    if (GetParam() == DType::f32 && hqk == 256) continue;  // refused: GpuFlashErrors below
    int configurations = 0;
    for (int pick = 0;; ++pick) {
      // No list is this long: a path that accepted every pick would not be seeing the context's forced one.
      ASSERT_LT(pick, 64) << "flash accepted every forced configuration: Tuning::flash_config is not applied";
      attnlab::Context forced;
      tune(forced, &attnlab::Tuning::flash_config, pick);
      Case c = flash_case(GetParam());
      c.B = 2, c.T = 203, c.S = 333, c.N = 4, c.K = 2, c.Hqk = hqk, c.Hv = hv;
      c.context = &forced;
      if (!flash_accepts(forced, c, rng)) break;
      SCOPED_TRACE(::testing::Message() << "head dims " << hqk << "/" << hv << ", configuration " << pick);
      check_forward(c, rng);
      c.mask.causal = true;
      c.mask.align = attnlab::MaskAlign::bottom_right;
      check_forward(c, rng);
      // The modifier list, indexed the same way, may be shorter.
      c.softcap = 5.0f;
      c.bias = BiasKind::f32;
      if (flash_accepts(forced, c, rng)) check_forward(c, rng);
      ++configurations;
    }
    EXPECT_GE(configurations, 1) << "head dims " << hqk << "/" << hv << ": no configuration ran";
  }
}

// Every head-dim pair with GQA, a sliding window and per-batch lengths together.
TEST_P(GpuFlash, EveryHeadDimWithAllMasks) {
  ATTNLAB_TEST_RNG(rng);
  for (auto [hqk, hv] : {std::pair{32, 32}, {64, 64}, {96, 96}, {128, 128}, {192, 192}, {192, 128}, {256, 256}}) {
    if (GetParam() == DType::f32 && hqk == 256) continue;  // refused: GpuFlashErrors below
    Case c = flash_case(GetParam());
    c.B = 2, c.T = 150, c.S = 270, c.N = 6, c.K = 2, c.Hqk = hqk, c.Hv = hv;
    c.q_lens = {150, 97};
    c.kv_lens = {201, 270};
    c.mask.causal = true;
    c.mask.align = attnlab::MaskAlign::bottom_right;
    c.mask.window_left = 70;
    check_forward(c, rng);
  }
}

// Shapes drawn at random through one context: query blocks, key tiles and masks in every combination.
TEST_P(GpuFlash, RandomShapesOneContext) {
  ATTNLAB_TEST_RNG(rng);
  attnlab::Context shared;
  for (int i = 0; i < 40; ++i) {
    Case c = flash_case(GetParam());
    c.B = rng.integer(1, 3), c.T = rng.integer(1, 400), c.S = rng.integer(1, 400);
    c.N = 4, c.K = rng.chance(0.5) ? 4 : 2;
    c.Hqk = c.Hv = rng.chance(0.5) ? 64 : 128;
    c.mask.causal = rng.chance(0.5);
    c.mask.align = rng.chance(0.5) ? attnlab::MaskAlign::top_left : attnlab::MaskAlign::bottom_right;
    if (rng.chance(0.3)) c.mask.window_left = rng.integer(0, 100);
    c.context = &shared;
    check_forward(c, rng);
  }
}

// Keys past a batch's kv_len may hold anything (a padded batch's tail): NaN there must not reach O, since a
// probability of 0 times NaN is still NaN. The kernel reads those rows as zeros.
TEST_P(GpuFlash, NaNInPaddedKeysDoesNotLeak) {
  ATTNLAB_TEST_RNG(rng);
  Case c = flash_case(GetParam());
  c.B = 2, c.T = 70, c.S = 200, c.N = 2, c.K = 1;
  c.q_lens = {70, 33};
  c.kv_lens = {130, 9};
  Tensors t = make_inputs(c, rng);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t j = c.kv_lens[b]; j < c.S; ++j)
      for (std::int64_t h = 0; h < c.K; ++h)
        for (std::int64_t d = 0; d < c.Hqk; ++d) {
          const std::int64_t at = ((b * c.S + j) * c.K + h) * c.Hqk + d;  // logical (B, S, K, H) index
          t.k.set(at, nan);
          t.v.set(at, nan);
        }
  check_forward_on_device(c, t);
}

// A row's running maximum can rise at any key tile, in some rows of a warp and not in others, and O must then be
// rescaled row by row (softmax.cuh). Keys S/2 and S − 1 are made to dominate the rows whose q is positive (every
// other row): those maxima jump twice, late, while their neighbours' stay put.
TEST_P(GpuFlash, RowMaximaThatRiseLate) {
  ATTNLAB_TEST_RNG(rng);
  for (std::int64_t head_dim : {64, 128}) {
    Case c = flash_case(GetParam());
    c.B = 1, c.T = 200, c.S = 1000, c.N = 2, c.K = 2, c.Hqk = head_dim, c.Hv = head_dim;
    Tensors t = make_inputs(c, rng);
    for (std::int64_t i = 0; i < c.T; i += 2)
      for (std::int64_t h = 0; h < c.N; ++h)
        for (std::int64_t d = 0; d < c.Hqk; ++d) {
          const std::int64_t at = (i * c.N + h) * c.Hqk + d;  // logical (B = 1, T, N, H) index
          t.q.set(at, std::abs(t.q.get(at)));
        }
    for (const auto& [key, value] : {std::pair<std::int64_t, double>{c.S / 2, 0.5}, {c.S - 1, 1.0}})
      for (std::int64_t h = 0; h < c.K; ++h)
        for (std::int64_t d = 0; d < c.Hqk; ++d) t.k.set((key * c.K + h) * c.Hqk + d, value);
    SCOPED_TRACE(c.str());
    check_forward_on_device(c, t);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuFlash, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); });

// ---------------------------------------------------------------------------------------------------------------
// Refusals: each names its rule, and a refused call writes nothing.
// ---------------------------------------------------------------------------------------------------------------

Case tiny(DType dtype) {
  Case c = flash_case(dtype);
  c.B = 1, c.T = 16, c.S = 16, c.N = 2, c.K = 2;
  return c;
}

TEST(GpuFlashErrors, RefusesUnsupportedHeadDims) {
  ATTNLAB_REQUIRE_GPU();
  Case c = tiny(DType::bf16);
  c.Hqk = c.Hv = 80;
  expect_forward_refused_on_device(c, "head dims 80/80");
  c.Hqk = 128, c.Hv = 64;
  expect_forward_refused_on_device(c, "head dims 128/64");
}

TEST(GpuFlashErrors, RefusesF32AtHeadDim256) {
  ATTNLAB_REQUIRE_GPU();
  Case c = tiny(DType::f32);
  c.Hqk = c.Hv = 256;
  expect_forward_refused_on_device(c, "f32 inputs at head dim 256");
}

// Under a causal or window mask, long sequences run their blocks longest first within sections of (batch, head)
// pairs (scheduler.cuh). Each section size that divides B·N = 6, forced through Tuning::flash_section_heads, must
// cover every block exactly once (poisoned outputs catch a block never run); causal, then a window.
TEST(GpuFlashScheduling, EverySectionSizeCoversEveryBlock) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  for (const int size : {1, 2, 3, 6}) {
    attnlab::Context section;
    tune(section, &attnlab::Tuning::flash_section_heads, size);
    SCOPED_TRACE(::testing::Message() << "section of " << size << " pairs");
    Case c = flash_case(DType::bf16);
    c.B = 2, c.T = 700, c.S = 900, c.N = 3, c.K = 3, c.Hqk = 64, c.Hv = 64;
    c.context = &section;
    c.mask.causal = true;
    c.mask.align = attnlab::MaskAlign::bottom_right;
    check_forward(c, rng);
    c.mask.causal = false;
    c.mask.window_left = 200, c.mask.window_right = 50;
    check_forward(c, rng);
  }
}

// The codelab's check: flash in f32 against the naive f32 chain on the GPU, allclose(atol = 1e-3), at its default
// shape (4, 128, 8, 64); the harness's stricter criterion against the fp64 reference runs in the grid.
TEST(GpuFlashF32, AllcloseToNaiveAtTheCodelabShape) {
  ATTNLAB_REQUIRE_GPU();
  Rng rng(fresh_seed());
  Case c = flash_case(DType::f32);
  c.B = 4, c.T = 128, c.S = 128, c.N = 8, c.K = 8, c.with_lse = false;
  Tensors t = make_inputs(c, rng);
  std::vector<double> outputs[2];
  int i = 0;
  for (const char* path : {"flash-sm80", "cuda-naive"}) {
    Case run = c;
    run.path = path;
    DeviceMirror mirror;
    attnlab::Context ctx;
    attnlab::forward(ctx, device_forward_args(run, t, mirror));
    mirror.synchronize();
    mirror.download(t.o);
    outputs[i++] = t.o.values();
  }
  double worst = 0;
  for (std::size_t k = 0; k < outputs[0].size(); ++k) worst = std::max(worst, std::abs(outputs[0][k] - outputs[1][k]));
  EXPECT_LE(worst, 1e-3) << "max |flash - cuda-naive| in f32";
  EXPECT_LE(worst, 1e-5) << "3xTF32 should be within fp32 rounding of the naive chain";
}

TEST(GpuFlashErrors, RefusesStridesNotMultipleOf8) {
  ATTNLAB_REQUIRE_GPU();
  Case c = tiny(DType::f16);
  c.k_layout = padded();
  expect_forward_refused_on_device(c, "multiple of 8");
}

// A grid of 2^31 blocks or more is refused before anything touches memory: the views point nowhere, and why_not
// reads only shapes and strides. T = 2^29 rows in 32-row blocks, times 128 heads, is 2^31 blocks.
TEST(GpuFlashErrors, RefusesGridsOf2To31Blocks) {
  ATTNLAB_REQUIRE_GPU();
  const std::int64_t T = std::int64_t(1) << 29, S = 64, N = 128, H = 64;
  auto view = [&](std::uintptr_t at, std::int64_t rows) {
    return attnlab::TensorView::contiguous(reinterpret_cast<void*>(at), DType::bf16, {1, rows, N, H}, Device::cuda);
  };
  attnlab::ForwardArgs args;
  args.q = view(std::uintptr_t(1) << 44, T);
  args.k = view(std::uintptr_t(2) << 44, S);
  args.v = view(std::uintptr_t(3) << 44, S);
  args.o = view(std::uintptr_t(4) << 44, T);
  const auto why = attnlab::why_not("flash-sm80", args);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("below 2^31"), std::string::npos) << *why;
}

TEST(GpuFlashErrors, RefusesBackward) {
  ATTNLAB_REQUIRE_GPU();
  Case c = tiny(DType::bf16);
  Rng rng(fresh_seed());
  Tensors t = make_inputs(c, rng);
  GradTensors g = make_grads(c, rng);
  DeviceMirror mirror;
  attnlab::BackwardArgs a = device_backward_args(c, t, g, mirror);
  attnlab::Context ctx;
  try {
    attnlab::backward(ctx, a);
    ADD_FAILURE() << "expected flash to refuse backward";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(e.code(), attnlab::ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("forward only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnlab_test
