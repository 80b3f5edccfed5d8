// The FP8 backward reference (reference_fp8_backward.h) against the fp64 reference backward on the same decoded
// inputs, with an error bound derived from where the backward quantizes; its amaxes against brute-force maxima;
// its FP8 outputs against the codes of its float outputs; and wrong quantization points shown to be caught.
//
// The comparison. ref::backward(decoded problem, dÔ·descale_do, O = Ô·descale_o, LSE = the forward's f32 LSE)
// computes the exact gradient of the very inputs the FP8 backward is given: q, k, v, O and dO enter both sides as
// the same decoded values, so the input roundings (e4m3 codes of q, k, v, O; e5m2 or e4m3 codes of dO) are not
// differences; D = rowsum(dO ∘ O) and P = exp(s − LSE) are the same numbers on both sides. The FP8 backward
// differs only where it rounds:
//   * P for dV: x = f32(f32(p) · scale_s) is within 2^-23 · x of p · scale_s; e4m3 rounds x to nearest with 3
//     mantissa bits: |e4m3(x) − x| ≤ 2^-4 · |x| where x is normal (|x| ≥ 2^-6: half an ulp 2^(e−4) over
//     |x| ≥ 2^e) and ≤ 2^-10 (half the subnormal step 2^-9) below; p ≤ 1 (up to the LSE's f32 rounding) and
//     scale_s ≤ 448, so no saturation beyond a rounding. With descale_s = f32(1 / scale_s) (2^-24 relative):
//       |p̂ · descale_s − p| ≤ (2^-4 + 2^-21) · p + 2^-10 · descale_s
//     and, summed over the rows i (of every query head of the KV head) that see key j, with dO real:
//       |dV − dV64|_jh ≤ (2^-4 + 2^-20) · Σ_i p_ij |dO_ih| + 2^-10 · descale_s · Σ_i |dO_ih|
//   * dS for dQ and dK: dS in f32 is within 2^-23 of the fp64 dS (p's and dS's own f32 roundings; D and dP are
//     double on both sides); x = f32(dS · scale_dp) adds 2^-24; dO's format rounds it with relative step u and
//     subnormal half step m: u = 2^-3, m = 2^-17 for e5m2 (2 mantissa bits, subnormal step 2^-16), u = 2^-4,
//     m = 2^-10 for e4m3. scale_dp ≤ fp8_max / amax_dp, so no saturation beyond a rounding. Descaled:
//       |dŜ · descale_dp − dS| ≤ (u + 2^-21) · |dS| + m · descale_dp
//     so |dQ − dQ64|_ih ≤ Σ_j ((u + 2^-20) |dS_ij| + m · descale_dp) · |k_jh| over the visible j, and dK_jh the
//     same with |q_ih| over the visible (i, query head).
//   * The GEMM sums are double on exact products, and the descales and the f32 output round at 2^-24 relative
//     each, all under the sums above: the 2^-20 terms cover them generously.
//   FP8 outputs add their own rounding, ≤ max(u_g · |g|, m_g / scale_g) after dividing by scale_g.
// The u terms dominate. A row's errors from different keys partly cancel, so the worst element reaches only part
// of its bound; where the softmax concentrates on few keys and there are many elements the tests require at least
// kMinRatio of it, so that a reference which skipped a quantization (an error near 2^-20 of the bound) could not
// pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "reference.h"
#include "fp8_random.h"
#include "reference_fp8.h"
#include "reference_fp8_backward.h"
#include "test_support.h"

