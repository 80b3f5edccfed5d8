#include "tensors.h"

#include <bit>
#include <cmath>
#include <cstring>
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
