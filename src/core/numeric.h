// Conversions between f32 and the 16-bit float formats (round to nearest even), and typed element access through
// a TensorView. Host code only: CPU paths and test references use these.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "attnlab/attention.h"

namespace attnlab::core {

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(std::uint16_t h) { return float_of(std::uint32_t(h) << 16); }

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40);  // quiet NaN, keep sign
  u += 0x7fffu + ((u >> 16) & 1u);                                             // round to nearest even
  return std::uint16_t(u >> 16);
}

inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return float_of(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {                                                     // zero / subnormal: man · 2^-24
    const float mag = std::ldexp(float(man), -24);
    return sign ? -mag : mag;
  }
  return float_of(sign | ((exp + 112u) << 23) | (man << 13));
}

inline std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return std::uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // rounds to ≥ 65520: inf
  if (abs < 0x38800000u) {                                       // below the smallest normal (2^-14): subnormal
    // value / 2^-24 rounded to nearest even gives the subnormal mantissa (0 ... 1024; 1024 is the smallest normal).
    const float scaled = float_of(abs) * 16777216.0f;  // exact: power of two
    return std::uint16_t(sign | std::uint16_t(std::nearbyint(scaled)));
  }
  std::uint32_t r = abs + 0x0fffu + ((abs >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  r -= 0x38000000u;                                      // rebias exponent 127 → 15
  return std::uint16_t(sign | std::uint16_t(r >> 13));
}

// Reads element `offset` (in elements) of a buffer of dtype f32/f16/bf16 as float.
inline float load_float(const void* base, DType dtype, std::int64_t offset) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[offset];
    case DType::f16: return f16_to_float(static_cast<const std::uint16_t*>(base)[offset]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[offset]);
    case DType::u8: return static_cast<const std::uint8_t*>(base)[offset] ? 1.0f : 0.0f;
    case DType::i32: return float(static_cast<const std::int32_t*>(base)[offset]);
    default: return NAN;
  }
}

// Writes `value` rounded to dtype (f32/f16/bf16) at element `offset`.
inline void store_float(void* base, DType dtype, std::int64_t offset, float value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[offset] = value; break;
    case DType::f16: static_cast<std::uint16_t*>(base)[offset] = float_to_f16(value); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[offset] = float_to_bf16(value); break;
    default: break;
  }
}

// Rounds a float to the precision of dtype and back (identity for f32).
inline float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::f16: return f16_to_float(float_to_f16(value));
    case DType::bf16: return bf16_to_float(float_to_bf16(value));
    default: return value;
  }
}

// Reads `count` contiguous elements starting at element `offset` as floats.
inline void load_row(const void* base, DType dtype, std::int64_t offset, std::int64_t count, float* out) {
  if (dtype == DType::f32) {
    std::memcpy(out, static_cast<const float*>(base) + offset, std::size_t(count) * sizeof(float));
    return;
  }
  const auto* h = static_cast<const std::uint16_t*>(base) + offset;
  if (dtype == DType::bf16)
    for (std::int64_t i = 0; i < count; ++i) out[i] = bf16_to_float(h[i]);
  else
    for (std::int64_t i = 0; i < count; ++i) out[i] = f16_to_float(h[i]);
}

// Writes `count` floats, rounded to dtype, as contiguous elements starting at element `offset`.
inline void store_row(void* base, DType dtype, std::int64_t offset, std::int64_t count, const float* in) {
  if (dtype == DType::f32) {
    std::memcpy(static_cast<float*>(base) + offset, in, std::size_t(count) * sizeof(float));
    return;
  }
  auto* h = static_cast<std::uint16_t*>(base) + offset;
  if (dtype == DType::bf16)
    for (std::int64_t i = 0; i < count; ++i) h[i] = float_to_bf16(in[i]);
  else
    for (std::int64_t i = 0; i < count; ++i) h[i] = float_to_f16(in[i]);
}

// Element offset of index (i0, i1, i2, i3) in a view (unused trailing indices are 0).
inline std::int64_t offset_of(const TensorView& t, std::int64_t i0, std::int64_t i1 = 0, std::int64_t i2 = 0,
                              std::int64_t i3 = 0) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3];
}

}  // namespace attnlab::core
