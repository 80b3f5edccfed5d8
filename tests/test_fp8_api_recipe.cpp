// The FP8 helpers of include/attnlab/fp8.h on the CPU, part 2: DelayedScaling on Device::cpu against histories and
// scales computed by hand (amax 0, inf and NaN, most_recent, margin, a tiny amax, history length 1, e4m3 against
// HYBRID for the backward tensors), against the host reference (core/delayed_scaling.h) over many random steps,
// read()'s order, the scale pointers handed to attention calls, and the recipe's own validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attnlab/fp8.h"
#include "attnlab/version.h"
#include "core/delayed_scaling.h"
#include "test_support.h"

namespace attnlab_test {
namespace {

using attnlab::AmaxAlgorithm;
using attnlab::DelayedScaling;
using attnlab::DelayedScalingRecipe;
using attnlab::ErrorCode;
using attnlab::Fp8Pass;
using attnlab::Fp8RecipeFormat;
using attnlab::Fp8Tensor;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Bit-equal, or both NaN.
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

std::string show(const std::vector<float>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

::testing::AssertionResult state_is(const attnlab::Fp8TensorState& got, float scale,
                                    const std::vector<float>& history) {
  bool ok = same_float(got.scale, scale) && same_float(got.scale_inv, 1.0f / scale) &&
            got.amax_history.size() == history.size();
  for (std::size_t i = 0; ok && i < history.size(); ++i) ok = same_float(got.amax_history[i], history[i]);
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "scale " << got.scale << " (want " << scale << "), scale_inv "
                                       << got.scale_inv << ", history " << show(got.amax_history) << " (want "
                                       << show(history) << ")";
}

DelayedScalingRecipe recipe_of(std::size_t len, AmaxAlgorithm algo, int margin = 0,
                               Fp8RecipeFormat format = Fp8RecipeFormat::hybrid) {
  DelayedScalingRecipe r;
  r.amax_history_len = len;
  r.amax_compute_algo = algo;
  r.margin = margin;
  r.format = format;
  return r;
}

// One step of one tensor: the amax its quantization would have written, then update().
void step(attnlab::Context& ctx, DelayedScaling& recipe, Fp8Tensor t, float amax) {
  *recipe.tensor(t).amax = amax;
  recipe.update(ctx, t >= Fp8Tensor::d_o ? Fp8Pass::backward : Fp8Pass::forward);
}

TEST(Fp8RecipeCpu, StartsAtScaleOne) {
  attnlab::Context ctx;
  DelayedScaling recipe(ctx, {}, Device::cpu);
  EXPECT_EQ(recipe.device(), Device::cpu);
  EXPECT_EQ(recipe.recipe().amax_history_len, 1024u);
  EXPECT_EQ(recipe.recipe().format, Fp8RecipeFormat::hybrid);
  for (int t = 0; t < attnlab::kFp8TensorCount; ++t)
    EXPECT_TRUE(state_is(recipe.read(ctx, Fp8Tensor(t)), 1.0f, std::vector<float>(1024, 0.0f))) << t;
}

// L = 4, "max": the window of each step is the staging slot and the last three steps. By hand: read() lists the
// three older amaxes, oldest first, then the staging slot (0 after every update).
TEST(Fp8RecipeCpu, MaxHistoryByHand) {
  attnlab::Context ctx;
  DelayedScaling recipe(ctx, recipe_of(4, AmaxAlgorithm::max), Device::cpu);
  const Fp8Tensor q = Fp8Tensor::q;
  *recipe.tensor(q).amax = 2.0f;
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 1.0f, {0, 0, 0, 2})) << "the staging slot reads last";
  recipe.update(ctx, Fp8Pass::forward);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 224.0f, {0, 0, 2, 0})) << "448 / 2";
  step(ctx, recipe, q, 0.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 224.0f, {0, 2, 0, 0})) << "amax 0: the max of the history still is 2";
  step(ctx, recipe, q, kInf);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 224.0f, {2, 0, kInf, 0})) << "inf: the previous scale is kept";
  step(ctx, recipe, q, 8.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 224.0f, {0, kInf, 8, 0})) << "inf still in the window";
  step(ctx, recipe, q, 1.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 224.0f, {kInf, 8, 1, 0}));
  step(ctx, recipe, q, 0.5f);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 224.0f, {8, 1, 0.5f, 0})) << "inf was in this step's window";
  step(ctx, recipe, q, 0.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 56.0f, {1, 0.5f, 0, 0})) << "448 / 8: 8 was the oldest, then left";
  step(ctx, recipe, q, kNaN);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 56.0f, {0.5f, 0, kNaN, 0})) << "NaN: the previous scale is kept";
  step(ctx, recipe, q, 0.25f);
  step(ctx, recipe, q, 0.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 56.0f, {kNaN, 0.25f, 0, 0})) << "\"max\" propagates the NaN";
  step(ctx, recipe, q, 0.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 56.0f, {0.25f, 0, 0, 0})) << "NaN still in this step's window";
  step(ctx, recipe, q, 0.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, q), 1792.0f, {0, 0, 0, 0})) << "448 / 0.25";
  // The other tensors of the pass stepped too, with amax 0 every time: scale 1 and an empty history.
  EXPECT_TRUE(state_is(recipe.read(ctx, Fp8Tensor::o), 1.0f, {0, 0, 0, 0}));
}

