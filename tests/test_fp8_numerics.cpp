// FP8 numerics on the host: the e4m3/e5m2 conversions of src/core/fp8.h and the DelayedScaling update of
// src/core/delayed_scaling.h (docs/design.md §7). Expected values come from the formats' definitions, computed here
// in double, never from the code under test; with CUDA the encoder must also agree bit for bit with cuda_fp8.h's
// conversion, the rule the GPU kernels follow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnlab/version.h"
#include "core/delayed_scaling.h"
#include "core/fp8.h"

#if ATTNLAB_WITH_CUDA
#include <cuda_fp8.h>
#endif

namespace {

using attnlab::core::Fp8Format;
using attnlab::core::Fp8Overflow;
using attnlab::core::float_to_fp8;
using attnlab::core::fp8_to_float;

struct Spec {
  Fp8Format format;
  const char* name;
  int e_bits, m_bits, bias;
  int max_code;   // largest finite, sign clear
  int emax;       // exponent of the largest finite binade
};
const Spec kSpecs[] = {{Fp8Format::e4m3, "e4m3", 4, 3, 7, 0x7E, 8}, {Fp8Format::e5m2, "e5m2", 5, 2, 15, 0x7B, 15}};
const Fp8Overflow kModes[] = {Fp8Overflow::saturate, Fp8Overflow::ieee};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
float up(float x) { return std::nextafter(x, kInfF); }
float down(float x) { return std::nextafter(x, -kInfF); }
std::string hex(int code) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", code & 0xFF);
  return buf;
}

// The value of a code from the format's definition: (−1)^s · 2^(e − bias) · (1 + m/2^M), subnormals
// (−1)^s · 2^(1 − bias) · m/2^M, and the specials (e4m3: S.1111.111 NaN; e5m2: exponent all ones, inf or NaN).
double definition_value(const Spec& s, int code) {
  const int e = (code >> s.m_bits) & ((1 << s.e_bits) - 1);
  const int m = code & ((1 << s.m_bits) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int e_all_ones = (1 << s.e_bits) - 1;
  if (s.format == Fp8Format::e4m3 && e == e_all_ones && m == (1 << s.m_bits) - 1) return std::nan("");
  if (s.format == Fp8Format::e5m2 && e == e_all_ones) return m == 0 ? sign * kInf : std::nan("");
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - s.bias - s.m_bits);
  return sign * std::ldexp(1.0 + m / static_cast<double>(1 << s.m_bits), e - s.bias);
}

// Positive magnitude of code c; c = max_code + 1 stands for the next value the format would have with an unbounded
// exponent (max + one ulp of the top binade: 480, 65536), so that IEEE rounding decides overflow like any tie.
double magnitude(const Spec& s, int c) {
  if (c <= s.max_code) return definition_value(s, c);
  return definition_value(s, s.max_code) + std::ldexp(1.0, s.emax - s.m_bits);
}

// An encoder written from the rules alone: nearest of the codes by search, ties to the even code; a result past
// the largest finite is an overflow.
std::uint8_t oracle_encode(const Spec& s, float x, Fp8Overflow mode) {
  if (std::isnan(x)) return 0x7F;
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  int code;
  if (a >= magnitude(s, s.max_code + 1)) {
    code = s.max_code + 1;
  } else {
    int lo = 0, hi = s.max_code + 1;  // magnitude(lo) <= a < magnitude(hi)
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (magnitude(s, mid) <= a ? lo : hi) = mid;
    }
    const double below = a - magnitude(s, lo), above = magnitude(s, hi) - a;
    code = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  }
  if (code > s.max_code) {
    if (mode == Fp8Overflow::saturate) return static_cast<std::uint8_t>(sign | s.max_code);
    return static_cast<std::uint8_t>(sign | (s.format == Fp8Format::e5m2 ? 0x7C : 0x7F));
  }
  return static_cast<std::uint8_t>(sign | code);
}