namespace {

using attnlab::core::Fp8Format;
using attnlab_test::random_fp8_codes;
using attnlab::core::float_to_fp8;
using attnlab::core::fp8_max;
using attnlab::core::fp8_to_float;
using attnlab_test::Rng;
namespace ref = attnlab_test::ref;
namespace fp8ref = attnlab_test::fp8ref;
using fp8ref::BackwardMutation;

constexpr double kMinRatio = 0.05;  // the least fraction of the bound the worst element must reach (see above)

double relative_step(Fp8Format f) { return f == Fp8Format::e4m3 ? 0x1p-4 : 0x1p-3; }       // u
double subnormal_half_step(Fp8Format f) { return f == Fp8Format::e4m3 ? 0x1p-10 : 0x1p-17; }  // m

struct Shape {
  const char* name;
  std::int64_t B, T, S, N, K, Hqk, Hv;
  bool causal, bottom_right;
  Fp8Format do_format;
};
void PrintTo(const Shape& sh, std::ostream* os) { *os << sh.name; }  // ctest's names, instead of the bytes

struct Case {
  fp8ref::Problem p;
  fp8ref::BackwardInputs in;
};

// A forward problem, its FP8 forward (O in e4m3 with the recipe's scale, the LSE), a fresh dO, and scale_dp from
// a first backward's amax_dp times `dp_headroom` (≤ 1): the scales a delayed-scaling recipe would hold.
// `q_magnitude` sharpens the softmax (larger scores), which concentrates P on few keys.
Case make(Rng& rng, const Shape& sh, double q_magnitude = 1.0, double dp_headroom = 1.0) {
  Case c;
  fp8ref::Problem& p = c.p;
  p.B = sh.B, p.T = sh.T, p.S = sh.S, p.N = sh.N, p.K = sh.K, p.Hqk = sh.Hqk, p.Hv = sh.Hv;
  p.causal = sh.causal;
  p.bottom_right = sh.bottom_right;
  p.scale_s = float(rng.uniform(100.0, 448.0));  // not a power of two
  const Fp8Format e4m3 = Fp8Format::e4m3;
  random_fp8_codes(rng, std::size_t(sh.B * sh.T * sh.N * sh.Hqk), q_magnitude * rng.uniform(0.5, 2.0), e4m3, p.q,
                   p.d_q);
  random_fp8_codes(rng, std::size_t(sh.B * sh.S * sh.K * sh.Hqk), rng.uniform(0.5, 2.0), e4m3, p.k, p.d_k);
  random_fp8_codes(rng, std::size_t(sh.B * sh.S * sh.K * sh.Hv), rng.uniform(0.2, 5.0), e4m3, p.v, p.d_v);
  const float amax_o = fp8ref::forward(p).amax_o;
  p.scale_o = amax_o > 0 ? 448.0f / amax_o : 1.0f;
  const fp8ref::Forward f = fp8ref::forward(p);

  fp8ref::BackwardInputs& in = c.in;
  in.o = f.o_fp8;
  in.descale_o = 1.0f / *p.scale_o;
  in.lse = f.lse;
  in.do_format = sh.do_format;
  random_fp8_codes(rng, std::size_t(sh.B * sh.T * sh.N * sh.Hv), rng.uniform(0.2, 5.0), sh.do_format, in.d_o,
                   in.descale_do);
  const float amax_dp = fp8ref::backward(p, in).amax_dp;  // amax is taken before scaling: scale_dp = 1 is fine
  if (amax_dp > 0) in.scale_dp = float(dp_headroom * double(fp8_max(sh.do_format)) / double(amax_dp));
  return c;
}

// fp64 terms of the bound, element by element, and the fp64 dS's amax, from the decoded inputs. dP − D can cancel
// to nothing (a one-key row whose O reproduces V exactly), where both sides are left with double rounding noise:
// amax_dp_slack covers it, 2^-40 of the sizes of the sums that cancel.
struct Bounds {
  std::vector<double> dq, dk, dv;
  double amax_dp = 0, amax_dp_slack = 0;
};

Bounds bounds(const Case& c) {
  const fp8ref::Problem& p = c.p;
  const fp8ref::DecodedBackward d = fp8ref::decoded(p, c.in);
  const ref::Problem& r = d.problem;
  const double u = relative_step(c.in.do_format) + 0x1p-20, m = subnormal_half_step(c.in.do_format);
  const double descale_s = c.in.descale_s_or(p.scale_s), descale_dp = c.in.descale_dp_or_default();
  Bounds bd;
  bd.dq.assign(r.q.size(), 0.0);
  bd.dk.assign(r.k.size(), 0.0);
  bd.dv.assign(r.v.size(), 0.0);
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t n = 0; n < p.N; ++n)
      for (std::int64_t i = 0; i < p.T; ++i) {
        const std::int64_t kh = r.kv_head(n);
        const std::size_t orow = std::size_t(((b * p.T + i) * p.N + n) * p.Hv);
        double D = 0, D_size = 0;
        for (std::int64_t h = 0; h < p.Hv; ++h) {
          D += d.d_o[orow + std::size_t(h)] * d.o[orow + std::size_t(h)];
          D_size += std::fabs(d.d_o[orow + std::size_t(h)] * d.o[orow + std::size_t(h)]);
        }
        for (std::int64_t j = 0; j < p.S; ++j) {
          if (!ref::visible(r, b, n, i, j)) continue;
          double s = 0, dp = 0, dp_size = 0;
          for (std::int64_t h = 0; h < p.Hqk; ++h) s += r.qv(b, i, n, h) * r.kv(b, j, kh, h);
          for (std::int64_t h = 0; h < p.Hv; ++h) {
            dp += d.d_o[orow + std::size_t(h)] * r.vv(b, j, kh, h);
            dp_size += std::fabs(d.d_o[orow + std::size_t(h)] * r.vv(b, j, kh, h));
          }
          const double pr = std::exp(s * r.scale - d.lse[std::size_t((b * p.N + n) * p.T + i)]);
          const double ds = std::fabs(pr * (dp - D) * r.scale);
          bd.amax_dp = std::max(bd.amax_dp, ds);
          bd.amax_dp_slack = std::max(bd.amax_dp_slack, 0x1p-40 * pr * (dp_size + D_size) * r.scale);
          for (std::int64_t h = 0; h < p.Hv; ++h) {
            const double g = std::fabs(d.d_o[orow + std::size_t(h)]);
            bd.dv[std::size_t(((b * p.S + j) * p.K + kh) * p.Hv + h)] +=
                (0x1p-4 + 0x1p-20) * pr * g + 0x1p-10 * descale_s * g;
          }
          const double per_k = u * ds + m * descale_dp;
          for (std::int64_t h = 0; h < p.Hqk; ++h) {
            bd.dq[std::size_t(((b * p.T + i) * p.N + n) * p.Hqk + h)] += per_k * std::fabs(r.kv(b, j, kh, h));
            bd.dk[std::size_t(((b * p.S + j) * p.K + kh) * p.Hqk + h)] += per_k * std::fabs(r.qv(b, i, n, h));
          }
        }
      }
  return bd;
}

