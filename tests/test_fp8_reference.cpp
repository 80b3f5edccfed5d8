// The FP8 forward reference (reference_fp8.h) against the fp64 reference on the same decoded inputs, with an error
// bound derived from where §7 quantizes, and exact checks of the quantization points on cases computed by hand.
//
// The bound. On identical real inputs the two references differ only where the FP8 one rounds:
//   * P: x = f32(f32(p) · scale_s) is within 2^-23 · x of p · scale_s; e4m3 rounds x to nearest with 3 mantissa
//     bits, so |e4m3(x) − x| ≤ 2^-4 · |x| where x is normal (|x| ≥ 2^-6: half an ulp 2^(e−4) over |x| ≥ 2^e) and
//     ≤ 2^-10 (half the subnormal step 2^-9) below. No saturation: p ≤ 1 and scale_s ≤ 448. Divided by scale_s:
//       |p̂_j / scale_s − p_j| ≤ 2^-4 · p_j + 2^-10 / scale_s   (+ the f32 terms, 2^-23 · p_j)
//   * P·V, summed in double from exact products: no further error worth counting; the result, the f32 descale
//     1/scale_s and the f32 output round at 2^-24 relative each, all under Σ_j p_j |v_j| in size.
//   So, with v real (decoded · d_v),
//       |o_fp8 − o_f64| ≤ 2^-4 · Σ_j p_j |v_j|  +  2^-10 / scale_s · Σ_j |v_j|  +  2^-20 · Σ_j p_j |v_j|
//   (the sums over the row's visible keys; the last term a generous cover for the f32 roundings). O in e4m3 adds
//   its own rounding, ≤ max(2^-4 · |o|, 2^-10 / scale_o) after dividing by scale_o.
// The first term dominates and is nearly attained: a row's errors from different keys partly cancel, but over a
// tensor's many elements the worst one reaches 0.5–0.9 of its bound on random inputs (a one-key row 0.5–0.6,
// e4m3(scale_s) against scale_s). The tests require at least kMinRatio where the softmax concentrates on few keys,
// so that a reference which skipped P's quantization (an error near 2^-20 of the bound) could not pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "reference.h"
#include "fp8_bound.h"
#include "fp8_random.h"
#include "reference_fp8.h"
#include "test_support.h"

namespace {

using attnlab::core::Fp8Format;
using attnlab::core::float_to_fp8;
using attnlab::core::fp8_to_float;
using attnlab_test::Rng;
using attnlab_test::random_fp8_codes;
namespace ref = attnlab_test::ref;
namespace fp8ref = attnlab_test::fp8ref;

constexpr double kMinRatio = 0.05;  // the least fraction of the bound the worst element must reach (see above)

double e4m3(std::uint8_t c) { return double(fp8_to_float(c, Fp8Format::e4m3)); }

struct Shape {
  const char* name;
  std::int64_t B, T, S, N, K, Hqk, Hv;
  bool causal, bottom_right;
};

// `q_magnitude` sharpens the softmax (larger scores), which concentrates P on few keys.
fp8ref::Problem make(Rng& rng, const Shape& sh, float scale_s, double q_magnitude = 1.0) {
  fp8ref::Problem p;
  p.B = sh.B, p.T = sh.T, p.S = sh.S, p.N = sh.N, p.K = sh.K, p.Hqk = sh.Hqk, p.Hv = sh.Hv;
  p.causal = sh.causal;
  p.bottom_right = sh.bottom_right;
  p.scale_s = scale_s;
  const Fp8Format e4m3 = Fp8Format::e4m3;
  random_fp8_codes(rng, std::size_t(sh.B * sh.T * sh.N * sh.Hqk), q_magnitude * rng.uniform(0.5, 2.0), e4m3, p.q,
                   p.d_q);
  random_fp8_codes(rng, std::size_t(sh.B * sh.S * sh.K * sh.Hqk), rng.uniform(0.5, 2.0), e4m3, p.k, p.d_k);
  random_fp8_codes(rng, std::size_t(sh.B * sh.S * sh.K * sh.Hv), rng.uniform(0.2, 5.0), e4m3, p.v, p.d_v);
  return p;
}

// O within the bound everywhere, and, with `min_ratio` > 0, the worst element at least that fraction of its bound.
::testing::AssertionResult o_within_bound(const fp8ref::Problem& p, const fp8ref::Forward& f, double min_ratio,
                                          double* worst = nullptr) {
  const std::vector<double> o64 = ref::forward(fp8ref::decoded(p)).o;
  const std::vector<double> bound = fp8ref::o_bound(p);
  double ratio = 0;
  for (std::size_t e = 0; e < o64.size(); ++e) {
    const double err = std::fabs(double(f.o[e]) - o64[e]);
    if (!(err <= bound[e]))  // NaN fails too
      return ::testing::AssertionFailure() << "o[" << e << "] = " << f.o[e] << ", fp64 " << o64[e] << ": error "
                                           << err << " > bound " << bound[e];
    if (bound[e] > 0) ratio = std::max(ratio, err / bound[e]);
  }
  if (worst) *worst = ratio;
  if (ratio < min_ratio)
    return ::testing::AssertionFailure() << "worst error only " << ratio << " of the bound (< " << min_ratio
                                         << "): P's quantization is not visible";
  return ::testing::AssertionSuccess() << "worst error " << ratio << " of the bound";
}

// amax_s against fp64: max_j p_ij = exp(max_j s_ij − lse_i), over rows that see a key; within f32's rounding.
double amax_s_f64(const fp8ref::Problem& p) {
  const ref::Problem r = fp8ref::decoded(p);
  const ref::Forward f64 = ref::forward(r);
  double amax = 0;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t n = 0; n < p.N; ++n)
      for (std::int64_t i = 0; i < p.T; ++i) {
        double smax = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < p.S; ++j) {
          if (!ref::visible(r, b, n, i, j)) continue;
          double dot = 0;
          for (std::int64_t h = 0; h < p.Hqk; ++h) dot += r.qv(b, i, n, h) * r.kv(b, j, r.kv_head(n), h);
          smax = std::max(smax, dot * r.scale);
        }
        if (std::isfinite(smax)) amax = std::max(amax, std::exp(smax - f64.lse[std::size_t((b * p.N + n) * p.T + i)]));
      }
  return amax;
}