// ---------------------------------------------------------------------------------------------------------------
// Decode

TEST(Fp8Decode, EveryCodeMatchesTheDefinition) {
  for (const Spec& s : kSpecs) {
    int nans = 0;
    for (int code = 0; code < 256; ++code) {
      const float got = fp8_to_float(static_cast<std::uint8_t>(code), s.format);
      const double want = definition_value(s, code);
      SCOPED_TRACE(std::string(s.name) + " " + hex(code));
      EXPECT_EQ(attnlab::core::fp8_is_nan(static_cast<std::uint8_t>(code), s.format), std::isnan(want));
      if (std::isnan(want)) {
        ++nans;
        EXPECT_TRUE(std::isnan(got));
        continue;
      }
      ASSERT_EQ(static_cast<double>(static_cast<float>(want)), want);  // every FP8 value is a float
      EXPECT_EQ(bits_of(got), bits_of(static_cast<float>(want)));      // bitwise: −0 keeps its sign
    }
    EXPECT_EQ(nans, s.format == Fp8Format::e4m3 ? 2 : 6);
  }
}

TEST(Fp8Decode, LandmarkValues) {
  const Fp8Format e4 = Fp8Format::e4m3, e5 = Fp8Format::e5m2;
  EXPECT_EQ(fp8_to_float(0x38, e4), 1.0f);
  EXPECT_EQ(fp8_to_float(0x7E, e4), 448.0f);
  EXPECT_EQ(fp8_to_float(0xFE, e4), -448.0f);
  EXPECT_EQ(fp8_to_float(0x08, e4), 0x1p-6f);  // smallest normal
  EXPECT_EQ(fp8_to_float(0x07, e4), 0x1.cp-7f);  // largest subnormal, 7 · 2^-9
  EXPECT_EQ(fp8_to_float(0x01, e4), 0x1p-9f);  // smallest subnormal
  EXPECT_EQ(fp8_to_float(0x3C, e5), 1.0f);
  EXPECT_EQ(fp8_to_float(0x7B, e5), 57344.0f);
  EXPECT_EQ(fp8_to_float(0x04, e5), 0x1p-14f);
  EXPECT_EQ(fp8_to_float(0x01, e5), 0x1p-16f);
  EXPECT_EQ(fp8_to_float(0x7C, e5), kInfF);
  EXPECT_EQ(fp8_to_float(0xFC, e5), -kInfF);
  EXPECT_TRUE(std::signbit(fp8_to_float(0x80, e4)) && fp8_to_float(0x80, e4) == 0.0f);
  EXPECT_EQ(attnlab::core::fp8_max(e4), 448.0f);
  EXPECT_EQ(attnlab::core::fp8_max(e5), 57344.0f);
}

// ---------------------------------------------------------------------------------------------------------------
// Encode: exact cases

TEST(Fp8Encode, EveryFiniteCodeRoundTrips) {
  for (const Spec& s : kSpecs)
    for (int code = 0; code < 256; ++code) {
      const double v = definition_value(s, code);
      if (std::isnan(v) || std::isinf(v)) continue;
      for (Fp8Overflow mode : kModes)
        EXPECT_EQ(float_to_fp8(static_cast<float>(v), s.format, mode), code) << s.name << " " << hex(code);
    }
}

// Failures of `encode` on every midpoint between adjacent codes (both signs) and on the floats just either side.
// A midpoint of two FP8 values needs M + 1 mantissa bits, so it is a float exactly.
int midpoint_failures(const Spec& s, const std::function<std::uint8_t(float)>& encode, bool report) {
  int failures = 0;
  auto check = [&](float x, int want) {
    const int got = encode(x);
    if (got == want) return;
    ++failures;
    if (report) ADD_FAILURE() << s.name << " x=" << x << " (" << std::hexfloat << x << std::defaultfloat
                              << ") gave " << hex(got) << ", want " << hex(want);
  };
  for (int c = 0; c < s.max_code; ++c)
    for (int sign : {0, 0x80}) {
      const double lo = definition_value(s, sign | c), hi = definition_value(s, sign | (c + 1));
      const float mid = static_cast<float>((lo + hi) / 2);
      if (static_cast<double>(mid) != (lo + hi) / 2) { ++failures; continue; }
      check(mid, sign | (c % 2 == 0 ? c : c + 1));     // the tie: the even code (its mantissa LSB is 0)
      check(sign ? up(mid) : down(mid), sign | c);     // just nearer lo
      check(sign ? down(mid) : up(mid), sign | (c + 1));  // just nearer hi
    }
  return failures;
}