// One gradient within its bound everywhere and, with `min_ratio` > 0, its worst element at least that fraction of
// its bound.
::testing::AssertionResult within(const char* name, const std::vector<float>& got, const std::vector<double>& f64,
                                  const std::vector<double>& bound, double min_ratio, double* worst = nullptr) {
  if (got.size() != f64.size()) return ::testing::AssertionFailure() << name << ": size " << got.size();
  double ratio = 0;
  for (std::size_t e = 0; e < f64.size(); ++e) {
    const double err = std::fabs(double(got[e]) - f64[e]);
    if (!(err <= bound[e]))  // NaN fails too
      return ::testing::AssertionFailure() << name << "[" << e << "] = " << got[e] << ", fp64 " << f64[e]
                                           << ": error " << err << " > bound " << bound[e];
    if (bound[e] > 0) ratio = std::max(ratio, err / bound[e]);
  }
  if (worst) *worst = ratio;
  if (ratio < min_ratio)
    return ::testing::AssertionFailure() << name << ": worst error only " << ratio << " of the bound (< "
                                         << min_ratio << "): the quantization is not visible";
  return ::testing::AssertionSuccess() << name << ": worst error " << ratio << " of the bound";
}

// dQ, dK and dV of `g` against fp64, each within its bound (min_ratio as `within`).
::testing::AssertionResult gradients_within(const Case& c, const fp8ref::Backward& g, double min_ratio,
                                            double worst[3] = nullptr) {
  const fp8ref::DecodedBackward d = fp8ref::decoded(c.p, c.in);
  const ref::Backward r = ref::backward(d.problem, d.d_o, &d.o, &d.lse);
  const Bounds bd = bounds(c);
  double w[3] = {0, 0, 0};
  ::testing::AssertionResult dq = within("dq", g.dq, r.dq, bd.dq, min_ratio, &w[0]);
  if (!dq) return dq;
  ::testing::AssertionResult dk = within("dk", g.dk, r.dk, bd.dk, min_ratio, &w[1]);
  if (!dk) return dk;
  ::testing::AssertionResult dv = within("dv", g.dv, r.dv, bd.dv, min_ratio, &w[2]);
  if (!dv) return dv;
  if (worst) std::copy(w, w + 3, worst);
  return ::testing::AssertionSuccess() << "worst errors / bound: dq " << w[0] << ", dk " << w[1] << ", dv " << w[2];
}

float max_abs(const std::vector<float>& x) {
  float a = 0;
  for (float e : x) a = std::max(a, std::fabs(e));
  return a;
}

