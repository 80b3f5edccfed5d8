#include "test_support.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

namespace attnlab_test {

// ---------------------------------------------------------------------------------------------------------------
// Conversions. f16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits; subnormals are m · 2^-24.
// bf16: the upper 16 bits of an f32. Both round to nearest, ties to even (std::nearbyint in the default mode).
// ---------------------------------------------------------------------------------------------------------------
std::uint16_t to_f16_bits(double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return std::uint16_t(sign | 0x7e00);
  const double a = std::fabs(x);
  if (a >= 65520.0) return std::uint16_t(sign | 0x7c00);  // 65504 + half an ulp rounds to infinity
  if (a < std::ldexp(1.0, -14)) {                         // subnormal range (1024 means the smallest normal)
    return std::uint16_t(sign | std::uint16_t(std::nearbyint(std::ldexp(a, 24))));
  }
  int e = 0;
  const double f = std::frexp(a, &e);  // a = f · 2^e, f in [0.5, 1)
  int exponent = e - 1;                // a = (2f) · 2^exponent, 2f in [1, 2)
  double mant = std::nearbyint((2.0 * f - 1.0) * 1024.0);
  if (mant >= 1024.0) {
    mant = 0.0;
    ++exponent;
  }
  if (exponent > 15) return std::uint16_t(sign | 0x7c00);
  return std::uint16_t(sign | std::uint16_t((exponent + 15) << 10) | std::uint16_t(mant));
}

double from_f16_bits(std::uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int exponent = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exponent == 0x1f) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(double(mant), -24);
  return sign * std::ldexp(1.0 + mant / 1024.0, exponent - 15);
}

std::uint16_t to_bf16_bits(double x) {
  const float f = float(x);  // values we store are already close to f32; f32 → bf16 is the rounding that matters
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return std::uint16_t((u >> 16) | 0x0040);
  const std::uint32_t lower = u & 0xffffu;
  std::uint32_t upper = u >> 16;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) ++upper;
  return std::uint16_t(upper);
}

double from_bf16_bits(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::f32: return double(float(x));
    case DType::f16: return from_f16_bits(to_f16_bits(x));
    case DType::bf16: return from_bf16_bits(to_bf16_bits(x));
    default: return x;
  }
}

std::size_t elem_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    default: return 1;
  }
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------------------------------------------
double Rng::value() {
  std::normal_distribution<double> normal(0.0, 1.0);
  for (;;) {
    const double x = normal(gen_);
    if (std::fabs(x) >= 1e-2 && std::fabs(x) <= 4.0) return x;
  }
}

std::uint64_t fresh_seed() {
  static std::atomic<std::uint64_t> counter{0};
  if (const char* env = std::getenv("ATTNLAB_TEST_SEED"); env != nullptr && *env != '\0')
    return std::strtoull(env, nullptr, 10) + counter.fetch_add(1);
  std::random_device rd;
  return (std::uint64_t(rd()) << 32) ^ rd() ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
}

// ---------------------------------------------------------------------------------------------------------------
// Layouts and host tensors
// ---------------------------------------------------------------------------------------------------------------
Layout dense() { return Layout{}; }

Layout padded() {
  Layout l;
  l.pad = {1, 3, 2, 5};
  l.offset = 7;
  return l;
}

Layout permuted12() {
  Layout l;
  l.order = {0, 2, 1, 3};
  l.pad = {2, 1, 3, 4};
  l.offset = 3;
  return l;
}

Layout permuted01() {
  Layout l;
  l.order = {1, 0, 2, 3};
  l.pad = {1, 2, 3, 0};
  l.offset = 5;
  return l;
}

HostTensor::HostTensor(DType dtype, std::vector<std::int64_t> shape, const Layout& layout)
    : dtype_(dtype), rank_(int(shape.size())), shape_(std::move(shape)) {
  // The layout's order restricted to this rank, keeping its relative order (rank 3 uses dims 0..2 of `order`).
  std::vector<int> order;
  for (int d : layout.order)
    if (d < rank_) order.push_back(d);
  // The last dimension stays innermost (contiguous), whatever the layout asked for.
  order.erase(std::find(order.begin(), order.end(), rank_ - 1));
  order.push_back(rank_ - 1);
  std::array<std::int64_t, 4> extent{};
  for (int d = 0; d < rank_; ++d) extent[d] = shape_[d] + layout.pad[d];
  std::int64_t stride = 1;
  for (int k = rank_ - 1; k >= 0; --k) {
    strides_[order[k]] = stride;
    stride *= extent[order[k]];
  }
  const std::int64_t elems = layout.offset + stride;
  offset_bytes_ = layout.offset * std::int64_t(elem_size(dtype_));
  alloc_bytes_ = elems * std::int64_t(elem_size(dtype_));
  storage_.assign(std::size_t((alloc_bytes_ + 7) / 8), 0);
}

