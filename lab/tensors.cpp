#include "tensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include <fmt/format.h>

namespace lab {

std::string format_shape(const Shape& shape) {
  // NumPy's spelling, so the tables read like the codelab's.
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

std::int64_t element_count(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n))
      throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                           fmt::format("shape {} has more elements than 64 bits can count", format_shape(shape)));
  return n;
}

// ---- dtype conversion -------------------------------------------------------------------------------------------

std::uint16_t f32_to_bf16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if (std::isnan(x)) return std::uint16_t((u >> 16) | 0x40);  // keep it a (quiet) NaN after truncation
  const std::uint32_t rounding = 0x7fff + ((u >> 16) & 1);     // round to nearest, ties to even
  return std::uint16_t((u + rounding) >> 16);
}

float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

std::uint16_t f32_to_f16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (u >> 16) & 0x8000;
  const std::uint32_t abs = u & 0x7fffffff;
  if (abs >= 0x7f800000) return std::uint16_t(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));  // inf / NaN
  if (abs >= 0x477ff000) return std::uint16_t(sign | 0x7c00);  // rounds past 65504: overflow to inf
  if (abs < 0x38800000) {
    // Subnormal half (or zero): scale into the 10-bit mantissa with round-to-nearest-even.
    if (abs < 0x33000000) return std::uint16_t(sign);  // below half the smallest subnormal
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const std::uint32_t shift = 126 - exp;  // value = mant · 2^(exp - 150); in units of 2^-24: mant >> (126 - exp)
    std::uint32_t half = mant >> shift;
    const std::uint32_t rest = mant & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return std::uint16_t(sign | half);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  std::uint32_t h = ((abs - 0x38000000) >> 13);
  const std::uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is the correct result
  return std::uint16_t(sign | h);
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1f;
  const std::uint32_t mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant · 2^-24, exact in f32
    const float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000 | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

namespace {
// An FP8 format as the encoder needs it: the mantissa bits, the exponent bias, the largest finite value and its
// code, and the code of NaN (e4m3 has no infinities; e5m2's are never produced: quantization saturates).
struct Fp8Format {
  int mant_bits;
  int bias;
  double max_finite;
  std::uint8_t max_code, nan_code;
};
constexpr Fp8Format kE4m3{3, 7, 448.0, 0x7e, 0x7f};
constexpr Fp8Format kE5m2{2, 15, 57344.0, 0x7b, 0x7f};

std::uint8_t encode_fp8(float x, const Fp8Format& f) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return f.nan_code;
  const double a = std::fabs(double(x));
  if (a >= f.max_finite) return sign | f.max_code;  // saturate, ±inf included
  if (a == 0.0) return sign;
  const int min_exp = 1 - f.bias;  // the smallest normal's exponent; subnormals share its spacing
  const int e = std::max(std::ilogb(a), min_exp);
  // a / step is exact (a power-of-two scaling of a float); nearbyint rounds ties to even in the default mode.
  const double step = std::ldexp(1.0, e - f.mant_bits);
  const double r = std::nearbyint(a / step) * step;
  if (r > f.max_finite) return sign | f.max_code;
  if (r == 0.0) return sign;
  const int re = std::ilogb(r);  // the rounding may have carried into the next binade
  if (re < min_exp) return sign | std::uint8_t(std::lround(r / std::ldexp(1.0, min_exp - f.mant_bits)));
  const long mant = std::lround((r / std::ldexp(1.0, re) - 1.0) * double(1 << f.mant_bits));
  return sign | std::uint8_t(((re + f.bias) << f.mant_bits) | int(mant));
}
}  // namespace

std::uint8_t f32_to_e4m3(float x) { return encode_fp8(x, kE4m3); }
std::uint8_t f32_to_e5m2(float x) { return encode_fp8(x, kE5m2); }

float e4m3_to_f32(std::uint8_t b) {
  const bool negative = (b & 0x80) != 0;
  const int exp = (b >> 3) & 0xf, mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float v = exp == 0 ? std::ldexp(float(mant), -9) : std::ldexp(float(8 + mant), exp - 10);
  return negative ? -v : v;
}