TEST(Fp8Encode, MidpointsRoundToEven) {
  for (const Spec& s : kSpecs)
    for (Fp8Overflow mode : kModes)
      EXPECT_EQ(midpoint_failures(s, [&](float x) { return float_to_fp8(x, s.format, mode); }, true), 0);
}

// The tests can fail: encoders with a wrong tie rule are caught by the midpoint check.
TEST(Fp8Encode, WrongTieRulesAreCaught) {
  for (const Spec& s : kSpecs) {
    auto ties_away = [&](float x) { return float_to_fp8(std::nextafter(x, std::copysign(kInfF, x)), s.format); };
    auto ties_to_zero = [&](float x) { return float_to_fp8(std::nextafter(x, 0.0f), s.format); };
    EXPECT_GT(midpoint_failures(s, ties_away, false), 0) << s.name;
    EXPECT_GT(midpoint_failures(s, ties_to_zero, false), 0) << s.name;
    EXPECT_NE(oracle_encode(s, 1.0f + 1.0f / static_cast<float>(2 << s.m_bits), Fp8Overflow::saturate),
              ties_away(1.0f + 1.0f / static_cast<float>(2 << s.m_bits)));
  }
}

// Ties where rounding up crosses into the next binade: the even neighbour there is the power of two.
TEST(Fp8Encode, TiesAtBinadeEdges) {
  const Fp8Format e4 = Fp8Format::e4m3, e5 = Fp8Format::e5m2;
  EXPECT_EQ(float_to_fp8(0.96875f, e4), 0x38);  // between 0.9375 (0x37, odd) and 1.0 (0x38)
  EXPECT_EQ(float_to_fp8(1.0625f, e4), 0x38);   // between 1.0 (0x38, even) and 1.125 (0x39)
  EXPECT_EQ(float_to_fp8(1.1875f, e4), 0x3A);   // between 1.125 (odd) and 1.25 (0x3A)
  EXPECT_EQ(float_to_fp8(248.0f, e4), 0x78);    // between 240 (0x77, odd) and 256 (0x78)
  EXPECT_EQ(float_to_fp8(-248.0f, e4), 0xF8);
  EXPECT_EQ(float_to_fp8(0.9375f, e5), 0x3C);   // between 0.875 (0x3B) and 1.0 (0x3C)
  EXPECT_EQ(float_to_fp8(1.125f, e5), 0x3C);    // between 1.0 and 1.25 (0x3D)
  EXPECT_EQ(float_to_fp8(1.375f, e5), 0x3E);    // between 1.25 (odd) and 1.5 (0x3E)
  EXPECT_EQ(float_to_fp8(53248.0f, e5), 0x7A);  // between 49152 (0x7A) and 57344 (0x7B)
}

