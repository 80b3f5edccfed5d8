// The two OCP FP8 formats (docs/design.md §7), stored as one byte: exact decoding, and encoding with
// round-to-nearest-even, as cuDNN's FP8 SDPA and TransformerEngine quantize. Header-only and usable from CUDA
// kernels, so a GPU path and its CPU reference round through the very same code.
//
//   e4m3 ("fn"): 1 sign, 4 exponent, 3 mantissa bits, bias 7. No infinities: S.1111.111 is NaN, so the top
//                binade keeps 7 finite values and the largest finite is 1.75 · 2^8 = 448.
//   e5m2:        1 sign, 5 exponent, 2 mantissa bits, bias 15, IEEE-like: exponent 11111 with mantissa 0 is ±inf,
//                with a non-zero mantissa NaN; the largest finite is 1.75 · 2^15 = 57344.
// Both have subnormals (exponent 0): m · 2^(1 − bias − M), M the mantissa width; the smallest is 2^-9 (e4m3) and
// 2^-16 (e5m2).
#pragma once

#include <cstdint>
#include <cstring>

#ifndef ATTNLAB_HOST_DEVICE  // the same definition as core/mask.h: an identical redefinition is allowed
#if defined(__CUDACC__)
#define ATTNLAB_HOST_DEVICE __host__ __device__
#else
#define ATTNLAB_HOST_DEVICE
#endif
#endif

namespace attnlab::core {

enum class Fp8Format : std::uint8_t { e4m3, e5m2 };

// What a finite value beyond the largest finite one (after rounding), or ±inf, becomes.
//   saturate: ±max finite, the way cuDNN and TransformerEngine quantize (__NV_SATFINITE; PTX cvt .satfinite).
//             A scale that is one step late must not turn a slightly larger tensor into inf/NaN.
//   ieee:     what IEEE rounding gives with the format's specials (__NV_NOSAT): ±inf for e5m2; NaN for e4m3,
//             which has no infinity.
// NaN becomes NaN in both modes.
enum class Fp8Overflow : std::uint8_t { saturate, ieee };

ATTNLAB_HOST_DEVICE constexpr int fp8_mantissa_bits(Fp8Format f) { return f == Fp8Format::e4m3 ? 3 : 2; }
ATTNLAB_HOST_DEVICE constexpr int fp8_exponent_bias(Fp8Format f) { return f == Fp8Format::e4m3 ? 7 : 15; }

// The largest finite value and its code (sign bit clear): 0.1111.110 (e4m3, because 0.1111.111 is NaN) and
// 0.11110.11 (e5m2, because exponent 11111 holds the specials).
ATTNLAB_HOST_DEVICE constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::e4m3 ? 448.0f : 57344.0f; }
ATTNLAB_HOST_DEVICE constexpr std::uint8_t fp8_max_code(Fp8Format f) { return f == Fp8Format::e4m3 ? 0x7E : 0x7B; }

// The NaN the encoder writes, in both formats: all ones below the sign, sign clear. Like the CUDA conversion, the
// input NaN's sign and payload are not kept (no attention math depends on them).
inline constexpr std::uint8_t fp8_nan_code = 0x7F;
inline constexpr std::uint8_t fp8_e5m2_inf_code = 0x7C;  // +inf; 0xFC is −inf

ATTNLAB_HOST_DEVICE constexpr bool fp8_is_nan(std::uint8_t code, Fp8Format f) {
  return f == Fp8Format::e4m3 ? (code & 0x7F) == 0x7F : (code & 0x7F) > fp8_e5m2_inf_code;
}

namespace fp8_detail {

ATTNLAB_HOST_DEVICE inline std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

ATTNLAB_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// x >> shift rounded to nearest, ties to even, in one addition: adding half − 1 carries past the cut exactly when
// the dropped bits exceed half; the kept LSB adds the last 1 only on a tie with an odd result, so a tie goes up
// only to an even value. A carry that ripples into the bits above is the round-up to the next power of two.
ATTNLAB_HOST_DEVICE constexpr std::uint32_t shift_right_rne(std::uint32_t x, int shift) {
  const std::uint32_t half = std::uint32_t{1} << (shift - 1);
  return (x + (half - 1) + ((x >> shift) & 1u)) >> shift;
}

}  // namespace fp8_detail