// e5m2 is the upper byte of an f16 (same exponent, two of its mantissa bits).
float e5m2_to_f32(std::uint8_t b) { return f16_to_f32(std::uint16_t(std::uint16_t(b) << 8)); }

bool is_fp8(attnlab::DType dtype) { return dtype == attnlab::DType::e4m3 || dtype == attnlab::DType::e5m2; }

std::vector<std::byte> encode(const std::vector<float>& values, attnlab::DType dtype) {
  std::vector<std::byte> out(values.size() * attnlab::size_of(dtype));
  switch (dtype) {
    case attnlab::DType::f32:
      std::memcpy(out.data(), values.data(), out.size());
      break;
    case attnlab::DType::f16:
    case attnlab::DType::bf16: {
      const bool is_f16 = dtype == attnlab::DType::f16;
      for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint16_t h = is_f16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    }
    case attnlab::DType::e4m3:
    case attnlab::DType::e5m2: {
      const bool e4 = dtype == attnlab::DType::e4m3;
      for (std::size_t i = 0; i < values.size(); ++i)
        out[i] = std::byte(e4 ? f32_to_e4m3(values[i]) : f32_to_e5m2(values[i]));
      break;
    }
    default:
      throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                           fmt::format("the lab cannot make {} tensors yet", attnlab::to_string(dtype)));
  }
  return out;
}

std::vector<float> decode(const void* bytes, std::int64_t count, attnlab::DType dtype) {
  std::vector<float> out(static_cast<std::size_t>(count));
  const auto* p = static_cast<const std::byte*>(bytes);
  switch (dtype) {
    case attnlab::DType::f32:
      std::memcpy(out.data(), p, out.size() * sizeof(float));
      break;
    case attnlab::DType::f16:
    case attnlab::DType::bf16: {
      const bool is_f16 = dtype == attnlab::DType::f16;
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = is_f16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    }
    case attnlab::DType::e4m3:
    case attnlab::DType::e5m2: {
      const bool e4 = dtype == attnlab::DType::e4m3;
      for (std::size_t i = 0; i < out.size(); ++i) {
        const auto b = std::uint8_t(p[i]);
        out[i] = e4 ? e4m3_to_f32(b) : e5m2_to_f32(b);
      }
      break;
    }
    default:
      throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                           fmt::format("the lab cannot read {} tensors yet", attnlab::to_string(dtype)));
  }
  return out;
}

void round_to(std::vector<float>& values, attnlab::DType dtype) {
  if (dtype == attnlab::DType::f16)
    for (float& x : values) x = f16_to_f32(f32_to_f16(x));
  else if (dtype == attnlab::DType::bf16)
    for (float& x : values) x = bf16_to_f32(f32_to_bf16(x));
  else if (dtype == attnlab::DType::e4m3)
    for (float& x : values) x = e4m3_to_f32(f32_to_e4m3(x));
  else if (dtype == attnlab::DType::e5m2)
    for (float& x : values) x = e5m2_to_f32(f32_to_e5m2(x));
}

// ---- random inputs ----------------------------------------------------------------------------------------------

namespace {
// SplitMix64: tiny, fast, and good enough to feed Box–Muller for test inputs.
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// A uniform double in (0, 1]: never 0, so log() below stays finite.
double uniform01(std::uint64_t& state) { return double((splitmix64(state) >> 11) + 1) * 0x1.0p-53; }
}  // namespace

std::vector<float> random_normal(std::int64_t count, std::uint64_t seed, std::uint64_t stream) {
  std::vector<float> out(static_cast<std::size_t>(count));
  std::uint64_t state = seed;
  // Mix the stream in through the generator itself so that nearby (seed, stream) pairs do not overlap.
  state ^= splitmix64(state) + stream * 0xd1b54a32d192ed03ull;
  for (std::size_t i = 0; i < out.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform01(state)));
    const double theta = 2.0 * std::numbers::pi * uniform01(state);
    out[i] = float(r * std::cos(theta));
    if (i + 1 < out.size()) out[i + 1] = float(r * std::sin(theta));
  }
  return out;
}

}  // namespace lab