TEST(Fp8Encode, Subnormals) {
  for (const Spec& s : kSpecs) {
    SCOPED_TRACE(s.name);
    const float tiny = std::ldexp(1.0f, 1 - s.bias - s.m_bits);  // smallest subnormal
    const Fp8Format f = s.format;
    for (int k = 1; k < (1 << s.m_bits); ++k) EXPECT_EQ(float_to_fp8(k * tiny, f), k);
    EXPECT_EQ(float_to_fp8(tiny, f), 0x01);
    EXPECT_EQ(float_to_fp8(tiny / 2, f), 0x00);  // tie between 0 and the smallest: 0 is even
    EXPECT_EQ(float_to_fp8(-tiny / 2, f), 0x80);
    EXPECT_EQ(float_to_fp8(up(tiny / 2), f), 0x01);
    EXPECT_EQ(float_to_fp8(down(tiny / 2), f), 0x00);
    EXPECT_EQ(float_to_fp8(tiny / 4, f), 0x00);
    EXPECT_EQ(float_to_fp8(1.5f * tiny, f), 0x02);  // tie 1|2 → 2
    EXPECT_EQ(float_to_fp8(2.5f * tiny, f), 0x02);  // tie 2|3 → 2
    const int top = (1 << s.m_bits) - 1;            // largest subnormal: its tie with the smallest normal → normal
    EXPECT_EQ(float_to_fp8((top + 0.5f) * tiny, f), top + 1);
    EXPECT_EQ(float_to_fp8(down((top + 0.5f) * tiny), f), top);
    EXPECT_EQ(float_to_fp8(std::numeric_limits<float>::denorm_min(), f), 0x00);
    EXPECT_EQ(float_to_fp8(-std::numeric_limits<float>::denorm_min(), f), 0x80);
    EXPECT_EQ(float_to_fp8(std::numeric_limits<float>::min(), f), 0x00);  // float's smallest normal, 2^-126
  }
}

TEST(Fp8Encode, SaturationAndOverflow) {
  struct Case {
    Fp8Format f;
    float x;
    int saturate, ieee;
  };
  const float fmax = std::numeric_limits<float>::max();
  const Fp8Format e4 = Fp8Format::e4m3, e5 = Fp8Format::e5m2;
  const Case cases[] = {
      {e4, 448.0f, 0x7E, 0x7E},      {e4, 449.0f, 0x7E, 0x7E},   {e4, down(464.0f), 0x7E, 0x7E},
      {e4, 464.0f, 0x7E, 0x7E},  // tie 448 | (480): 448's mantissa 110 is even, so it stays finite
      {e4, up(464.0f), 0x7E, 0x7F},  {e4, 480.0f, 0x7E, 0x7F},   {e4, 1e9f, 0x7E, 0x7F},
      {e4, fmax, 0x7E, 0x7F},        {e4, kInfF, 0x7E, 0x7F},    {e4, -464.0f, 0xFE, 0xFE},
      {e4, -up(464.0f), 0xFE, 0xFF}, {e4, -kInfF, 0xFE, 0xFF},   {e5, 57344.0f, 0x7B, 0x7B},
      {e5, down(61440.0f), 0x7B, 0x7B},
      {e5, 61440.0f, 0x7B, 0x7C},  // tie 57344 | (65536): the even one is 2^16, past the range: overflow
      {e5, 65536.0f, 0x7B, 0x7C},    {e5, fmax, 0x7B, 0x7C},     {e5, kInfF, 0x7B, 0x7C},
      {e5, -61440.0f, 0xFB, 0xFC},   {e5, -kInfF, 0xFB, 0xFC},   {e5, -down(61440.0f), 0xFB, 0xFB},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_fp8(c.x, c.f, Fp8Overflow::saturate), c.saturate) << c.x;
    EXPECT_EQ(float_to_fp8(c.x, c.f, Fp8Overflow::ieee), c.ieee) << c.x;
  }
  EXPECT_EQ(float_to_fp8(1000.0f, e4), 0x7E);  // saturate is the default, as quantization uses it
}