TEST(Fp8RecipeCpu, MostRecentWithMargin) {
  attnlab::Context ctx;
  DelayedScaling recipe(ctx, recipe_of(3, AmaxAlgorithm::most_recent, 1), Device::cpu);
  const Fp8Tensor s = Fp8Tensor::s;
  step(ctx, recipe, s, 4.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, s), 56.0f, {0, 4, 0})) << "(448 / 4) / 2";
  step(ctx, recipe, s, 0.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, s), 56.0f, {4, 0, 0})) << "amax 0 keeps the scale; the 4 is ignored";
  step(ctx, recipe, s, 16.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, s), 14.0f, {0, 16, 0})) << "(448 / 16) / 2, not the window's max";
  step(ctx, recipe, s, 1.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, s), 224.0f, {16, 1, 0})) << "most_recent lets the scale grow at once";
}

TEST(Fp8RecipeCpu, BackwardFormats) {
  attnlab::Context ctx;
  DelayedScaling hybrid(ctx, recipe_of(2, AmaxAlgorithm::max), Device::cpu);
  DelayedScaling e4m3(ctx, recipe_of(2, AmaxAlgorithm::max, 0, Fp8RecipeFormat::e4m3), Device::cpu);
  for (Fp8Tensor t : {Fp8Tensor::q, Fp8Tensor::k, Fp8Tensor::v, Fp8Tensor::s, Fp8Tensor::o}) {
    EXPECT_EQ(hybrid.dtype(t), DType::e4m3);
    EXPECT_EQ(e4m3.dtype(t), DType::e4m3);
  }
  for (Fp8Tensor t : {Fp8Tensor::d_o, Fp8Tensor::d_p, Fp8Tensor::dq, Fp8Tensor::dk, Fp8Tensor::dv}) {
    EXPECT_EQ(hybrid.dtype(t), DType::e5m2);
    EXPECT_EQ(e4m3.dtype(t), DType::e4m3);
    step(ctx, hybrid, t, 2.0f);
    step(ctx, e4m3, t, 2.0f);
    // Each step of the pass rolled every backward tensor: the earlier tensors' 2 has moved on.
  }
  for (Fp8Tensor t : {Fp8Tensor::d_o, Fp8Tensor::d_p, Fp8Tensor::dq, Fp8Tensor::dk, Fp8Tensor::dv}) {
    EXPECT_TRUE(state_is(hybrid.read(ctx, t), 28672.0f, {t == Fp8Tensor::dv ? 2.0f : 0.0f, 0}))
        << "e5m2: 57344 / 2, tensor " << int(t);
    EXPECT_TRUE(state_is(e4m3.read(ctx, t), 224.0f, {t == Fp8Tensor::dv ? 2.0f : 0.0f, 0})) << int(t);
  }
  // The backward steps left the forward tensors alone, and a forward step leaves the backward ones.
  EXPECT_TRUE(state_is(hybrid.read(ctx, Fp8Tensor::q), 1.0f, {0, 0}));
  *hybrid.tensor(Fp8Tensor::dv).amax = 9.0f;
  step(ctx, hybrid, Fp8Tensor::q, 7.0f);
  EXPECT_TRUE(state_is(hybrid.read(ctx, Fp8Tensor::q), 64.0f, {7, 0}));
  EXPECT_TRUE(state_is(hybrid.read(ctx, Fp8Tensor::dv), 28672.0f, {2, 9}));
}

