// Host buffers, random inputs and dtype conversion for the CLI's own use.
//
// The lab keeps every tensor's values as f32 on the host ("master" copies) and converts to the dtype under test
// only when it hands bytes to the library. That way the comparison code works on one type, and inputs of every
// dtype are the same draws rounded differently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <attnlab/attention.h>

namespace lab {

// A shape of up to four dimensions, printed like the codelab prints NumPy shapes: "(4, 128, 8, 64)".
using Shape = std::vector<std::int64_t>;
std::string format_shape(const Shape& shape);
// The element count; throws attnlab::Error (invalid_argument) when it overflows 64 bits.
std::int64_t element_count(const Shape& shape);

// f32 <-> f16 / bf16, round to nearest even (what a GPU's conversion instructions do).
std::uint16_t f32_to_f16(float x);
float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_bf16(float x);
float bf16_to_f32(std::uint16_t h);
// f32 <-> FP8 (docs/design.md §7): round to nearest even, subnormals kept, saturating (beyond the largest finite
// value, and ±inf, become ±448 / ±57344; NaN stays NaN), as the library's quantize() rounds.
std::uint8_t f32_to_e4m3(float x);
float e4m3_to_f32(std::uint8_t b);
std::uint8_t f32_to_e5m2(float x);
float e5m2_to_f32(std::uint8_t b);
bool is_fp8(attnlab::DType dtype);

// Bytes of `values` in `dtype` (f32, f16, bf16, e4m3 or e5m2), densely packed; FP8 codes hold the values
// themselves (a quantization scale of 1).
std::vector<std::byte> encode(const std::vector<float>& values, attnlab::DType dtype);
// The inverse of encode(): `count` elements of `dtype` read back as f32.
std::vector<float> decode(const void* bytes, std::int64_t count, attnlab::DType dtype);
// Rounds values to what `dtype` can hold, in place (a no-op for f32).
void round_to(std::vector<float>& values, attnlab::DType dtype);

// Standard normal samples, like jax.random.normal: a fixed generator (SplitMix64 + Box–Muller) so the same seed
// gives the same inputs with every compiler and standard library. `stream` separates Q, K and V of one seed.
std::vector<float> random_normal(std::int64_t count, std::uint64_t seed, std::uint64_t stream);

}  // namespace lab