HostTensor int_tensor(const std::vector<std::int32_t>& values, std::int64_t cols) {
  const std::int64_t n = std::int64_t(values.size());
  HostTensor t = cols > 0 ? HostTensor(DType::i32, {n / cols, cols}) : HostTensor(DType::i32, {n});
  for (std::int64_t i = 0; i < n; ++i) t.set(i, values[std::size_t(i)]);
  return t;
}

std::int64_t HostTensor::numel() const {
  std::int64_t n = 1;
  for (auto s : shape_) n *= s;
  return rank_ == 0 ? 0 : n;
}

TensorView HostTensor::view() const {
  TensorView t;
  if (!defined()) return t;
  t.data = data();
  t.dtype = dtype_;
  t.device = Device::cpu;
  t.rank = rank_;
  for (int d = 0; d < rank_; ++d) {
    t.shape[d] = shape_[d];
    t.strides[d] = strides_[d];
  }
  return t;
}

std::int64_t HostTensor::element_offset(std::int64_t index) const {
  std::int64_t off = 0;
  for (int d = rank_ - 1; d >= 0; --d) {
    off += (index % shape_[d]) * strides_[d];
    index /= shape_[d];
  }
  return off;
}

double HostTensor::get(std::int64_t index) const {
  const std::byte* p = static_cast<const std::byte*>(data()) + element_offset(index) * std::int64_t(elem_size(dtype_));
  switch (dtype_) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::i32: {
      std::int32_t i;
      std::memcpy(&i, p, 4);
      return i;
    }
    case DType::f16:
    case DType::bf16: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return dtype_ == DType::f16 ? from_f16_bits(h) : from_bf16_bits(h);
    }
    case DType::u8: return double(std::to_integer<std::uint8_t>(*p));
    default: {
      ADD_FAILURE() << "HostTensor::get: dtype " << dtype_name(dtype_) << " has no value reader in the tests";
      return 0.0;
    }
  }
}

void HostTensor::set(std::int64_t index, double value) {
  std::byte* p = static_cast<std::byte*>(data()) + element_offset(index) * std::int64_t(elem_size(dtype_));
  switch (dtype_) {
    case DType::f32: {
      const float f = float(value);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::i32: {
      const auto i = std::int32_t(value);
      std::memcpy(p, &i, 4);
      break;
    }
    case DType::f16:
    case DType::bf16: {
      const std::uint16_t h = dtype_ == DType::f16 ? to_f16_bits(value) : to_bf16_bits(value);
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::u8:
    case DType::e4m3:
    case DType::e5m2: *p = std::byte(std::uint8_t(value)); break;  // raw byte
  }
}

std::vector<double> HostTensor::values() const {
  std::vector<double> out(static_cast<std::size_t>(numel()));
  for (std::int64_t i = 0; i < numel(); ++i) out[std::size_t(i)] = get(i);
  return out;
}

void HostTensor::set_values(const std::vector<double>& values) {
  EXPECT_EQ(std::int64_t(values.size()), numel());
  for (std::int64_t i = 0; i < numel() && i < std::int64_t(values.size()); ++i) set(i, values[std::size_t(i)]);
}

void HostTensor::fill_random(Rng& rng, double scale) {
  for (std::int64_t i = 0; i < numel(); ++i) set(i, rng.value() * scale);
}

void HostTensor::poison() { std::memset(storage_.data(), 0xff, storage_.size() * 8); }

std::vector<std::uint8_t> HostTensor::snapshot() const {
  const auto* p = reinterpret_cast<const std::uint8_t*>(storage_.data());
  return std::vector<std::uint8_t>(p, p + storage_.size() * 8);
}

bool HostTensor::same_bytes(const std::vector<std::uint8_t>& before) const {
  return before.size() == storage_.size() * 8 && std::memcmp(before.data(), storage_.data(), before.size()) == 0;
}

bool HostTensor::padding_unchanged(const std::vector<std::uint8_t>& before) const {
  if (before.size() != storage_.size() * 8) return false;
  std::vector<bool> in_view(before.size(), false);
  const std::int64_t es = std::int64_t(elem_size(dtype_));
  for (std::int64_t i = 0; i < numel(); ++i) {
    const std::int64_t b = offset_bytes_ + element_offset(i) * es;
    for (std::int64_t k = 0; k < es; ++k) in_view[std::size_t(b + k)] = true;
  }
  const auto* now = reinterpret_cast<const std::uint8_t*>(storage_.data());
  for (std::size_t i = 0; i < before.size(); ++i)
    if (!in_view[i] && now[i] != before[i]) return false;
  return true;
}

std::int64_t HostTensor::count_nan() const {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < numel(); ++i) n += std::isnan(get(i)) ? 1 : 0;
  return n;
}

// ---------------------------------------------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------------------------------------------
namespace {

// |a − b| with infinities of the same sign counting as equal and anything involving NaN as infinite.
double distance(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return INFINITY;
  if (std::isinf(a) || std::isinf(b)) return a == b ? 0.0 : INFINITY;
  return std::fabs(a - b);
}

struct MaxDistance {
  double value = 0.0;
  std::size_t at = 0;
};

MaxDistance max_distance(const std::vector<double>& a, const std::vector<double>& b) {
  MaxDistance m;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = distance(a[i], b[i]);
    if (d > m.value || (std::isinf(d) && !std::isinf(m.value))) {
      m.value = d;
      m.at = i;
    }
  }
  return m;
}

}  // namespace