// The FP8 outputs of one gradient: the codes of the float output times its scale, decoded within the bound plus
// their own rounding, the largest on fp8_max (the scale is the recipe's fp8_max / amax).
void check_fp8_output(const char* name, const std::vector<float>& g, const std::vector<std::uint8_t>& codes,
                      const fp8ref::GradOutput& out, const std::vector<double>& f64, const std::vector<double>& bound) {
  SCOPED_TRACE(name);
  ASSERT_EQ(codes.size(), g.size());
  const float scale = *out.scale;
  double largest = 0;
  for (std::size_t e = 0; e < g.size(); ++e) {
    ASSERT_EQ(codes[e], float_to_fp8(g[e] * scale, out.format)) << "[" << e << "]";
    const double dec = double(fp8_to_float(codes[e], out.format));
    largest = std::max(largest, std::fabs(dec));
    const double own =
        std::max(relative_step(out.format) * std::fabs(g[e]), subnormal_half_step(out.format) / scale) * (1 + 0x1p-20);
    EXPECT_LE(std::fabs(dec / double(scale) - f64[e]), bound[e] + own) << "[" << e << "]";
  }
  EXPECT_EQ(largest, double(fp8_max(out.format)));
}

void check_backward(Rng& rng, const Case& c, bool require_visible_error) {
  const fp8ref::Backward g = fp8ref::backward(c.p, c.in);
  ASSERT_TRUE(g.dq_fp8.empty() && g.dk_fp8.empty() && g.dv_fp8.empty());  // no output scale given
  double worst[3] = {0, 0, 0};
  EXPECT_TRUE(gradients_within(c, g, require_visible_error ? kMinRatio : 0.0, worst));
  if (std::getenv("ATTNLAB_TEST_REPORT"))
    std::printf("  worst |g_fp8 − g_f64| / bound: dq %.3f  dk %.3f  dv %.3f\n", worst[0], worst[1], worst[2]);

  // Amaxes: those of the outputs exactly, amax_dp that of the fp64 dS up to dS's f32 rounding.
  EXPECT_EQ(g.amax_dq, max_abs(g.dq));
  EXPECT_EQ(g.amax_dk, max_abs(g.dk));
  EXPECT_EQ(g.amax_dv, max_abs(g.dv));
  const Bounds bd = bounds(c);
  EXPECT_NEAR(double(g.amax_dp), bd.amax_dp, 0x1p-20 * bd.amax_dp + bd.amax_dp_slack);
  if (c.p.S > 1) {
    EXPECT_GT(g.amax_dp, 0.0f);  // fresh random inputs: no all-zero dS (one key: see Bounds)
  }

  // The gradients in FP8, with the recipe's scales and a format drawn per tensor: the float outputs and the
  // amaxes unchanged, the codes those of the float outputs times their scale.
  if (g.amax_dq == 0 || g.amax_dk == 0 || g.amax_dv == 0) return;  // a tensor of empty rows only
  Case cf = c;
  const auto pick = [&](fp8ref::GradOutput& out, float amax) {
    out.format = rng.chance(0.5) ? Fp8Format::e4m3 : Fp8Format::e5m2;
    out.scale = fp8_max(out.format) / amax;
  };
  pick(cf.in.dq, g.amax_dq);
  pick(cf.in.dk, g.amax_dk);
  pick(cf.in.dv, g.amax_dv);
  const fp8ref::Backward gf = fp8ref::backward(cf.p, cf.in);
  EXPECT_EQ(gf.dq, g.dq);
  EXPECT_EQ(gf.dk, g.dk);
  EXPECT_EQ(gf.dv, g.dv);
  EXPECT_EQ(gf.amax_dp, g.amax_dp);
  EXPECT_EQ(gf.amax_dq, g.amax_dq);
  EXPECT_EQ(gf.amax_dk, g.amax_dk);
  EXPECT_EQ(gf.amax_dv, g.amax_dv);
  const fp8ref::DecodedBackward d = fp8ref::decoded(c.p, c.in);
  const ref::Backward r = ref::backward(d.problem, d.d_o, &d.o, &d.lse);
  check_fp8_output("dq", gf.dq, gf.dq_fp8, cf.in.dq, r.dq, bd.dq);
  check_fp8_output("dk", gf.dk, gf.dk_fp8, cf.in.dk, r.dk, bd.dk);
  check_fp8_output("dv", gf.dv, gf.dv_fp8, cf.in.dv, r.dv, bd.dv);
}