TEST(Fp8Encode, ZerosAndNaN) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN(), float_of(0x7F800001u), float_of(0xFFFFFFFFu),
                        float_of(0x7FBFFFFFu)};
  for (const Spec& s : kSpecs)
    for (Fp8Overflow mode : kModes) {
      EXPECT_EQ(float_to_fp8(0.0f, s.format, mode), 0x00);
      EXPECT_EQ(float_to_fp8(-0.0f, s.format, mode), 0x80);
      for (float n : nans) EXPECT_EQ(float_to_fp8(n, s.format, mode), 0x7F) << s.name << " " << bits_of(n);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Encode: sweeps

// Every float whose bit pattern is a multiple of 97 over |x| in [2^-20, 2^17] (the whole FP8 range and its
// rounding boundaries), both signs; every 9973rd pattern over all 2^32 (huge, tiny, inf, NaN); and every code's
// value and midpoint with the floats either side.
std::vector<float> sweep_inputs() {
  std::vector<float> xs;
  const std::uint32_t lo = bits_of(0x1p-20f), hi = bits_of(0x1p17f);
  for (std::uint32_t u = (lo + 96) / 97 * 97; u <= hi; u += 97) {
    xs.push_back(float_of(u));
    xs.push_back(float_of(u | 0x80000000u));
  }
  for (std::uint64_t u = 0; u <= 0xFFFFFFFFull; u += 9973) xs.push_back(float_of(static_cast<std::uint32_t>(u)));
  for (const Spec& s : kSpecs)
    for (int c = 0; c < 256; ++c) {
      const double v = definition_value(s, c), next = definition_value(s, (c & 0x80) | ((c & 0x7F) + 1));
      if (std::isnan(v)) continue;
      for (float x : {static_cast<float>(v), static_cast<float>((v + next) / 2)})
        if (!std::isnan(x)) xs.insert(xs.end(), {x, up(x), down(x)});
    }
  return xs;
}

void expect_same_encoding(const char* what, const std::function<std::uint8_t(float, const Spec&, Fp8Overflow)>& ref) {
  static const std::vector<float> xs = sweep_inputs();
  for (const Spec& s : kSpecs)
    for (Fp8Overflow mode : kModes) {
      long mismatches = 0;
      for (float x : xs) {
        const int got = float_to_fp8(x, s.format, mode), want = ref(x, s, mode);
        if (got == want) continue;
        if (++mismatches <= 10)
          ADD_FAILURE() << what << " " << s.name << (mode == Fp8Overflow::saturate ? " saturate" : " ieee")
                        << ": x=" << std::hexfloat << x << " gave " << hex(got) << ", want " << hex(want);
      }
      EXPECT_EQ(mismatches, 0) << what << " " << s.name << " over " << xs.size() << " floats";
    }
}

TEST(Fp8Encode, MatchesRuleOracleOnSweep) {
  expect_same_encoding("oracle", [](float x, const Spec& s, Fp8Overflow mode) { return oracle_encode(s, x, mode); });
}

#if ATTNLAB_WITH_CUDA
TEST(Fp8Encode, MatchesCudaConversionOnSweep) {
  expect_same_encoding("cuda_fp8.h", [](float x, const Spec& s, Fp8Overflow mode) {
    return static_cast<std::uint8_t>(
        __nv_cvt_float_to_fp8(x, mode == Fp8Overflow::saturate ? __NV_SATFINITE : __NV_NOSAT,
                              s.format == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2));
  });
}
#else
TEST(Fp8Encode, MatchesCudaConversionOnSweep) { GTEST_SKIP() << "built without CUDA: no cuda_fp8.h to compare with"; }
#endif

// ---------------------------------------------------------------------------------------------------------------
// DelayedScaling

using attnlab::core::AmaxAlgorithm;
using attnlab::core::DelayedScalingState;
using attnlab::core::DelayedScalingUpdate;
using attnlab::core::Fp8RecipeFormat;
using attnlab::core::Fp8Role;
using attnlab::core::RecipeParams;
using attnlab::core::delayed_scaling_step;

RecipeParams recipe(std::size_t len, AmaxAlgorithm algo, int margin = 0,
                    DelayedScalingUpdate update = DelayedScalingUpdate::reference) {
  RecipeParams p;
  p.history_len = len;
  p.algorithm = algo;
  p.margin = margin;
  p.format = Fp8RecipeFormat::hybrid;
  p.update = update;
  return p;
}

// Runs the steps from the initial state and checks the scale and the history after each one.
struct Step {
  float amax;
  float scale;
  std::vector<float> history;
};
void run_steps(const RecipeParams& p, Fp8Role role, const std::vector<Step>& steps, DelayedScalingState state) {
  for (std::size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i) + ", amax " + std::to_string(steps[i].amax));
    state = delayed_scaling_step(p, role, state, steps[i].amax);
    EXPECT_EQ(state.scale, steps[i].scale);
    EXPECT_EQ(state.scale_inv, 1.0f / steps[i].scale);
    ASSERT_EQ(state.amax_history.size(), steps[i].history.size());
    for (std::size_t j = 0; j < state.amax_history.size(); ++j)
      EXPECT_EQ(bits_of(state.amax_history[j]), bits_of(steps[i].history[j])) << "history[" << j << "]";
  }
}
DelayedScalingState start(const RecipeParams& p) { return attnlab::core::initial_delayed_scaling_state(p); }

