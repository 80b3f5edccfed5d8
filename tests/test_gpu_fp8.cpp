// The cudnn path's FP8 forward (docs/design.md §7) against the CPU FP8 reference and the fp64 reference, on odd
// shapes (T = 2 with S = 1 and 203, 113×203, 1023×1024; T = 1 is a named rule on Hopper), GQA/MQA and causal masks, with poisoned outputs and fresh random codes, on the
// default and on a non-blocking stream; and the FP8 rules as errors a caller sees before any launch. Skips visibly
// without a GPU with FP8 attention (compute capability ≥ 9.0).
//
// The criterion. O is held to the bound fp8_bound.h derives (the one the CPU FP8 reference itself meets against
// fp64, plus O's own e4m3 rounding), and, as the repository's criterion for every path, to twice the CPU FP8
// reference's own largest error against fp64 (plus O's rounding): the GPU may round differently, not worse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "core/fp8.h"
#include "device_mirror.h"
#include "fp8_bound.h"
#include "gpu_fp8_support.h"
#include "reference.h"
#include "reference_fp8.h"
#include "test_support.h"

namespace attnlab_test {
namespace {

using attnlab::core::Fp8Format;
using attnlab::core::fp8_to_float;

struct Fp8Shape {
  const char* name;
  std::int64_t B, T, S, N, K, Hqk, Hv;
  bool causal, bottom_right;
  bool lse = true;  // false: no LSE requested (cuDNN's inference graph)
};

std::string shape_name(const ::testing::TestParamInfo<std::tuple<Fp8Shape, bool>>& info) {
  return std::string(std::get<0>(info.param).name) + (std::get<1>(info.param) ? "_nonblocking" : "_default");
}

class GpuFp8Forward : public ::testing::TestWithParam<std::tuple<Fp8Shape, bool>> {};

TEST_P(GpuFp8Forward, MatchesReference) {
  ATTNLAB_REQUIRE_FP8_GPU();
  const auto& [sh, non_blocking] = GetParam();
  if (non_blocking && sh.B * sh.N * sh.T > 20'000) GTEST_SKIP() << "the largest shapes run on the default stream only";
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = random_fp8_problem(rng, sh.B, sh.T, sh.S, sh.N, sh.K, sh.Hqk, sh.Hv, sh.causal,
                                         sh.bottom_right, /*scale_s=*/float(rng.uniform(200.0, 448.0)));
  // The CPU reference first without an FP8 O, for the scale a recipe would give O; then with it.
  const fp8ref::Forward plain = fp8ref::forward(p);
  p.scale_o = plain.amax_o > 0 ? 448.0f / plain.amax_o : 1.0f;
  const fp8ref::Forward want = fp8ref::forward(p);
  const ref::Forward f64 = ref::forward(fp8ref::decoded(p));

  Fp8Call call(p, non_blocking);
  if (!sh.lse) call.drop_lse();
  const attnlab::RunInfo info = call.run("cudnn");
  EXPECT_EQ(info.path, "cudnn");
  const Fp8Result got = call.result();

  const double scale_o = double(*p.scale_o);
  const std::vector<double> bound = fp8ref::o_bound(p);
  double err_gpu = 0, err_ref = 0, worst_ratio = 0, rounding = 0;
  for (std::size_t e = 0; e < f64.o.size(); ++e) {
    const double o = double(fp8_to_float(got.o[e], Fp8Format::e4m3)) / scale_o;
    ASSERT_FALSE(std::isnan(o)) << "o[" << e << "] is NaN (poison left or NaN computed)";
    const double ref_o = double(fp8_to_float(want.o_fp8[e], Fp8Format::e4m3)) / scale_o;
    const double own = fp8ref::o_rounding_bound(f64.o[e], scale_o);
    const double err = std::fabs(o - f64.o[e]);
    ASSERT_LE(err, bound[e] + own) << "o[" << e << "] = " << o << ", fp64 " << f64.o[e] << ", CPU FP8 " << ref_o;
    err_gpu = std::max(err_gpu, err);
    err_ref = std::max(err_ref, std::fabs(ref_o - f64.o[e]));
    rounding = std::max(rounding, own);
    if (bound[e] + own > 0) worst_ratio = std::max(worst_ratio, err / (bound[e] + own));
  }
  EXPECT_LE(err_gpu, 2 * err_ref + rounding) << "GPU error " << err_gpu << " vs CPU FP8 reference " << err_ref;
  if (std::getenv("ATTNLAB_TEST_REPORT"))
    std::printf("  %s: max |o − fp64| GPU %.3g, CPU FP8 %.3g; worst / bound %.3f; amax_s %.6g (CPU %.6g), amax_o "
                "%.6g (CPU %.6g)\n",
                sh.name, err_gpu, err_ref, worst_ratio, got.amax_s, want.amax_s, got.amax_o, want.amax_o);

  // LSE of the unquantized scores. cuDNN's FP8 kernels carry the scaled scores at about 2^-11 relative precision
  // (measured on an H200 with cuDNN 9.14: up to 2.0e-4 · |lse| where the bf16 kernels reach f32's), so the
  // tolerance is 2^-10 of max(1, |lse|).
  for (std::size_t e = 0; sh.lse && e < f64.lse.size(); ++e)
    ASSERT_NEAR(got.lse[e], f64.lse[e], 0x1p-10 * std::max(1.0, std::fabs(f64.lse[e]))) << "lse[" << e << "]";
  // amax_s: the largest probability, at most 1; amax_o: max |o| before O's rounding, within O's bound.
  EXPECT_LE(got.amax_s, 1.0f + 0x1p-20f);
  EXPECT_GE(got.amax_s, want.amax_s * (1 - 0x1p-4)) << "amax_s below the largest probability";
  // cuDNN's amax_o came out up to 9% above the largest |o| of its own O on an H200 (cuDNN 9.14; never below it by
  // more than the bound): a recipe then leaves a little more headroom, nothing overflows. Held to [max − bound,
  // (max + bound) · 1.125].
  double bound_at_max = 0;
  for (std::size_t e = 0; e < bound.size(); ++e) bound_at_max = std::max(bound_at_max, bound[e]);
  EXPECT_GE(got.amax_o, want.amax_o - bound_at_max) << "amax_o";
  EXPECT_LE(got.amax_o, (want.amax_o + bound_at_max) * 1.125) << "amax_o";
}

const Fp8Shape kShapes[] = {
    {"T2_S1_gqa", 2, 2, 1, 4, 2, 64, 64, false, false},
    {"T2_S203", 2, 2, 203, 2, 1, 128, 128, false, false},
    {"T113_S203", 1, 113, 203, 2, 1, 128, 128, false, false},
    {"T113_S203_causal", 1, 113, 203, 2, 2, 64, 64, true, false},
    {"T1023_S1024", 1, 1023, 1024, 1, 1, 128, 128, false, false},
    {"T1023_S1024_causal", 1, 1023, 1024, 1, 1, 128, 128, true, false},
    {"T256_bottom_right_equal", 1, 256, 256, 2, 1, 128, 128, true, true},
    {"T64_S200_mqa", 2, 64, 200, 4, 1, 64, 64, false, false},
    {"T100_S100_h256", 1, 100, 100, 2, 2, 256, 256, false, false},
    {"T113_S203_no_lse", 1, 113, 203, 2, 1, 128, 128, false, false, false},
    {"T1023_S1024_causal_no_lse", 1, 1023, 1024, 1, 1, 64, 64, true, false, false},
    {"codelab_T2048_H64_causal_no_lse", 2, 2048, 2048, 4, 4, 64, 64, true, false, false},
    {"B2_N16_T1024_H128_two_waves", 2, 1024, 1024, 16, 16, 128, 128, false, false},
    // Hqk 64 beyond one wave: run in batch chunks (the codelab's FP8 cell in 4, and B = 3 in 3).
    {"codelab_B4_N8_T2048_H64_causal_chunked", 4, 2048, 2048, 8, 8, 64, 64, true, false},
    {"B3_N16_T1024_H64_chunked", 3, 1024, 1024, 16, 16, 64, 64, false, false},
};
INSTANTIATE_TEST_SUITE_P(Shapes, GpuFp8Forward,
                         ::testing::Combine(::testing::ValuesIn(kShapes), ::testing::Bool()), shape_name);

// ---------------------------------------------------------------------------------------------------------------
// The rules, as errors before any launch: nothing is written to O.
// ---------------------------------------------------------------------------------------------------------------
fp8ref::Problem small_problem(Rng& rng, bool causal = false, bool bottom_right = false, std::int64_t T = 64,
                              std::int64_t S = 64, std::int64_t H = 64) {
  return random_fp8_problem(rng, 1, T, S, 2, 1, H, H, causal, bottom_right, 448.0f);
}

void expect_refusal(Fp8Call& call, const std::string& path, attnlab::ErrorCode code, const std::string& words) {
  try {
    call.run(path);
    ADD_FAILURE() << path << " ran; expected a refusal containing \"" << words << "\"";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(int(e.code()), int(code)) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
  EXPECT_TRUE(call.o_untouched()) << "a refused call wrote O";
}

TEST(GpuFp8Rules, OtherPathsRefuseFp8) {
  ATTNLAB_REQUIRE_FP8_GPU();
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = small_problem(rng);
  p.scale_o = 1.0f;
  Fp8Call call(p, false);
  expect_refusal(call, "flash", attnlab::ErrorCode::unsupported, "FP8 runs on path=cudnn");
  expect_refusal(call, "cuda-naive", attnlab::ErrorCode::unsupported, "FP8 runs on path=cudnn");
  EXPECT_EQ(call.run("auto").path, "cudnn");
}

TEST(GpuFp8Rules, BottomRightWithTNotSOnHopper) {
  ATTNLAB_REQUIRE_FP8_GPU();
  if (gpu_compute_capability() >= 100) GTEST_SKIP() << "cuDNN has bottom-right FP8 masks on this GPU";
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = small_problem(rng, true, true, 64, 128);
  p.scale_o = 1.0f;
  Fp8Call call(p, false);
  expect_refusal(call, "cudnn", attnlab::ErrorCode::unsupported, "bottom-right causal masks with FP8");
}

TEST(GpuFp8Rules, HalfOutputOnHopperNamesTheRule) {
  ATTNLAB_REQUIRE_FP8_GPU();
  if (gpu_compute_capability() >= 100) GTEST_SKIP() << "cuDNN writes bf16 O from FP8 on this GPU";
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = small_problem(rng);
  Fp8Call call(p, false, attnlab::DType::bf16);
  expect_refusal(call, "cudnn", attnlab::ErrorCode::unsupported, "needs compute capability ≥ 10.0");
}

TEST(GpuFp8Rules, HeadDimsAndLengths) {
  ATTNLAB_REQUIRE_FP8_GPU();
  ATTNLAB_TEST_RNG(rng);
  {
    fp8ref::Problem p = small_problem(rng, false, false, 64, 64, 40);  // not a multiple of 16
    p.scale_o = 1.0f;
    Fp8Call call(p, false);
    expect_refusal(call, "cudnn", attnlab::ErrorCode::unsupported, "FP8 head dims must be multiples of 16");
  }
  {
    fp8ref::Problem p = small_problem(rng);
    p.scale_o = 1.0f;
    Fp8Call call(p, false);
    call.use_host_seqlens({50}, {64});
    expect_refusal(call, "cudnn", attnlab::ErrorCode::unsupported, "per-batch sequence lengths");
  }
}

// cuDNN 9.14 sends T = 1 to its sm80 decode kernels on Hopper, which have no FP8.
TEST(GpuFp8Rules, SingleQueryRowOnHopper) {
  ATTNLAB_REQUIRE_FP8_GPU();
  if (gpu_compute_capability() >= 100) GTEST_SKIP() << "not a Hopper GPU";
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = small_problem(rng, false, false, 1, 203);
  p.scale_o = 1.0f;
  Fp8Call call(p, false);
  expect_refusal(call, "cudnn", attnlab::ErrorCode::unsupported, "T = 1");
}

// Hqk 64 with one batch beyond one wave of query tiles: the path splits calls by batch only, so it refuses. (The
// codelab's FP8 cell (4, 2048, 8, 64) gave a wrong O as one graph: o[0] = 0.137 where fp64 and the CPU FP8
// reference give −0.754; it now runs in batch chunks, in the grid above.)
TEST(GpuFp8Rules, SmallHeadDimsBeyondOneWave) {
  ATTNLAB_REQUIRE_FP8_GPU();
  if (gpu_compute_capability() >= 100) GTEST_SKIP() << "not a Hopper GPU";
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = random_fp8_problem(rng, 1, 4096, 4096, 8, 8, 64, 64, true, false, 448.0f);  // 8 · 32 tiles
  p.scale_o = 1.0f;
  Fp8Call call(p, false);
  expect_refusal(call, "cudnn", attnlab::ErrorCode::unsupported, "needs N·⌈T/128⌉ ≤");
}

// Amaxes left null: the graph writes them to the call's scratch; O is the same as with the caller's amaxes.
TEST(GpuFp8Forward, NullAmaxesGoToScratch) {
  ATTNLAB_REQUIRE_FP8_GPU();
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = random_fp8_problem(rng, 1, 128, 203, 2, 1, 128, 128, true, false, 448.0f);
  p.scale_o = 4.0f;
  Fp8Call call(p, false);
  call.run("cudnn");
  const Fp8Result with = call.result();
  call.poison_outputs();
  call.drop_amaxes();
  call.run("cudnn");
  const Fp8Result without = call.result();
  EXPECT_EQ(with.o, without.o);
  EXPECT_TRUE(std::isnan(without.amax_s) && std::isnan(without.amax_o)) << "the caller's amaxes were written";
  EXPECT_FALSE(std::isnan(with.amax_s) || std::isnan(with.amax_o));
}

TEST(GpuFp8Rules, MissingScalesAreInvalid) {
  ATTNLAB_REQUIRE_FP8_GPU();
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = small_problem(rng);
  p.scale_o = 1.0f;
  Fp8Call call(p, false);
  call.drop_scale_o();
  expect_refusal(call, "cudnn", attnlab::ErrorCode::invalid_argument, "fp8.scale_o is required");
}

// A second call on the same shape reuses the cached graph and gives the same bytes (same inputs, same result).
TEST(GpuFp8Cache, SecondCallSameResult) {
  ATTNLAB_REQUIRE_FP8_GPU();
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = random_fp8_problem(rng, 1, 200, 300, 2, 1, 128, 128, true, false, 448.0f);
  p.scale_o = 1.0f;
  Fp8Call call(p, false);
  call.run("cudnn");
  const Fp8Result first = call.result();
  call.poison_outputs();
  const attnlab::RunInfo second = call.run("cudnn");
  EXPECT_EQ(second.device_allocations, 0);
  const Fp8Result again = call.result();
  for (std::uint8_t code : first.o) ASSERT_NE(code & 0x7F, 0x7F) << "O holds a NaN code (the poison, unwritten)";
  EXPECT_EQ(first.o, again.o);
  EXPECT_EQ(first.lse, again.lse);
  EXPECT_EQ(first.amax_s, again.amax_s);
  EXPECT_EQ(first.amax_o, again.amax_o);
}

}  // namespace
}  // namespace attnlab_test
