// Test helpers that treat attnlab as a user would: host buffers of f32/f16/bf16/i32/u8 with our own conversions,
// strided and padded views, NaN poisoning, fresh random inputs, and the accuracy criterion of docs/design.md §2.
// Only include/attnlab/ headers are used; nothing here shares code with the library.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attnlab/attention.h"

namespace attnlab_test {

using attnlab::Device;
using attnlab::DType;
using attnlab::TensorView;

// ---------------------------------------------------------------------------------------------------------------
// 16-bit float conversions (round to nearest even), written independently of the library.
// ---------------------------------------------------------------------------------------------------------------
std::uint16_t to_f16_bits(double x);
double from_f16_bits(std::uint16_t h);
std::uint16_t to_bf16_bits(double x);
double from_bf16_bits(std::uint16_t h);
// x rounded to the precision of dtype (f32, f16, bf16), as a double.
double round_to(DType dtype, double x);
std::size_t elem_size(DType dtype);
const char* dtype_name(DType dtype);

// ---------------------------------------------------------------------------------------------------------------
// Random numbers: a fresh seed per test (printed on failure); ATTNLAB_TEST_SEED=<n> replays one.
// ---------------------------------------------------------------------------------------------------------------
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : seed_(seed), gen_(seed) {}
  std::uint64_t seed() const { return seed_; }
  // Normal-ish values in [-4, 4], never closer to zero than 1e-2.
  double value();
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }
  std::int64_t integer(std::int64_t lo, std::int64_t hi) {  // inclusive
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(gen_);
  }
  bool chance(double p) { return uniform(0.0, 1.0) < p; }

 private:
  std::uint64_t seed_;
  std::mt19937_64 gen_;
};

std::uint64_t fresh_seed();

// Declares `rng` with a fresh seed and records the seed in every failure message of the enclosing scope.
#define ATTNLAB_TEST_RNG(rng)                            \
  ::attnlab_test::Rng rng(::attnlab_test::fresh_seed()); \
  SCOPED_TRACE(::testing::Message() << "seed " << rng.seed() << " (replay with ATTNLAB_TEST_SEED)")

// ---------------------------------------------------------------------------------------------------------------
// Memory layouts and host tensors.
// ---------------------------------------------------------------------------------------------------------------
// How a tensor sits in memory: `order` lists dimensions from outermost to innermost (the last one must be the
// innermost so that the last dimension stays contiguous), `pad` adds unused elements to each dimension's extent,
// `offset` leaves unused elements before the first one. Dimensions ≥ the tensor's rank are ignored.
struct Layout {
  std::array<int, 4> order{0, 1, 2, 3};
  std::array<std::int64_t, 4> pad{0, 0, 0, 0};
  std::int64_t offset = 0;
};

// Dense row-major.
Layout dense();
// Row-major with padding around every dimension (a view into a larger buffer).
Layout padded();
// Dimensions 1 and 2 swapped in memory (BTNH tensors stored as BNTH), padded too.
Layout permuted12();
// Dimensions 0 and 1 swapped in memory (lse (B,N,T) stored as (N,B,T)), padded too.
Layout permuted01();

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<std::int64_t> shape, const Layout& layout = dense());

  bool defined() const { return rank_ > 0; }
  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const;
  const std::array<std::int64_t, 4>& strides() const { return strides_; }

  // A view of the tensor (an empty view when the tensor is not defined).
  TensorView view() const;
  void* data() const { return const_cast<std::byte*>(bytes_ptr()) + offset_bytes_; }
  // The whole allocation, padding included: [first, last).
  const std::byte* allocation_begin() const { return bytes_ptr(); }
  const std::byte* allocation_end() const { return bytes_ptr() + alloc_bytes_; }

  // Elements by logical row-major index (the index a dense tensor of this shape would use).
  double get(std::int64_t index) const;
  void set(std::int64_t index, double value);  // rounded to the dtype
  std::vector<double> values() const;
  void set_values(const std::vector<double>& values);
  void fill_random(Rng& rng, double scale = 1.0);

  // Every byte of the allocation (the view's elements and the padding) becomes 0xFF: NaN in f32/f16/bf16.
  void poison();
  std::vector<std::uint8_t> snapshot() const;
  bool same_bytes(const std::vector<std::uint8_t>& before) const;
  // True when no byte outside the view's elements differs from `before` (padding left alone).
  bool padding_unchanged(const std::vector<std::uint8_t>& before) const;
  // Elements of the view that are NaN.
  std::int64_t count_nan() const;

 private:
  const std::byte* bytes_ptr() const { return reinterpret_cast<const std::byte*>(storage_.data()); }
  std::int64_t element_offset(std::int64_t index) const;  // logical index → element offset from data()

  DType dtype_ = DType::f32;
  int rank_ = 0;
  std::vector<std::int64_t> shape_;
  std::array<std::int64_t, 4> strides_{};
  std::int64_t offset_bytes_ = 0;
  std::int64_t alloc_bytes_ = 0;
  std::vector<std::uint64_t> storage_;  // 8-byte aligned
};