TEST(DelayedScaling, DefaultsAreTransformerEngines) {
  const RecipeParams p;
  EXPECT_EQ(p.margin, 0);
  EXPECT_EQ(p.history_len, 1024u);
  EXPECT_EQ(p.algorithm, AmaxAlgorithm::max);
  EXPECT_EQ(p.format, Fp8RecipeFormat::hybrid);
  const DelayedScalingState s = start(p);
  EXPECT_EQ(s.amax_history, std::vector<float>(1024, 0.0f));
  EXPECT_EQ(s.scale, 1.0f);
  EXPECT_EQ(s.scale_inv, 1.0f);
}

// L = 4, by hand: slot 0 is cleared after each step, slots 1..3 hold the last three amaxes, oldest first; "max"
// scales with the maximum of those three and the new amax, so the 8 of step 1 rules steps 1–4 and is gone at 5.
TEST(DelayedScaling, HistoryOfFourMax) {
  run_steps(recipe(4, AmaxAlgorithm::max), Fp8Role::forward,
            {{2, 224, {0, 0, 0, 2}},  // 448 / 2
             {8, 56, {0, 0, 2, 8}},
             {4, 56, {0, 2, 8, 4}},
             {1, 56, {0, 8, 4, 1}},
             {1, 56, {0, 4, 1, 1}},
             {1, 112, {0, 1, 1, 1}},
             {0.5f, 448, {0, 1, 1, 0.5f}}},
            start(recipe(4, AmaxAlgorithm::max)));
}

TEST(DelayedScaling, HistoryOfFourMostRecent) {
  run_steps(recipe(4, AmaxAlgorithm::most_recent), Fp8Role::forward,
            {{2, 224, {0, 0, 0, 2}},
             {8, 56, {0, 0, 2, 8}},
             {4, 112, {0, 2, 8, 4}},
             {1, 448, {0, 8, 4, 1}},
             {0.5f, 896, {0, 4, 1, 0.5f}}},
            start(recipe(4, AmaxAlgorithm::most_recent)));
}

TEST(DelayedScaling, MarginTwo) {
  const RecipeParams p = recipe(4, AmaxAlgorithm::max, 2);
  run_steps(p, Fp8Role::forward,
            {{2, 56, {0, 0, 0, 2}},  // (448 / 2) / 2^2
             {8, 14, {0, 0, 2, 8}},
             {1, 14, {0, 2, 8, 1}},
             {1, 14, {0, 8, 1, 1}},
             {1, 14, {0, 1, 1, 1}},  // the 8 is still among the four
             {1, 112, {0, 1, 1, 1}}},
            start(p));
}

TEST(DelayedScaling, HistoryOfOne) {
  for (AmaxAlgorithm algo : {AmaxAlgorithm::max, AmaxAlgorithm::most_recent}) {
    const RecipeParams p = recipe(1, algo);
    run_steps(p, Fp8Role::forward, {{2, 224, {0}}, {8, 56, {0}}, {4, 112, {0}}, {0, 112, {0}}, {0.25f, 1792, {0}}},
              start(p));
  }
}