// ---------------------------------------------------------------------------------------------------------------
// Odd shapes, small heads, GQA and MQA, both causal alignments (rows without keys included), dO in e5m2 and in
// e4m3, against fp64 within the bound.
// ---------------------------------------------------------------------------------------------------------------
class Fp8BackwardReference : public ::testing::TestWithParam<Shape> {};

TEST_P(Fp8BackwardReference, WithinBoundOfFp64) {
  ATTNLAB_TEST_RNG(rng);
  const Shape& sh = GetParam();
  // Two softmax sharpnesses and a scale_dp with and without headroom. The visible-error requirement only where
  // rows have several keys, the softmax is concentrated and there are many rows (a one-key row quantizes
  // 1 · scale_s, exact or not, and its dS is only the forward's O rounding).
  for (double q_magnitude : {1.0, 6.0}) {
    SCOPED_TRACE(::testing::Message() << "q magnitude " << q_magnitude);
    const Case c = make(rng, sh, q_magnitude, rng.chance(0.5) ? 1.0 : rng.uniform(0.25, 1.0));
    check_backward(rng, c, sh.S >= 8 && sh.B * sh.T * sh.N >= 64 && q_magnitude > 1);
  }
}

constexpr Fp8Format e5m2 = Fp8Format::e5m2, e4m3 = Fp8Format::e4m3;