TEST(Fp8RecipeCpu, TinyAmaxAndLengthOne) {
  attnlab::Context ctx;
  DelayedScaling recipe(ctx, recipe_of(1, AmaxAlgorithm::max), Device::cpu);
  step(ctx, recipe, Fp8Tensor::k, 4.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, Fp8Tensor::k), 112.0f, {0})) << "L = 1: nothing stays in the history";
  step(ctx, recipe, Fp8Tensor::k, 0.0f);
  EXPECT_TRUE(state_is(recipe.read(ctx, Fp8Tensor::k), 112.0f, {0}));
  step(ctx, recipe, Fp8Tensor::k, 1e-38f);  // 448 / 1e-38 overflows float
  EXPECT_TRUE(state_is(recipe.read(ctx, Fp8Tensor::k), FLT_MAX, {0}));
  EXPECT_EQ(recipe.read(ctx, Fp8Tensor::k).scale_inv, 1.0f / FLT_MAX);
}

// Many random steps of every tensor, both algorithms and formats, against the host reference step by step.
TEST(Fp8RecipeCpu, MatchesHostReference) {
  attnlab::Context ctx;
  ATTNLAB_TEST_RNG(rng);
  for (AmaxAlgorithm algo : {AmaxAlgorithm::max, AmaxAlgorithm::most_recent}) {
    for (Fp8RecipeFormat format : {Fp8RecipeFormat::hybrid, Fp8RecipeFormat::e4m3}) {
      const DelayedScalingRecipe r = recipe_of(std::size_t(rng.integer(1, 9)), algo, int(rng.integer(0, 3)), format);
      DelayedScaling recipe(ctx, r, Device::cpu);
      attnlab::core::RecipeParams params;
      params.margin = r.margin;
      params.history_len = r.amax_history_len;
      params.algorithm = r.amax_compute_algo;
      params.format = r.format;
      std::vector<attnlab::core::DelayedScalingState> ref(
          attnlab::kFp8TensorCount, attnlab::core::initial_delayed_scaling_state(params));
      for (int n = 0; n < 40; ++n) {
        const Fp8Pass pass = n % 2 ? Fp8Pass::backward : Fp8Pass::forward;
        const int first = pass == Fp8Pass::forward ? 0 : 5;
        for (int t = first; t < first + 5; ++t) {
          const double u = rng.uniform(0, 1);
          const float amax = u < 0.1 ? 0.0f : u < 0.13 ? kInf : u < 0.15 ? kNaN : float(std::exp(rng.uniform(-20, 20)));
          *recipe.tensor(Fp8Tensor(t)).amax = amax;
          const auto role = t < 5 ? attnlab::core::Fp8Role::forward : attnlab::core::Fp8Role::backward;
          ref[std::size_t(t)] = attnlab::core::delayed_scaling_step(params, role, ref[std::size_t(t)], amax);
          // P's scale is capped at fp8_max / 2^margin (fp8.h): the kernels quantize running values ≤ 1.
          const float ceiling = 448.0f / std::ldexp(1.0f, r.margin);
          if (t == int(Fp8Tensor::s) && ref[std::size_t(t)].scale > ceiling) {
            ref[std::size_t(t)].scale = ceiling;
            ref[std::size_t(t)].scale_inv = 1.0f / ceiling;
          }
        }
        recipe.update(ctx, pass);
        for (int t = 0; t < attnlab::kFp8TensorCount; ++t) {
          const auto& want = ref[std::size_t(t)];
          // read() order: the reference's slots 1 .. L−1, then its staging slot 0.
          std::vector<float> ordered(want.amax_history.begin() + 1, want.amax_history.end());
          ordered.push_back(want.amax_history[0]);
          ASSERT_TRUE(state_is(recipe.read(ctx, Fp8Tensor(t)), want.scale, ordered)) << "step " << n << " tensor " << t;
        }
      }
    }
  }
}