void check_forward(const fp8ref::Problem& p, bool require_visible_error) {
  const fp8ref::Forward f = fp8ref::forward(p);
  const ref::Forward f64 = ref::forward(fp8ref::decoded(p));
  ASSERT_EQ(f.o.size(), f64.o.size());
  ASSERT_TRUE(f.o_fp8.empty());  // no scale_o given
  double worst = 0;
  EXPECT_TRUE(o_within_bound(p, f, require_visible_error ? kMinRatio : 0.0, &worst));
  if (std::getenv("ATTNLAB_TEST_REPORT")) std::printf("  worst |o_fp8 − o_f64| / bound: %.3f\n", worst);

  // LSE from the unquantized scores: the same fp64 value, rounded to f32 once.
  for (std::size_t e = 0; e < f.lse.size(); ++e) {
    if (std::isinf(f64.lse[e])) {
      EXPECT_EQ(double(f.lse[e]), f64.lse[e]) << "lse[" << e << "]";
      continue;
    }
    EXPECT_NEAR(f.lse[e], f64.lse[e], 0x1p-22 * std::max(1.0, std::fabs(f64.lse[e]))) << "lse[" << e << "]";
  }

  // amax_s: max |p| before quantization; amax_o: max |o| of the output, exactly.
  EXPECT_NEAR(f.amax_s, amax_s_f64(p), 0x1p-22 * f.amax_s);
  EXPECT_LE(f.amax_s, 1.0f);
  double amax_o = 0;
  for (float e : f.o) {
    ASSERT_FALSE(std::isnan(e));
    amax_o = std::max(amax_o, double(std::fabs(e)));
  }
  EXPECT_EQ(double(f.amax_o), amax_o);

  // O in e4m3, with the scale a recipe would use for this amax: the codes are encode(o · scale_o), the same o;
  // the largest lands on 448; the decoded O is within the bound plus O's own rounding.
  if (f.amax_o == 0) return;
  fp8ref::Problem po = p;
  po.scale_o = 448.0f / f.amax_o;
  const fp8ref::Forward fo = fp8ref::forward(po);
  ASSERT_EQ(fo.o_fp8.size(), f.o.size());
  EXPECT_EQ(fo.o, f.o);
  EXPECT_EQ(fo.amax_o, f.amax_o);
  const std::vector<double> bound = fp8ref::o_bound(p);
  double largest = 0;
  for (std::size_t e = 0; e < f.o.size(); ++e) {
    ASSERT_EQ(fo.o_fp8[e], float_to_fp8(f.o[e] * *po.scale_o, Fp8Format::e4m3)) << "o_fp8[" << e << "]";
    const double dec = e4m3(fo.o_fp8[e]);
    largest = std::max(largest, std::fabs(dec));
    const double own = fp8ref::o_rounding_bound(f.o[e], double(*po.scale_o));
    EXPECT_LE(std::fabs(dec / double(*po.scale_o) - f64.o[e]), bound[e] + own) << "o_fp8[" << e << "]";
  }
  EXPECT_EQ(largest, 448.0);
}