// float → FP8, round to nearest, ties to even, with subnormals; overflow as `overflow` says.
ATTNLAB_HOST_DEVICE inline std::uint8_t float_to_fp8(float x, Fp8Format f,
                                                     Fp8Overflow overflow = Fp8Overflow::saturate) {
  const std::uint32_t bits = fp8_detail::float_bits(x);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return fp8_nan_code;

  const int m_bits = fp8_mantissa_bits(f);
  const int bias = fp8_exponent_bias(f);
  const int biased_exp = static_cast<int>(mag >> 23);  // float's biased exponent: 255 is inf, 0 zero/subnormal
  const int min_normal_biased = 127 + (1 - bias);      // the FP8 smallest normal, 2^(1 − bias), in float's bias

  std::uint32_t code;  // the magnitude's code before the overflow check; may exceed 8 bits
  if (biased_exp >= min_normal_biased) {
    // A normal FP8 value: the float's bits already are (exponent | mantissa); cut the mantissa to M bits and
    // re-bias the exponent. A round-up carry moves to the next binade, or past the largest finite (checked below).
    code = fp8_detail::shift_right_rne(mag, 23 - m_bits) -
           (static_cast<std::uint32_t>(127 - bias) << m_bits);
  } else if (biased_exp == 0) {
    code = 0;  // ±0 and float subnormals (below 2^-126, far under half the smallest FP8 subnormal)
  } else {
    // Subnormal in FP8: the code is |x| / 2^(1 − bias − M), rounded; the full significand 1.mant (24 bits) is
    // shifted right by 23 − (e − (1 − bias − M)), at least 24 − M. Code 2^M is the smallest normal, also right.
    const std::uint32_t significand = (mag & 0x7FFFFFu) | 0x800000u;
    const int shift = 23 - (biased_exp - 127) + (1 - bias - m_bits);
    // From 25 on, |x| < 2^24 · 2^-25 units, under half the smallest subnormal: 0 (exactly half, shift 24, is a tie
    // the rounding sends to the even 0). The cut also keeps the shift below 32.
    code = shift >= 25 ? 0u : fp8_detail::shift_right_rne(significand, shift);
  }

  if (code > fp8_max_code(f)) {  // also ±inf, whose exponent field lands far above
    if (overflow == Fp8Overflow::saturate) return static_cast<std::uint8_t>(sign | fp8_max_code(f));
    return static_cast<std::uint8_t>(sign | (f == Fp8Format::e5m2 ? fp8_e5m2_inf_code : fp8_nan_code));
  }
  return static_cast<std::uint8_t>(sign | code);
}

// FP8 → float, exact: every FP8 value is a float (fewer mantissa bits, narrower exponent range).
ATTNLAB_HOST_DEVICE inline float fp8_to_float(std::uint8_t code, Fp8Format f) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const int m_bits = fp8_mantissa_bits(f);
  const int bias = fp8_exponent_bias(f);
  const std::uint32_t mag = code & 0x7Fu;
  const std::uint32_t exp_field = mag >> m_bits;
  const std::uint32_t mantissa = mag & ((1u << m_bits) - 1u);

  if (fp8_is_nan(code, f)) return fp8_detail::bits_float(sign | 0x7FC00000u);  // quiet NaN, sign kept
  if (f == Fp8Format::e5m2 && mag == fp8_e5m2_inf_code) return fp8_detail::bits_float(sign | 0x7F800000u);
  if (exp_field == 0) {
    // Subnormal (or zero): mantissa · 2^(1 − bias − M); a small integer times a power of two, exact in float.
    const float unit = f == Fp8Format::e4m3 ? 0x1p-9f : 0x1p-16f;
    const float v = static_cast<float>(mantissa) * unit;
    return sign ? -v : v;  // −0 stays −0
  }
  // Normal: re-bias the exponent to float's 127 and left-align the mantissa in float's 23 bits.
  return fp8_detail::bits_float(sign | ((exp_field + 127u - static_cast<std::uint32_t>(bias)) << 23) |
                                (mantissa << (23 - m_bits)));
}

}  // namespace attnlab::core