// amax_s is the largest normalized probability (≤ 1); the scale of P stays at 448 / 2^margin however small it is,
// and follows TransformerEngine's rule below that (a NaN amax keeps the previous scale).
TEST(Fp8RecipeCpu, ScaleOfPIsCapped) {
  attnlab::Context ctx;
  for (int margin : {0, 2}) {
    DelayedScaling recipe(ctx, recipe_of(4, AmaxAlgorithm::most_recent, margin), Device::cpu);
    const float ceiling = 448.0f / float(1 << margin);
    for (float amax_s : {0.14f, 1.0f, 0.001f, kNaN, 2.0f}) {
      *recipe.tensor(Fp8Tensor::s).amax = amax_s;
      *recipe.tensor(Fp8Tensor::q).amax = amax_s;
      recipe.update(ctx, Fp8Pass::forward);
      const float want = amax_s == 2.0f ? 224.0f / float(1 << margin) : ceiling;
      EXPECT_EQ(recipe.read(ctx, Fp8Tensor::s).scale, std::isnan(amax_s) ? ceiling : want) << amax_s;
      if (amax_s == 0.14f) {  // other tensors keep TransformerEngine's rule
        EXPECT_EQ(recipe.read(ctx, Fp8Tensor::q).scale, 448.0f / 0.14f / float(1 << margin));
      }
    }
  }
}

TEST(Fp8RecipeCpu, ScalesForCalls) {
  attnlab::Context ctx;
  DelayedScaling recipe(ctx, recipe_of(8, AmaxAlgorithm::max), Device::cpu);
  auto tensor = [&](Fp8Tensor t) { return recipe.tensor(t); };
  // Distinct pointers for every slot of every tensor.
  std::vector<const float*> all;
  for (int t = 0; t < attnlab::kFp8TensorCount; ++t) {
    const auto s = tensor(Fp8Tensor(t));
    all.insert(all.end(), {s.scale, s.scale_inv, s.amax});
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());

  const attnlab::Fp8ForwardScales f = recipe.forward_scales();
  EXPECT_EQ(f.descale_q, tensor(Fp8Tensor::q).scale_inv);
  EXPECT_EQ(f.descale_k, tensor(Fp8Tensor::k).scale_inv);
  EXPECT_EQ(f.descale_v, tensor(Fp8Tensor::v).scale_inv);
  EXPECT_EQ(f.scale_s, tensor(Fp8Tensor::s).scale);
  EXPECT_EQ(f.descale_s, tensor(Fp8Tensor::s).scale_inv);
  EXPECT_EQ(f.amax_s, tensor(Fp8Tensor::s).amax);
  EXPECT_EQ(f.scale_o, tensor(Fp8Tensor::o).scale);
  EXPECT_EQ(f.amax_o, tensor(Fp8Tensor::o).amax);

  const attnlab::Fp8BackwardScales b = recipe.backward_scales();
  EXPECT_EQ(b.descale_q, tensor(Fp8Tensor::q).scale_inv);
  EXPECT_EQ(b.descale_k, tensor(Fp8Tensor::k).scale_inv);
  EXPECT_EQ(b.descale_v, tensor(Fp8Tensor::v).scale_inv);
  EXPECT_EQ(b.descale_o, tensor(Fp8Tensor::o).scale_inv);
  EXPECT_EQ(b.descale_do, tensor(Fp8Tensor::d_o).scale_inv);
  EXPECT_EQ(b.scale_s, tensor(Fp8Tensor::s).scale);
  EXPECT_EQ(b.descale_s, tensor(Fp8Tensor::s).scale_inv);
  EXPECT_EQ(b.scale_dp, tensor(Fp8Tensor::d_p).scale);
  EXPECT_EQ(b.descale_dp, tensor(Fp8Tensor::d_p).scale_inv);
  EXPECT_EQ(b.amax_dp, tensor(Fp8Tensor::d_p).amax);
  EXPECT_EQ(b.scale_dq, tensor(Fp8Tensor::dq).scale);
  EXPECT_EQ(b.scale_dk, tensor(Fp8Tensor::dk).scale);
  EXPECT_EQ(b.scale_dv, tensor(Fp8Tensor::dv).scale);
  EXPECT_EQ(b.amax_dq, tensor(Fp8Tensor::dq).amax);
  EXPECT_EQ(b.amax_dk, tensor(Fp8Tensor::dk).amax);
  EXPECT_EQ(b.amax_dv, tensor(Fp8Tensor::dv).amax);
}