// ---------------------------------------------------------------------------------------------------------------
// Odd shapes, GQA, both causal alignments (rows without keys included), against fp64 within the bound.
// ---------------------------------------------------------------------------------------------------------------
class Fp8Reference : public ::testing::TestWithParam<Shape> {};

TEST_P(Fp8Reference, WithinBoundOfFp64) {
  ATTNLAB_TEST_RNG(rng);
  const Shape& sh = GetParam();
  // Two softmax sharpnesses and a scale_s that is not a power of two. The visible-error requirement only where
  // rows have several keys, the softmax is concentrated and there are many rows: a one-key row quantizes
  // 1 · scale_s, exact or not, and with two rows (T1_S203) the worst element fell under 0.05 about once in 40.
  for (double q_magnitude : {1.0, 6.0}) {
    SCOPED_TRACE(::testing::Message() << "q magnitude " << q_magnitude);
    const fp8ref::Problem p = make(rng, sh, float(rng.uniform(100.0, 448.0)), q_magnitude);
    check_forward(p, sh.S >= 8 && sh.B * sh.T * sh.N >= 64 && q_magnitude > 1);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Fp8Reference,
    ::testing::Values(Shape{"T1_S1", 1, 1, 1, 1, 1, 64, 64, false, false},
                      Shape{"T1_S203", 1, 1, 203, 2, 1, 64, 64, false, false},
                      Shape{"T113_S1", 1, 113, 1, 2, 2, 64, 64, false, false},
                      Shape{"T113_S203_gqa4_2", 1, 113, 203, 4, 2, 64, 64, false, false},
                      Shape{"T113_S203_causal_tl", 1, 113, 203, 4, 2, 64, 64, true, false},
                      Shape{"T113_S203_causal_br", 1, 113, 203, 4, 2, 64, 64, true, true},
                      Shape{"T203_S113_causal_br_empty_rows", 1, 203, 113, 4, 2, 64, 64, true, true},
                      Shape{"T203_S113_causal_tl", 1, 203, 113, 4, 2, 64, 64, true, false},
                      Shape{"B2_Hqk32_Hv48", 2, 37, 53, 4, 4, 32, 48, false, false}),
    [](const ::testing::TestParamInfo<Shape>& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------------------------
// Rows without a visible key: o = 0 (and code 0), lse = −inf, no NaN, no contribution to amax.
// ---------------------------------------------------------------------------------------------------------------
TEST(Fp8ReferenceMask, RowsWithoutKeys) {
  ATTNLAB_TEST_RNG(rng);
  // Bottom-right with T > S: query i sees j ≤ i − 2, so rows 0 and 1 see nothing.
  fp8ref::Problem p = make(rng, Shape{"", 1, 5, 3, 2, 1, 16, 16, true, true}, 448.0f);
  p.scale_o = 100.0f;
  const fp8ref::Forward f = fp8ref::forward(p);
  for (std::int64_t n = 0; n < p.N; ++n)
    for (std::int64_t i = 0; i < p.T; ++i) {
      const float lse = f.lse[std::size_t(n * p.T + i)];
      ASSERT_FALSE(std::isnan(lse));
      if (i < 2) EXPECT_EQ(lse, -std::numeric_limits<float>::infinity()) << "row " << i;
      else EXPECT_TRUE(std::isfinite(lse)) << "row " << i;
      for (std::int64_t h = 0; h < p.Hv; ++h) {
        const std::size_t e = std::size_t((i * p.N + n) * p.Hv + h);
        ASSERT_FALSE(std::isnan(f.o[e]));
        if (i < 2) {
          EXPECT_EQ(f.o[e], 0.0f) << "row " << i;
          EXPECT_EQ(f.o_fp8[e], 0) << "row " << i;
        }
      }
    }
  // Row 2 sees key 0 alone: its p is 1, so amax_s is exactly 1 whatever the masked rows did.
  EXPECT_EQ(f.amax_s, 1.0f);

}

// ---------------------------------------------------------------------------------------------------------------
// The quantization points exactly, on cases whose P is known in closed form.
// ---------------------------------------------------------------------------------------------------------------
// One key: p = 1, so p̂ = e4m3(scale_s). scale_s = 300 lies between e4m3's 288 and 320 and rounds to 288, so
// o = v · 288 / 300 — 4% below v, which neither skipping P's quantization (o = v) nor any other order gives.
TEST(Fp8ReferenceExact, OneKeyQuantizesScaleS) {
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = make(rng, Shape{"", 1, 3, 1, 2, 1, 16, 24, false, false}, 300.0f);
  ASSERT_EQ(e4m3(float_to_fp8(300.0f, Fp8Format::e4m3)), 288.0);
  const fp8ref::Forward f = fp8ref::forward(p);
  const ref::Problem r = fp8ref::decoded(p);
  for (std::int64_t i = 0; i < p.T; ++i)
    for (std::int64_t n = 0; n < p.N; ++n)
      for (std::int64_t h = 0; h < p.Hv; ++h) {
        const double want = r.vv(0, 0, 0, h) * 288.0 / 300.0;
        EXPECT_NEAR(f.o[std::size_t((i * p.N + n) * p.Hv + h)], want, 0x1p-21 * std::fabs(want));
      }
  EXPECT_EQ(f.amax_s, 1.0f);
}

// Three keys with the same k: every score is equal, p = 1/3, and 448/3 = 149.33 rounds to e4m3's 144 (between
// 144 and 160), so o = (144/448) · Σ_j v_j, not (1/3) · Σ_j v_j. amax_s = f32(1/3), before quantization.
TEST(Fp8ReferenceExact, EqualScoresQuantizeOneThird) {
  ATTNLAB_TEST_RNG(rng);
  fp8ref::Problem p = make(rng, Shape{"", 1, 4, 3, 1, 1, 16, 16, false, false}, 448.0f);
  for (std::int64_t j = 1; j < p.S; ++j)
    std::copy(p.k.begin(), p.k.begin() + p.Hqk, p.k.begin() + j * p.Hqk);  // every key = key 0
  const fp8ref::Forward f = fp8ref::forward(p);
  const ref::Problem r = fp8ref::decoded(p);
  for (std::int64_t i = 0; i < p.T; ++i)
    for (std::int64_t h = 0; h < p.Hv; ++h) {
      const double want = (144.0 / 448.0) * (r.vv(0, 0, 0, h) + r.vv(0, 1, 0, h) + r.vv(0, 2, 0, h));
      EXPECT_NEAR(f.o[std::size_t(i * p.Hv + h)], want, 0x1p-21 * std::fabs(want) + 1e-30);
    }
  EXPECT_EQ(f.amax_s, float(1.0 / 3.0));
}

// ---------------------------------------------------------------------------------------------------------------
// The checks above would catch a quantization point out of place: each mutation fails at least one of them.
// ---------------------------------------------------------------------------------------------------------------
TEST(Fp8ReferenceMutations, EachWrongQuantizationPointFails) {
  ATTNLAB_TEST_RNG(rng);
  const Shape sh{"", 1, 113, 203, 4, 2, 64, 64, true, false};
  for (fp8ref::Mutation m : {fp8ref::Mutation::skip_p_quantization, fp8ref::Mutation::scale_s_twice,
                             fp8ref::Mutation::skip_descale_s}) {
    SCOPED_TRACE(::testing::Message() << "mutation " << int(m));
    fp8ref::Problem p = make(rng, sh, float(rng.uniform(100.0, 448.0)), 6.0);
    EXPECT_TRUE(o_within_bound(p, fp8ref::forward(p), kMinRatio)) << "the correct reference must pass";
    p.mutation = m;
    EXPECT_FALSE(o_within_bound(p, fp8ref::forward(p), kMinRatio));

    // The closed-form one-key case catches each as well (o = v, v · 448/300, v · 288 instead of v · 288/300).
    fp8ref::Problem one = make(rng, Shape{"", 1, 1, 1, 1, 1, 16, 16, false, false}, 300.0f);
    one.mutation = m;
    const double v0 = fp8ref::decoded(one).v[0];
    EXPECT_GT(std::fabs(fp8ref::forward(one).o[0] - v0 * 288.0 / 300.0), 0.01 * std::fabs(v0));
  }
}

}  // namespace