// An int32 tensor of `values`: a vector (B), or with `cols` > 0 a (values / cols, cols) matrix (lengths, offsets,
// block tables).
HostTensor int_tensor(const std::vector<std::int32_t>& values, std::int64_t cols = 0);

// ---------------------------------------------------------------------------------------------------------------
// Accuracy criterion (docs/design.md §2): max|out − ref64| ≤ 2 · max|ref_same_dtype − ref64| + 1e-5.
// One refinement: the tolerance is never below what an implementation that computed the exact result from the
// call's own inputs and rounded it once to the output dtype could be off by,
//   F = max_i (|x_i − ref64_i| + half_ulp(x_i)),  x = that exact result (`exact_from_inputs`; ref64 when absent).
// For forward x = ref64 and F is half an ulp of the largest output. For backward, x uses the O and LSE the call
// receives (D = rowsum(dO ∘ O), P = exp(s − LSE)): their rounding shifts the gradients by an inherent amount, the
// same for every implementation. Without the floor the
// criterion compares two independent roundings at the largest elements and, with few elements, fails correct code
// by luck. Tolerance = max(2 · max|ref_same_dtype − ref64|, F) + 1e-5; for outputs with many elements 2·max|…| ≥ F
// anyway and this is FlashAttention's criterion.
// A second refinement, for outputs computed from operands already rounded to the dtype (`rounded_operands`: the
// gradients, whose GEMMs take dS and P in the dtype): element i may also be off by half an ulp of ref64_i. There
// the error before the output's rounding is of the order of that half ulp, so two computations with the same error
// land in neighbouring values at random, and a path one ulp off at a large element failed by luck (cuDNN's bf16
// dK at B=2 T=77 S=131 N/K=8/2, causal: 1 ulp = 0.0156 at |dK| = 2.4, against a tolerance of 2·0.0055).
// A third, for f32 outputs (the LSE): the floor F counts 8 ulps of x_i instead of half of one. A kernel forms an LSE
// in f32 at its own magnitude (the row's maximum score, itself an f32 dot product, plus a logarithm, then the change
// of base), each step rounding by up to an ulp of that magnitude; at |LSE| in the hundreds a correct kernel lands
// a few ulps away, and the fp32 reference, whose error sets the other term, is itself 1–2 ulps off by chance
// (flash-sm80 at scale 4 in GpuFlashSm90.AnyScale: 2.65e-4 = 4.3 ulps at LSE 725 against a tolerance of 2.24e-4
// from a reference 1.75 ulps off). At |LSE| ≤ 8 the 8 ulps stay below the 1e-5 term.
// Infinities must match exactly (−inf LSE of empty rows); NaN never passes. ATTNLAB_TEST_REPORT=1 prints every
// comparison's error and tolerance.
// ---------------------------------------------------------------------------------------------------------------
::testing::AssertionResult meets_criterion(const std::string& what, DType out_dtype, const std::vector<double>& out,
                                           const std::vector<double>& ref64, const std::vector<double>& ref_same,
                                           const std::vector<double>* exact_from_inputs = nullptr,
                                           bool rounded_operands = false);
// Half an ulp of x in dtype (f32, f16, bf16), subnormals included.
double half_ulp(DType dtype, double x);
// Exact equality, element by element (infinities included, NaN never equal).
::testing::AssertionResult all_equal(const std::string& what, const std::vector<double>& a,
                                     const std::vector<double>& b);
// |a − b| ≤ atol + rtol·|b| everywhere.
::testing::AssertionResult all_close(const std::string& what, const std::vector<double>& a,
                                     const std::vector<double>& b, double atol, double rtol);

}  // namespace attnlab_test