INSTANTIATE_TEST_SUITE_P(
    Shapes, Fp8BackwardReference,
    ::testing::Values(Shape{"T1_S1", 1, 1, 1, 1, 1, 16, 16, false, false, e5m2},
                      Shape{"T1_S203", 1, 1, 203, 2, 1, 16, 16, false, false, e5m2},
                      Shape{"T113_S1", 1, 113, 1, 2, 2, 16, 16, false, false, e5m2},
                      Shape{"T13_S29", 1, 13, 29, 2, 2, 16, 16, false, false, e5m2},
                      Shape{"T13_S29_mqa_do_e4m3", 2, 13, 29, 4, 1, 32, 16, false, false, e4m3},
                      Shape{"T113_S203_gqa4_2", 1, 113, 203, 4, 2, 16, 16, false, false, e5m2},
                      Shape{"T113_S203_mqa4_1_hqk32_hv16", 1, 113, 203, 4, 1, 32, 16, false, false, e5m2},
                      Shape{"T113_S203_causal_tl", 1, 113, 203, 4, 2, 16, 16, true, false, e5m2},
                      Shape{"T113_S203_causal_br", 1, 113, 203, 4, 2, 16, 16, true, true, e5m2},
                      Shape{"T203_S113_causal_br_empty_rows", 1, 203, 113, 4, 2, 32, 16, true, true, e5m2},
                      Shape{"T203_S113_causal_tl_do_e4m3", 1, 203, 113, 4, 2, 16, 16, true, false, e4m3},
                      Shape{"B2_T37_S53_hqk32_hv16", 2, 37, 53, 4, 4, 32, 16, false, false, e5m2}),
    [](const ::testing::TestParamInfo<Shape>& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------------------------
// Rows without a visible key: no NaN, dQ rows 0 (codes 0), and nothing added to dK, dV or the amaxes.
// ---------------------------------------------------------------------------------------------------------------
TEST(Fp8BackwardReferenceMask, RowsWithoutKeys) {
  ATTNLAB_TEST_RNG(rng);
  // Bottom-right with T > S: query i sees j ≤ i − 2, so rows 0 and 1 see nothing (their LSE is −inf).
  Case c = make(rng, Shape{"", 1, 5, 3, 2, 1, 16, 16, true, true, e5m2});
  c.in.dq.scale = 1000.0f;
  const fp8ref::Backward g = fp8ref::backward(c.p, c.in);
  for (std::int64_t n = 0; n < c.p.N; ++n)
    for (std::int64_t i = 0; i < 2; ++i) {
      ASSERT_EQ(c.in.lse[std::size_t(n * c.p.T + i)], -std::numeric_limits<float>::infinity());
      for (std::int64_t h = 0; h < c.p.Hqk; ++h) {
        const std::size_t e = std::size_t((i * c.p.N + n) * c.p.Hqk + h);
        EXPECT_EQ(g.dq[e], 0.0f) << "row " << i;
        EXPECT_EQ(g.dq_fp8[e], 0) << "row " << i;
      }
    }
  for (const std::vector<float>* t : {&g.dq, &g.dk, &g.dv})
    for (float e : *t) ASSERT_FALSE(std::isnan(e));
  // The same problem with those two rows' dO changed: nothing the backward returns may move.
  Case c2 = c;
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t e = 0; e < c.p.N * c.p.Hv; ++e) c2.in.d_o[std::size_t(i * c.p.N * c.p.Hv + e)] ^= 0x01;
  const fp8ref::Backward g2 = fp8ref::backward(c2.p, c2.in);
  EXPECT_EQ(g2.dq, g.dq);
  EXPECT_EQ(g2.dk, g.dk);
  EXPECT_EQ(g2.dv, g.dv);
  EXPECT_EQ(g2.amax_dp, g.amax_dp);
  EXPECT_TRUE(gradients_within(c, g, 0.0));
}

// ---------------------------------------------------------------------------------------------------------------
// P's quantization for dV exactly, on a case whose P is known in closed form.
// ---------------------------------------------------------------------------------------------------------------
// One key: p = 1 (up to the LSE's f32 rounding), so p̂ = e4m3(scale_s). scale_s = 300 lies between e4m3's 288 and
// 320 and rounds to 288, so dV = (288 / 300) · Σ_i dO_i over every row and query head — 4% below the exact Σ_i dO_i,
// which neither skipping P's quantization nor any other order gives.
TEST(Fp8BackwardReferenceExact, OneKeyQuantizesScaleS) {
  ATTNLAB_TEST_RNG(rng);
  Case c = make(rng, Shape{"", 1, 3, 1, 2, 1, 16, 24, false, false, e5m2});
  c.p.scale_s = 300.0f;
  ASSERT_EQ(fp8_to_float(float_to_fp8(300.0f, Fp8Format::e4m3), Fp8Format::e4m3), 288.0f);
  const fp8ref::Backward g = fp8ref::backward(c.p, c.in);
  const fp8ref::DecodedBackward d = fp8ref::decoded(c.p, c.in);
  for (std::int64_t h = 0; h < c.p.Hv; ++h) {
    double sum = 0, abs_sum = 0;
    for (std::int64_t i = 0; i < c.p.T; ++i)
      for (std::int64_t n = 0; n < c.p.N; ++n) {
        sum += d.d_o[std::size_t((i * c.p.N + n) * c.p.Hv + h)];
        abs_sum += std::fabs(d.d_o[std::size_t((i * c.p.N + n) * c.p.Hv + h)]);
      }
    EXPECT_NEAR(g.dv[std::size_t(h)], sum * 288.0 / 300.0, 0x1p-20 * abs_sum) << "h " << h;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The checks above would catch a quantization point out of place: each mutation fails the bound (or, for P left
// unquantized, its non-vacuity) on a case where the correct reference passes both.
// ---------------------------------------------------------------------------------------------------------------
TEST(Fp8BackwardReferenceMutations, EachWrongQuantizationPointFails) {
  ATTNLAB_TEST_RNG(rng);
  const Shape sh{"", 1, 113, 203, 4, 2, 16, 16, true, false, e5m2};
  for (BackwardMutation m : {BackwardMutation::skip_p_quantization, BackwardMutation::ds_in_e4m3,
                             BackwardMutation::skip_descale_dp, BackwardMutation::skip_descale_o}) {
    SCOPED_TRACE(::testing::Message() << "mutation " << int(m));
    Case c = make(rng, sh, 6.0);
    EXPECT_TRUE(gradients_within(c, fp8ref::backward(c.p, c.in), kMinRatio)) << "the correct reference must pass";
    c.in.mutation = m;
    const ::testing::AssertionResult mutated = gradients_within(c, fp8ref::backward(c.p, c.in), kMinRatio);
    EXPECT_FALSE(mutated);
    if (std::getenv("ATTNLAB_TEST_REPORT")) std::printf("  mutation %d: %s\n", int(m), mutated.message());
  }
  // The closed-form one-key case catches P left unquantized as well (dV = Σ dO instead of 288/300 of it).
  Case one = make(rng, Shape{"", 1, 1, 1, 1, 1, 16, 16, false, false, e5m2});
  one.p.scale_s = 300.0f;
  one.in.mutation = BackwardMutation::skip_p_quantization;
  const double do0 = fp8ref::decoded(one.p, one.in).d_o[0];
  EXPECT_GT(std::fabs(fp8ref::backward(one.p, one.in).dv[0] - do0 * 288.0 / 300.0), 0.01 * std::fabs(do0));
}

}  // namespace
