// The C ABI's FP8 entry points (attnlab.h, ABI 3) on the CPU: attnlab_quantize / attnlab_dequantize equal to the
// C++ calls byte for byte, the DelayedScaling handle (create with defaults or a recipe, tensor pointers, the scales
// structs a call takes, update, read in time order) equal to the C++ recipe step by step, and every refusal: NULL
// handles, enum values out of range, unset struct sizes, a history buffer too small, CUDA where it cannot run.
#include "attnlab/attnlab.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "attnlab/fp8.h"
#include "attnlab/version.h"
#include "capi_util.h"
#include "test_support.h"

namespace attnlab_test {
namespace {

::testing::AssertionResult error_has(const std::string& fragment) {
  const std::string e = attnlab_last_error();
  if (e.find(fragment) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the last error\n  " << e << "\ndoes not contain\n  " << fragment;
}

TEST(CApiFp8, QuantizeMatchesCxx) {
  ATTNLAB_TEST_RNG(rng);
  CContext cc;
  attnlab::Context ctx;
  HostTensor x(DType::bf16, {3, 5, 11}, padded());
  x.fill_random(rng, 50.0);
  HostTensor c_q(DType::e5m2, {3, 5, 11}), cxx_q(DType::e5m2, {3, 5, 11});
  const float scale = 0.75f;
  float c_amax = -1.0f, cxx_amax = -2.0f;
  const attnlab_tensor in = to_c(x.view()), out = to_c(c_q.view());
  ASSERT_EQ(attnlab_quantize(cc.ctx, &in, &out, &scale, &c_amax), ATTNLAB_OK) << attnlab_last_error();
  attnlab::quantize(ctx, x.view(), cxx_q.view(), &scale, &cxx_amax);
  EXPECT_TRUE(c_q.same_bytes(cxx_q.snapshot()));
  EXPECT_EQ(c_amax, cxx_amax);
  ASSERT_EQ(attnlab_quantize(cc.ctx, &in, &out, &scale, nullptr), ATTNLAB_OK) << "amax NULL: not written";

  HostTensor c_back(DType::f16, {3, 5, 11}), cxx_back(DType::f16, {3, 5, 11});
  const float scale_inv = 1.0f / scale;
  const attnlab_tensor back = to_c(c_back.view());
  ASSERT_EQ(attnlab_dequantize(cc.ctx, &out, &back, &scale_inv), ATTNLAB_OK) << attnlab_last_error();
  attnlab::dequantize(ctx, cxx_q.view(), cxx_back.view(), &scale_inv);
  EXPECT_TRUE(c_back.same_bytes(cxx_back.snapshot()));
}

TEST(CApiFp8, QuantizeRefusals) {
  CContext cc;
  HostTensor x(DType::f32, {4}), q(DType::e4m3, {4});
  const float scale = 1.0f;
  const attnlab_tensor in = to_c(x.view()), out = to_c(q.view());
  EXPECT_EQ(attnlab_quantize(nullptr, &in, &out, &scale, nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_quantize: ctx is NULL"));
  EXPECT_EQ(attnlab_quantize(cc.ctx, nullptr, &out, &scale, nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_quantize: in is NULL"));
  EXPECT_EQ(attnlab_dequantize(cc.ctx, &out, nullptr, &scale), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_dequantize: out is NULL"));
  attnlab_tensor bad = in;
  bad.dtype = 9;
  EXPECT_EQ(attnlab_quantize(cc.ctx, &bad, &out, &scale, nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("in.dtype: 9 is not an attnlab_dtype"));
  // The C++ rules come through with their messages.
  EXPECT_EQ(attnlab_quantize(cc.ctx, &in, &in, &scale, nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("quantize: out.dtype must be e4m3 or e5m2, got f32"));
  EXPECT_EQ(attnlab_quantize(cc.ctx, &in, &out, nullptr, nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("quantize: scale is null"));
  EXPECT_EQ(attnlab_quantize(cc.ctx, &in, &out, &scale, nullptr), ATTNLAB_OK);
  EXPECT_STREQ(attnlab_last_error(), "") << "a call that succeeds clears the last error";
}

// A C recipe and a C++ recipe, on the CPU, stepped with the same amaxes.
TEST(CApiFp8, RecipeMatchesCxx) {
  CContext cc;
  attnlab::Context ctx;
  attnlab_delayed_scaling_recipe r;
  ASSERT_EQ(attnlab_delayed_scaling_recipe_init(&r), ATTNLAB_OK);
  r.amax_history_len = 3;
  r.margin = 1;
  r.format = ATTNLAB_FP8_FORMAT_E4M3;
  r.amax_compute_algo = ATTNLAB_AMAX_MOST_RECENT;
  attnlab_delayed_scaling* recipe = nullptr;
  ASSERT_EQ(attnlab_delayed_scaling_create(cc.ctx, &r, ATTNLAB_CPU, 0, &recipe), ATTNLAB_OK) << attnlab_last_error();
  attnlab::DelayedScalingRecipe cr;
  cr.amax_history_len = 3;
  cr.margin = 1;
  cr.format = attnlab::Fp8RecipeFormat::e4m3;
  cr.amax_compute_algo = attnlab::AmaxAlgorithm::most_recent;
  attnlab::DelayedScaling cxx(ctx, cr, Device::cpu);

  const float amaxes[] = {4.0f, 0.0f, 16.0f, 3.0f};
  for (float a : amaxes) {
    for (int t = 0; t < ATTNLAB_FP8_TENSOR_COUNT; ++t) {
      float* amax = nullptr;
      int32_t dtype = -1;
      ASSERT_EQ(attnlab_delayed_scaling_tensor(recipe, t, nullptr, nullptr, &amax, &dtype), ATTNLAB_OK);
      EXPECT_EQ(dtype, ATTNLAB_E4M3) << "format e4m3: every tensor";
      *amax = a * float(t + 1);
      *cxx.tensor(attnlab::Fp8Tensor(t)).amax = a * float(t + 1);
    }
    for (int32_t pass : {ATTNLAB_FP8_FORWARD, ATTNLAB_FP8_BACKWARD}) {
      ASSERT_EQ(attnlab_delayed_scaling_update(cc.ctx, recipe, pass), ATTNLAB_OK) << attnlab_last_error();
      cxx.update(ctx, attnlab::Fp8Pass(pass));
    }
    for (int t = 0; t < ATTNLAB_FP8_TENSOR_COUNT; ++t) {
      float scale = 0, scale_inv = 0;
      std::vector<float> history(5, -1.0f);  // larger than needed: only 3 entries are written
      ASSERT_EQ(attnlab_delayed_scaling_read(cc.ctx, recipe, t, &scale, &scale_inv, history.data(), history.size()),
                ATTNLAB_OK)
          << attnlab_last_error();
      const attnlab::Fp8TensorState want = cxx.read(ctx, attnlab::Fp8Tensor(t));
      EXPECT_EQ(scale, want.scale) << t;
      EXPECT_EQ(scale_inv, want.scale_inv) << t;
      EXPECT_EQ(std::vector<float>(history.begin(), history.begin() + 3), want.amax_history) << t;
      EXPECT_EQ(history[3], -1.0f) << "written past the history";
    }
  }
  attnlab_delayed_scaling_destroy(recipe);
}

TEST(CApiFp8, RecipeDefaultsAndScales) {
  CContext cc;
  attnlab_delayed_scaling* recipe = nullptr;
  ASSERT_EQ(attnlab_delayed_scaling_create(cc.ctx, nullptr, ATTNLAB_CPU, 0, &recipe), ATTNLAB_OK)
      << attnlab_last_error();
  std::vector<float> history(1024, -1.0f);
  float scale = 0;
  ASSERT_EQ(attnlab_delayed_scaling_read(cc.ctx, recipe, ATTNLAB_FP8_DP, &scale, nullptr, history.data(), 1024),
            ATTNLAB_OK);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(history, std::vector<float>(1024, 0.0f)) << "NULL recipe: history 1024";
  int32_t dtype = -1;
  ASSERT_EQ(attnlab_delayed_scaling_tensor(recipe, ATTNLAB_FP8_DP, nullptr, nullptr, nullptr, &dtype), ATTNLAB_OK);
  EXPECT_EQ(dtype, ATTNLAB_E5M2) << "NULL recipe: HYBRID";

  auto ptrs = [&](int32_t t) {
    float *s = nullptr, *si = nullptr, *a = nullptr;
    EXPECT_EQ(attnlab_delayed_scaling_tensor(recipe, t, &s, &si, &a, nullptr), ATTNLAB_OK);
    return std::vector<float*>{s, si, a};
  };
  attnlab_fp8_forward_scales f;
  ASSERT_EQ(attnlab_fp8_forward_scales_init(&f), ATTNLAB_OK);
  ASSERT_EQ(attnlab_delayed_scaling_forward_scales(recipe, &f), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_EQ(f.struct_size, sizeof f);
  EXPECT_EQ(f.descale_q, ptrs(ATTNLAB_FP8_Q)[1]);
  EXPECT_EQ(f.descale_k, ptrs(ATTNLAB_FP8_K)[1]);
  EXPECT_EQ(f.descale_v, ptrs(ATTNLAB_FP8_V)[1]);
  EXPECT_EQ(f.scale_s, ptrs(ATTNLAB_FP8_S)[0]);
  EXPECT_EQ(f.descale_s, ptrs(ATTNLAB_FP8_S)[1]);
  EXPECT_EQ(f.amax_s, ptrs(ATTNLAB_FP8_S)[2]);
  EXPECT_EQ(f.scale_o, ptrs(ATTNLAB_FP8_O)[0]);
  EXPECT_EQ(f.amax_o, ptrs(ATTNLAB_FP8_O)[2]);
  attnlab_fp8_backward_scales b;
  ASSERT_EQ(attnlab_fp8_backward_scales_init(&b), ATTNLAB_OK);
  ASSERT_EQ(attnlab_delayed_scaling_backward_scales(recipe, &b), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_EQ(b.descale_o, ptrs(ATTNLAB_FP8_O)[1]);
  EXPECT_EQ(b.descale_do, ptrs(ATTNLAB_FP8_DO)[1]);
  EXPECT_EQ(b.scale_dp, ptrs(ATTNLAB_FP8_DP)[0]);
  EXPECT_EQ(b.descale_dp, ptrs(ATTNLAB_FP8_DP)[1]);
  EXPECT_EQ(b.amax_dp, ptrs(ATTNLAB_FP8_DP)[2]);
  EXPECT_EQ(b.scale_dq, ptrs(ATTNLAB_FP8_DQ)[0]);
  EXPECT_EQ(b.scale_dk, ptrs(ATTNLAB_FP8_DK)[0]);
  EXPECT_EQ(b.scale_dv, ptrs(ATTNLAB_FP8_DV)[0]);
  EXPECT_EQ(b.amax_dq, ptrs(ATTNLAB_FP8_DQ)[2]);
  EXPECT_EQ(b.amax_dk, ptrs(ATTNLAB_FP8_DK)[2]);
  EXPECT_EQ(b.amax_dv, ptrs(ATTNLAB_FP8_DV)[2]);
  EXPECT_EQ(b.descale_q, f.descale_q);
  EXPECT_EQ(b.scale_s, f.scale_s);

  // The struct must be initialised: its struct_size says which layout the caller has.
  attnlab_fp8_forward_scales unset;
  std::memset(&unset, 0, sizeof unset);
  EXPECT_EQ(attnlab_delayed_scaling_forward_scales(recipe, &unset), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_delayed_scaling_forward_scales: attnlab_fp8_forward_scales.struct_size was not set"));
  EXPECT_EQ(unset.descale_q, nullptr) << "a refused call wrote the struct";
  EXPECT_EQ(attnlab_delayed_scaling_backward_scales(recipe, nullptr), ATTNLAB_INVALID_ARGUMENT);
  attnlab_delayed_scaling_destroy(recipe);
  attnlab_delayed_scaling_destroy(nullptr);  // a no-op
}

TEST(CApiFp8, RecipeRefusals) {
  CContext cc;
  attnlab_delayed_scaling* recipe = reinterpret_cast<attnlab_delayed_scaling*>(&cc);  // must be reset to NULL
  attnlab_delayed_scaling_recipe r;
  ASSERT_EQ(attnlab_delayed_scaling_recipe_init(&r), ATTNLAB_OK);
  auto refused = [&](const attnlab_delayed_scaling_recipe* rp, int32_t device, const std::string& fragment,
                     attnlab_status status = ATTNLAB_INVALID_ARGUMENT) {
    EXPECT_EQ(attnlab_delayed_scaling_create(cc.ctx, rp, device, 0, &recipe), status) << fragment;
    EXPECT_TRUE(error_has(fragment));
    EXPECT_EQ(recipe, nullptr);
  };
  r.format = 7;
  refused(&r, ATTNLAB_CPU, "attnlab_delayed_scaling_create: recipe->format: 7 is not an attnlab_fp8_recipe_format");
  r.format = ATTNLAB_FP8_FORMAT_HYBRID;
  r.amax_compute_algo = -1;
  refused(&r, ATTNLAB_CPU, "recipe->amax_compute_algo: -1 is not an attnlab_amax_algorithm");
  r.amax_compute_algo = ATTNLAB_AMAX_MAX;
  r.amax_history_len = -5;
  refused(&r, ATTNLAB_CPU, "recipe->amax_history_len must be ≥ 1, got -5");
  r.amax_history_len = 0;
  refused(&r, ATTNLAB_CPU, "recipe->amax_history_len must be ≥ 1, got 0");
  r.amax_history_len = 8;
  r.margin = 40;
  refused(&r, ATTNLAB_CPU, "DelayedScaling: margin must be in 0..32, got 40");
  r.margin = 0;
  refused(&r, 3, "attnlab_delayed_scaling_create: device: 3 is not an attnlab_device");
  attnlab_delayed_scaling_recipe unset;
  std::memset(&unset, 0, sizeof unset);
  refused(&unset, ATTNLAB_CPU,
          "attnlab_delayed_scaling_create: recipe: attnlab_delayed_scaling_recipe.struct_size was not set (it is 0)");
  if (!ATTNLAB_WITH_CUDA) refused(&r, ATTNLAB_CUDA, "built without", ATTNLAB_UNSUPPORTED);
  EXPECT_EQ(attnlab_delayed_scaling_create(nullptr, &r, ATTNLAB_CPU, 0, &recipe), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_delayed_scaling_create: ctx is NULL"));
  EXPECT_EQ(attnlab_delayed_scaling_create(cc.ctx, &r, ATTNLAB_CPU, 0, nullptr), ATTNLAB_INVALID_ARGUMENT);

  ASSERT_EQ(attnlab_delayed_scaling_create(cc.ctx, &r, ATTNLAB_CPU, 0, &recipe), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_EQ(attnlab_delayed_scaling_update(cc.ctx, recipe, 2), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_delayed_scaling_update: pass: 2 is not an attnlab_fp8_pass"));
  EXPECT_EQ(attnlab_delayed_scaling_update(cc.ctx, nullptr, ATTNLAB_FP8_FORWARD), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_delayed_scaling_tensor(recipe, 10, nullptr, nullptr, nullptr, nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_delayed_scaling_tensor: tensor: 10 is not an attnlab_fp8_tensor"));
  std::vector<float> history(7);
  EXPECT_EQ(attnlab_delayed_scaling_read(cc.ctx, recipe, ATTNLAB_FP8_Q, nullptr, nullptr, history.data(), 7),
            ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_delayed_scaling_read: history_capacity 7 is below the recipe's amax_history_len 8"));
  float scale = 0;
  EXPECT_EQ(attnlab_delayed_scaling_read(cc.ctx, recipe, ATTNLAB_FP8_Q, &scale, nullptr, nullptr, 0), ATTNLAB_OK)
      << "no history wanted";
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(attnlab_delayed_scaling_read(cc.ctx, recipe, -1, &scale, nullptr, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  attnlab_delayed_scaling_destroy(recipe);
}

// A forward call's fp8 pointer reaches the C++ call: FP8 inputs without it fail a precondition, with it the CPU
// paths refuse FP8 as unsupported.
TEST(CApiFp8, ForwardCarriesTheScales) {
  CContext cc;
  HostTensor q(DType::e4m3, {1, 4, 2, 16}), k(DType::e4m3, {1, 4, 2, 16}), v(DType::e4m3, {1, 4, 2, 16});
  HostTensor o(DType::e4m3, {1, 4, 2, 16});
  attnlab_forward_args a;
  ASSERT_EQ(attnlab_forward_args_init(&a), ATTNLAB_OK);
  EXPECT_EQ(a.fp8, nullptr);
  a.q = to_c(q.view()), a.k = to_c(k.view()), a.v = to_c(v.view()), a.o = to_c(o.view());
  EXPECT_EQ(attnlab_forward(cc.ctx, &a, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("scales"));
  attnlab_delayed_scaling* recipe = nullptr;
  ASSERT_EQ(attnlab_delayed_scaling_create(cc.ctx, nullptr, ATTNLAB_CPU, 0, &recipe), ATTNLAB_OK);
  attnlab_fp8_forward_scales f;
  ASSERT_EQ(attnlab_fp8_forward_scales_init(&f), ATTNLAB_OK);
  ASSERT_EQ(attnlab_delayed_scaling_forward_scales(recipe, &f), ATTNLAB_OK);
  a.fp8 = &f;
  EXPECT_EQ(attnlab_forward(cc.ctx, &a, nullptr, 0), ATTNLAB_UNSUPPORTED);
  EXPECT_TRUE(error_has("e4m3"));
  attnlab_delayed_scaling_destroy(recipe);
}

}  // namespace
}  // namespace attnlab_test