// HYBRID quantizes gradients to e5m2, so their scale aims at 57344; an all-e4m3 recipe uses 448 for both.
TEST(DelayedScaling, HybridUsesE5m2ForGradients) {
  RecipeParams p = recipe(1, AmaxAlgorithm::max);
  EXPECT_EQ(delayed_scaling_step(p, Fp8Role::backward, start(p), 2).scale, 28672.0f);
  EXPECT_EQ(delayed_scaling_step(p, Fp8Role::forward, start(p), 2).scale, 224.0f);
  p.format = Fp8RecipeFormat::e4m3;
  EXPECT_EQ(delayed_scaling_step(p, Fp8Role::backward, start(p), 2).scale, 224.0f);
  p.format = Fp8RecipeFormat::hybrid;
  p.margin = 2;
  EXPECT_EQ(delayed_scaling_step(p, Fp8Role::backward, start(p), 2).scale, 7168.0f);
}

// amax 0, +inf or NaN: the previous scale is kept; the history still rolls.
TEST(DelayedScaling, ZeroInfNaNKeepThePreviousScale) {
  const RecipeParams recent = recipe(4, AmaxAlgorithm::most_recent);
  const DelayedScalingState s{{0, 2, 8, 4}, 7, 1.0f / 7};
  run_steps(recent, Fp8Role::forward, {{0, 7, {0, 8, 4, 0}}}, s);
  run_steps(recent, Fp8Role::forward, {{kInfF, 7, {0, 8, 4, kInfF}}}, s);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const DelayedScalingState after_nan = delayed_scaling_step(recent, Fp8Role::forward, s, nan);
  EXPECT_EQ(after_nan.scale, 7.0f);
  EXPECT_TRUE(std::isnan(after_nan.amax_history[3]));

  // With "max" the history still holds 8, so a zero step is not a zero amax.
  run_steps(recipe(4, AmaxAlgorithm::max), Fp8Role::forward, {{0, 56, {0, 8, 4, 0}}}, s);
  // From a zero history, a zero step keeps the initial scale 1.
  run_steps(recipe(4, AmaxAlgorithm::max), Fp8Role::forward, {{0, 1, {0, 0, 0, 0}}}, start(recipe(4, AmaxAlgorithm::max)));

  // An inf in the history freezes the "max" scale until it leaves, L steps later.
  const RecipeParams mx = recipe(4, AmaxAlgorithm::max);
  run_steps(mx, Fp8Role::forward,
            {{2, 224, {0, 0, 0, 2}},
             {kInfF, 224, {0, 0, 2, kInfF}},
             {1, 224, {0, 2, kInfF, 1}},
             {1, 224, {0, kInfF, 1, 1}},
             {1, 224, {0, 1, 1, 1}},
             {1, 448, {0, 1, 1, 1}}},
            start(mx));
}

// A NaN in the history: the reference "max" is NaN (previous scale kept); the fused kernel's fmaxf skips it.
TEST(DelayedScaling, NaNInHistoryReferenceVersusFused) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const DelayedScalingState s{{0, 0, 0, 2}, 7, 1.0f / 7};
  const RecipeParams ref = recipe(4, AmaxAlgorithm::max);
  const RecipeParams fused = recipe(4, AmaxAlgorithm::max, 0, DelayedScalingUpdate::fused);
  EXPECT_EQ(delayed_scaling_step(ref, Fp8Role::forward, s, nan).scale, 7.0f);
  EXPECT_EQ(delayed_scaling_step(fused, Fp8Role::forward, s, nan).scale, 224.0f);
  EXPECT_TRUE(std::isnan(delayed_scaling_step(fused, Fp8Role::forward, s, nan).amax_history[3]));
  for (const RecipeParams& p : {recipe(4, AmaxAlgorithm::most_recent),
                                recipe(4, AmaxAlgorithm::most_recent, 0, DelayedScalingUpdate::fused)})
    EXPECT_EQ(delayed_scaling_step(p, Fp8Role::forward, s, nan).scale, 7.0f);
}