// quantize() with a recipe's tensor writes its staging slot, which the next update() takes.
TEST(Fp8RecipeCpu, QuantizeFeedsTheRecipe) {
  attnlab::Context ctx;
  DelayedScaling recipe(ctx, recipe_of(3, AmaxAlgorithm::max), Device::cpu);
  HostTensor x(DType::bf16, {5, 9});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, double(i % 7) - 3.5);
  x.set(17, -14.0);
  HostTensor xq(recipe.dtype(Fp8Tensor::v), {5, 9});
  const attnlab::Fp8TensorScaling v = recipe.tensor(Fp8Tensor::v);
  attnlab::quantize(ctx, x.view(), xq.view(), v);  // the recipe tensor's scale and amax slot
  EXPECT_TRUE(state_is(recipe.read(ctx, Fp8Tensor::v), 1.0f, {0, 0, 14}));
  recipe.update(ctx, Fp8Pass::forward);
  EXPECT_TRUE(state_is(recipe.read(ctx, Fp8Tensor::v), 32.0f, {0, 14, 0}));
  HostTensor back(DType::f32, {5, 9});
  attnlab::quantize(ctx, x.view(), xq.view(), v.scale, v.amax);  // now with scale 32: -14 → -448
  attnlab::dequantize(ctx, xq.view(), back.view(), v.scale_inv);
  EXPECT_EQ(back.get(17), -14.0);
}

TEST(Fp8RecipeCpu, Validation) {
  attnlab::Context ctx;
  auto refused = [&](const DelayedScalingRecipe& r, Device d, ErrorCode code, const std::string& needle) {
    try {
      DelayedScaling recipe(ctx, r, d);
    } catch (const attnlab::Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted; wanted \"" << needle << "\"";
  };
  refused(recipe_of(0, AmaxAlgorithm::max), Device::cpu, ErrorCode::invalid_argument,
          "DelayedScaling: amax_history_len must be in 1..16777216, got 0");
  refused(recipe_of((std::size_t(1) << 24) + 1, AmaxAlgorithm::max), Device::cpu, ErrorCode::invalid_argument,
          "amax_history_len must be in 1..16777216");
  refused(recipe_of(4, AmaxAlgorithm::max, -1), Device::cpu, ErrorCode::invalid_argument,
          "DelayedScaling: margin must be in 0..32, got -1");
  refused(recipe_of(4, AmaxAlgorithm::max, 33), Device::cpu, ErrorCode::invalid_argument, "margin must be in 0..32");
  refused(recipe_of(4, AmaxAlgorithm(7)), Device::cpu, ErrorCode::invalid_argument, "amax_compute_algo 7");
  refused(recipe_of(4, AmaxAlgorithm::max, 0, Fp8RecipeFormat(5)), Device::cpu, ErrorCode::invalid_argument,
          "format 5");
  if (!ATTNLAB_WITH_CUDA)
    refused({}, Device::cuda, ErrorCode::unsupported, "DelayedScaling: Device::cuda needs CUDA");

  DelayedScaling recipe(ctx, recipe_of(4, AmaxAlgorithm::max), Device::cpu);
  EXPECT_THROW(recipe.update(ctx, Fp8Pass(3)), attnlab::Error);
  EXPECT_THROW(recipe.tensor(Fp8Tensor(10)), attnlab::Error);
  DelayedScaling moved = std::move(recipe);
  EXPECT_EQ(moved.recipe().amax_history_len, 4u);
  try {
    recipe.update(ctx, Fp8Pass::forward);  // NOLINT: the moved-from state is what is tested
    ADD_FAILURE() << "a moved-from recipe updated";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("moved from"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnlab_test