double half_ulp(DType dtype, double x) {
  const double a = std::fabs(x);
  if (!std::isfinite(a)) return 0.0;
  int mant_bits = 23, min_exp = -126;  // f32
  if (dtype == DType::f16) mant_bits = 10, min_exp = -14;
  if (dtype == DType::bf16) mant_bits = 7, min_exp = -126;
  int e = 0;
  std::frexp(a, &e);  // a = f · 2^e, f in [0.5, 1): the binade's exponent is e − 1
  const int exponent = a == 0.0 ? min_exp : std::max(e - 1, min_exp);
  return std::ldexp(0.5, exponent - mant_bits);
}

::testing::AssertionResult meets_criterion(const std::string& what, DType out_dtype, const std::vector<double>& out,
                                           const std::vector<double>& ref64, const std::vector<double>& ref_same,
                                           const std::vector<double>* exact_from_inputs, bool rounded_operands) {
  if (out.size() != ref64.size() || ref_same.size() != ref64.size())
    return ::testing::AssertionFailure() << what << ": size mismatch " << out.size() << " vs " << ref64.size();
  std::int64_t nans = 0;
  for (double x : out) nans += std::isnan(x) ? 1 : 0;
  const std::vector<double>& x = exact_from_inputs ? *exact_from_inputs : ref64;
  if (x.size() != ref64.size()) return ::testing::AssertionFailure() << what << ": size mismatch (exact from inputs)";
  if (out.empty()) return ::testing::AssertionSuccess() << what << ": no elements";
  double floor = 0.0;
  const double rounding_ulps = out_dtype == DType::f32 ? 16.0 : 1.0;  // in half ulps: the header's third refinement
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::isfinite(x[i]) && std::isfinite(ref64[i]))
      floor = std::max(floor, std::fabs(x[i] - ref64[i]) + rounding_ulps * half_ulp(out_dtype, x[i]));
  const MaxDistance same = max_distance(ref_same, ref64);
  if (std::isinf(same.value))
    return ::testing::AssertionFailure() << what << ": the same-dtype reference disagrees with the fp64 one at "
                                         << same.at << " (" << ref_same[same.at] << " vs " << ref64[same.at]
                                         << "): a bug in the test reference";
  const double tol = std::max(2.0 * same.value, floor) + 1e-5;
  // The element that uses most of its tolerance (tol, plus half an ulp of ref64_i with rounded operands).
  auto tolerance_at = [&](std::size_t i) { return tol + (rounded_operands ? half_ulp(out_dtype, ref64[i]) : 0.0); };
  MaxDistance err;
  double worst_use = -1.0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double d = distance(out[i], ref64[i]);
    const double use = d / tolerance_at(i);
    if (use > worst_use) worst_use = use, err = {d, i};
  }
  if (const char* report = std::getenv("ATTNLAB_TEST_REPORT"); report != nullptr && *report == '1')
    std::printf("  %-4s |out − ref64| %.3g at the worst element, max|ref_dtype − ref64| %.3g, tolerance there %.3g "
                "(%.0f%% used)\n",
                what.c_str(), err.value, same.value, tolerance_at(err.at), 100.0 * std::max(worst_use, 0.0));
  if (nans == 0 && worst_use <= 1.0)
    return ::testing::AssertionSuccess() << what << ": err " << err.value << " ≤ " << tolerance_at(err.at);
  std::ostringstream s;
  s.precision(9);
  s << what << ": |out − ref64| = " << err.value << " at element " << err.at << " (out " << out[err.at] << ", ref64 "
    << ref64[err.at] << ", same-dtype ref " << ref_same[err.at] << "); tolerance max(2·" << same.value << ", "
    << floor << ") + 1e-5";
  if (rounded_operands) s << " + half an ulp of ref64 (" << half_ulp(out_dtype, ref64[err.at]) << ")";
  s << " = " << tolerance_at(err.at) << "; NaN elements: " << nans << " of " << out.size();
  return ::testing::AssertionFailure() << s.str();
}

::testing::AssertionResult all_equal(const std::string& what, const std::vector<double>& a,
                                     const std::vector<double>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": size mismatch " << a.size() << " vs " << b.size();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i]))
      return ::testing::AssertionFailure() << what << ": element " << i << " differs: " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const std::string& what, const std::vector<double>& a,
                                     const std::vector<double>& b, double atol, double rtol) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": size mismatch " << a.size() << " vs " << b.size();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = distance(a[i], b[i]);
    if (!(d <= atol + rtol * std::fabs(b[i])))
      return ::testing::AssertionFailure() << what << ": element " << i << ": " << a[i] << " vs " << b[i]
                                           << " (|diff| " << d << " > " << atol << " + " << rtol << "·|b|)";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace attnlab_test