// The fused kernel leaves a tensor whose new amax is 0 as it is; the reference rolls its history.
TEST(DelayedScaling, FusedSkipsZeroAmaxSteps) {
  const DelayedScalingState s{{0, 0, 2, 8}, 5, 1.0f / 5};
  run_steps(recipe(4, AmaxAlgorithm::max, 0, DelayedScalingUpdate::fused), Fp8Role::forward, {{0, 5, {0, 0, 2, 8}}},
            s);
  run_steps(recipe(4, AmaxAlgorithm::max), Fp8Role::forward, {{0, 56, {0, 2, 8, 0}}}, s);
  // Non-zero steps agree between the two.
  run_steps(recipe(4, AmaxAlgorithm::max, 0, DelayedScalingUpdate::fused), Fp8Role::forward,
            {{1, 56, {0, 2, 8, 1}}, {1, 56, {0, 8, 1, 1}}, {1, 56, {0, 1, 1, 1}}, {1, 448, {0, 1, 1, 1}}}, s);
}

// A tiny amax overflows the scale: FLT_MAX instead of inf. The two forms differ where fp8_max / amax overflows
// but (fp8_max · 2^-margin) / amax does not.
TEST(DelayedScaling, TinyAmaxGivesLargestFloat) {
  const float fmax = std::numeric_limits<float>::max();
  for (DelayedScalingUpdate u : {DelayedScalingUpdate::reference, DelayedScalingUpdate::fused}) {
    const RecipeParams p = recipe(1, AmaxAlgorithm::max, 0, u);
    const DelayedScalingState s = delayed_scaling_step(p, Fp8Role::forward, start(p), 1e-38f);
    EXPECT_EQ(s.scale, fmax);
    EXPECT_EQ(s.scale_inv, 1.0f / fmax);
  }
  const float amax = 1e-36f;  // 448 / amax ≈ 4.5e38 > FLT_MAX; 112 / amax ≈ 1.1e38 is finite
  const RecipeParams ref = recipe(1, AmaxAlgorithm::max, 2);
  const RecipeParams fused = recipe(1, AmaxAlgorithm::max, 2, DelayedScalingUpdate::fused);
  EXPECT_EQ(delayed_scaling_step(ref, Fp8Role::forward, start(ref), amax).scale, fmax);
  EXPECT_EQ(delayed_scaling_step(fused, Fp8Role::forward, start(fused), amax).scale, 112.0f / amax);
}

// The default 1024-long window over a falling amax: the scale of step n uses the amax of step max(0, n − 1023).
TEST(DelayedScaling, DefaultLengthWindow) {
  RecipeParams p;
  DelayedScalingState s = start(p);
  for (int n = 0; n < 1500; ++n) {
    s = delayed_scaling_step(p, Fp8Role::forward, s, static_cast<float>(4096 - n));
    const float oldest_in_window = static_cast<float>(4096 - std::max(0, n - 1023));
    ASSERT_EQ(s.scale, 448.0f / oldest_in_window) << "step " << n;
    ASSERT_EQ(s.amax_history[1023], static_cast<float>(4096 - n));
    ASSERT_EQ(s.amax_history[0], 0.0f);
  }
}

TEST(DelayedScaling, RejectsAHistoryOfTheWrongLength) {
  EXPECT_THROW(delayed_scaling_step(recipe(4, AmaxAlgorithm::max), Fp8Role::forward, std::vector<float>(3), 1, 1),
               std::invalid_argument);
  EXPECT_THROW(delayed_scaling_step(recipe(0, AmaxAlgorithm::max), Fp8Role::forward, std::vector<float>(), 1, 1),
               std::invalid_argument);
}

}  // namespace
