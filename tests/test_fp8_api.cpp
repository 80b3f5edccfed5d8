// The FP8 helpers of include/attnlab/fp8.h on the CPU, part 1: quantize / dequantize against core/fp8.h's codes
// (ties, saturation, NaN, subnormals, amax with NaN and inf), on strided views, and every validation rule.
// DelayedScaling on the CPU is in test_fp8_api_recipe.cpp.
#include "attnlab/fp8.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attnlab/version.h"
#include "core/delayed_scaling.h"
#include "core/fp8.h"
#include "test_support.h"

namespace attnlab_test {
namespace {

using attnlab::AmaxAlgorithm;
using attnlab::DelayedScaling;
using attnlab::DelayedScalingRecipe;
using attnlab::ErrorCode;
using attnlab::Fp8Pass;
using attnlab::Fp8RecipeFormat;
using attnlab::Fp8Tensor;
using attnlab::core::Fp8Format;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Fp8Format format_of(DType d) { return d == DType::e5m2 ? Fp8Format::e5m2 : Fp8Format::e4m3; }

// The byte of an FP8 host tensor at a logical (row-major) index.
std::uint8_t& byte_at(const HostTensor& t, std::int64_t index) {
  std::int64_t off = 0;
  for (int d = t.rank() - 1; d >= 0; --d) {
    off += (index % t.shape()[std::size_t(d)]) * t.strides()[std::size_t(d)];
    index /= t.shape()[std::size_t(d)];
  }
  return static_cast<std::uint8_t*>(t.data())[off];
}

// Runs `fn`, which must throw attnlab::Error with `code` and a message containing `needle`.
template <class Fn>
::testing::AssertionResult throws(Fn&& fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
  } catch (const attnlab::Error& e) {
    if (e.code() != code) return ::testing::AssertionFailure() << "code " << int(e.code()) << ": " << e.what();
    if (std::string(e.what()).find(needle) == std::string::npos)
      return ::testing::AssertionFailure() << "message \"" << e.what() << "\" lacks \"" << needle << "\"";
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "nothing thrown (wanted \"" << needle << "\")";
}

// ---------------------------------------------------------------------------------------------------------------
// quantize / dequantize
// ---------------------------------------------------------------------------------------------------------------
// Values around every corner of the encoders: ties both ways, the largest finite, beyond it, ±inf, NaN, subnormals,
// signed zeros.
const std::vector<float> kCorners = {
    0.0f,    -0.0f,   1.0f,    -1.0f,    1.0625f,  1.1875f,  -1.0625f, 448.0f,  464.0f,  -500.0f,
    1e9f,    kInf,    -kInf,   kNaN,     0x1p-9f,  0x1p-10f, 0x3p-11f, 0x1p-16f, 0x1p-17f, 57344.0f,
    61440.0f, 1e-30f, -3.3f,   240.0f,   0.3f,     7.0e4f,   -6.5e4f,  2.5f,    1e-3f,   -1e-5f};

TEST(Fp8Quantize, F32MatchesCoreCodes) {
  attnlab::Context ctx;
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    for (float scale : {1.0f, 0.5f, 3.0f, 1024.0f}) {
      HostTensor in(DType::f32, {std::int64_t(kCorners.size())});
      std::memcpy(in.data(), kCorners.data(), kCorners.size() * sizeof(float));  // NaN and -0 exactly as given
      HostTensor out(fp8, {std::int64_t(kCorners.size())});
      float amax = -1.0f;
      attnlab::quantize(ctx, in.view(), out.view(), &scale, &amax);
      for (std::size_t i = 0; i < kCorners.size(); ++i)
        EXPECT_EQ(byte_at(out, std::int64_t(i)), attnlab::core::float_to_fp8(kCorners[i] * scale, format_of(fp8)))
            << dtype_name(fp8) << " x = " << kCorners[i] << " scale " << scale;
      EXPECT_TRUE(std::isnan(amax)) << "a NaN in the tensor makes the amax NaN, got " << amax;
    }
  }
}

TEST(Fp8Quantize, KnownCodes) {
  attnlab::Context ctx;
  // e4m3: ties to even (1.0625 between 1 and 1.125 → 1; 1.1875 → 1.25; subnormals 1.5 and 2.5 units → 2), saturation
  // at ±448, NaN 0x7F; half the smallest subnormal is a tie that goes to 0.
  const std::vector<std::pair<float, std::uint8_t>> e4m3 = {
      {1.0f, 0x38}, {1.0625f, 0x38}, {1.1875f, 0x3A}, {448.0f, 0x7E}, {464.0f, 0x7E}, {1e9f, 0x7E},
      {kInf, 0x7E}, {-kInf, 0xFE},   {kNaN, 0x7F},    {0x1p-9f, 0x01}, {0x1p-10f, 0x00}, {0x3p-11f, 0x01},
      {0x3p-10f, 0x02}, {0x5p-10f, 0x02},
      {-0.0f, 0x80}};
  // e5m2: saturation at ±57344 (inf included).
  const std::vector<std::pair<float, std::uint8_t>> e5m2 = {
      {1.0f, 0x3C}, {57344.0f, 0x7B}, {61440.0f, 0x7B}, {kInf, 0x7B}, {-kInf, 0xFB}, {kNaN, 0x7F},
      {0x1p-16f, 0x01}, {0x1p-17f, 0x00}};
  for (const auto& [fp8, table] : {std::pair{DType::e4m3, e4m3}, std::pair{DType::e5m2, e5m2}}) {
    HostTensor in(DType::f32, {std::int64_t(table.size())});
    for (std::size_t i = 0; i < table.size(); ++i) static_cast<float*>(in.data())[i] = table[i].first;
    HostTensor out(fp8, {std::int64_t(table.size())});
    const float one = 1.0f;
    attnlab::quantize(ctx, in.view(), out.view(), &one);
    for (std::size_t i = 0; i < table.size(); ++i)
      EXPECT_EQ(int(byte_at(out, std::int64_t(i))), int(table[i].second)) << dtype_name(fp8) << " " << table[i].first;
  }
}

TEST(Fp8Quantize, HalfInputsStridedViews) {
  attnlab::Context ctx;
  ATTNLAB_TEST_RNG(rng);
  for (DType in_dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (DType fp8 : {DType::e4m3, DType::e5m2}) {
      const Layout layouts[] = {dense(), padded(), permuted12()};
      for (int l = 0; l < 3; ++l) {
        HostTensor in(in_dtype, {2, 3, 5, 7}, layouts[l]);
        in.fill_random(rng, 30.0);
        in.set(11, -300.0);  // the amax, exact in every dtype
        HostTensor out(fp8, {2, 3, 5, 7}, layouts[(l + 1) % 3]);
        const std::vector<std::uint8_t> before = out.snapshot();
        const float scale = 2.0f;
        float amax = 0.0f;
        attnlab::quantize(ctx, in.view(), out.view(), &scale, &amax);
        for (std::int64_t i = 0; i < in.numel(); ++i)
          ASSERT_EQ(byte_at(out, i), attnlab::core::float_to_fp8(float(in.get(i)) * scale, format_of(fp8)))
              << dtype_name(in_dtype) << " → " << dtype_name(fp8) << " at " << i;
        EXPECT_EQ(amax, 300.0f);
        EXPECT_TRUE(out.padding_unchanged(before));
      }
    }
  }
}

TEST(Fp8Quantize, Amax) {
  attnlab::Context ctx;
  const float one = 1.0f;
  auto amax_of = [&](DType dtype, const std::vector<float>& values) {
    HostTensor in(dtype, {std::int64_t(values.size())});
    for (std::size_t i = 0; i < values.size(); ++i) in.set(std::int64_t(i), values[i]);
    HostTensor out(DType::e4m3, {std::int64_t(values.size())});
    float amax = 123.0f;
    attnlab::quantize(ctx, in.view(), out.view(), &one, &amax);
    return amax;
  };
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(d));
    EXPECT_EQ(amax_of(d, {1.0f, -8.0f, 2.0f}), 8.0f) << "the largest magnitude, of a negative value too";
    EXPECT_EQ(amax_of(d, {-0.0f, 0.0f}), 0.0f);
    EXPECT_EQ(amax_of(d, {1.0f, -kInf}), kInf);
    EXPECT_TRUE(std::isnan(amax_of(d, {1.0f, kNaN, 2.0f})));
    EXPECT_TRUE(std::isnan(amax_of(d, {kInf, kNaN, -kInf}))) << "NaN wins over inf";
    EXPECT_TRUE(std::isnan(amax_of(d, {kNaN, 5.0f})));
  }
  EXPECT_EQ(amax_of(DType::f32, {0x1p-140f}), 0x1p-140f) << "the amax is exact, also for a float subnormal";
}

TEST(Fp8Quantize, NoElementsWritesAmaxZero) {
  attnlab::Context ctx;
  const float one = 1.0f;
  TensorView in = TensorView::contiguous(nullptr, DType::bf16, {3, 0, 4});
  TensorView out = TensorView::contiguous(nullptr, DType::e4m3, {3, 0, 4});
  float amax = 5.0f;
  attnlab::quantize(ctx, in, out, &one, &amax);
  EXPECT_EQ(amax, 0.0f);
  attnlab::quantize(ctx, in, out, &one);  // amax null: nothing at all
  attnlab::dequantize(ctx, out, in, &one);
}

TEST(Fp8Dequantize, EveryCode) {
  attnlab::Context ctx;
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    for (DType out_dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (float scale_inv : {1.0f, 0.25f, 3.0f, 1e-3f}) {
        HostTensor in(fp8, {16, 16}, padded());
        for (int c = 0; c < 256; ++c) byte_at(in, c) = std::uint8_t(c);
        HostTensor out(out_dtype, {16, 16}, permuted01());
        attnlab::dequantize(ctx, in.view(), out.view(), &scale_inv);
        for (int c = 0; c < 256; ++c) {
          const float want = attnlab::core::fp8_to_float(std::uint8_t(c), format_of(fp8)) * scale_inv;
          const double got = out.get(c);
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << c;
          } else {
            EXPECT_EQ(got, round_to(out_dtype, double(want)))
                << dtype_name(fp8) << " code " << c << " → " << dtype_name(out_dtype) << " · " << scale_inv;
          }
        }
      }
    }
  }
}

TEST(Fp8Dequantize, RoundTripsQuantize) {
  attnlab::Context ctx;
  ATTNLAB_TEST_RNG(rng);
  HostTensor x(DType::f32, {113, 7});
  x.fill_random(rng, 10.0);
  HostTensor q(DType::e4m3, {113, 7});
  HostTensor back(DType::f32, {113, 7});
  const float scale = 8.0f, scale_inv = 1.0f / 8.0f;  // |x| ≤ 40: no saturation
  attnlab::quantize(ctx, x.view(), q.view(), &scale);
  attnlab::dequantize(ctx, q.view(), back.view(), &scale_inv);
  HostTensor again(DType::e4m3, {113, 7});
  attnlab::quantize(ctx, back.view(), again.view(), &scale);
  EXPECT_TRUE(again.same_bytes(q.snapshot())) << "a dequantized tensor quantizes to the same codes";
  for (std::int64_t i = 0; i < x.numel(); ++i)
    EXPECT_LE(std::fabs(back.get(i) - x.get(i)), std::fabs(x.get(i)) / 16 + 1e-3) << i;  // e4m3: 3 mantissa bits
}

// ---------------------------------------------------------------------------------------------------------------
// Validation: every rule, named in the message; nothing written when a call is refused
// ---------------------------------------------------------------------------------------------------------------
class Fp8ConvertValidation : public ::testing::Test {
 protected:
  attnlab::Context ctx;
  HostTensor x{DType::f32, {4, 6}};
  HostTensor q{DType::e4m3, {4, 6}};
  float scale = 1.0f;
  float amax = 7.0f;

  ::testing::AssertionResult refused_quantize(TensorView in, TensorView out, const std::string& needle,
                                              const float* s = nullptr, ErrorCode code = ErrorCode::invalid_argument) {
    const std::vector<std::uint8_t> before = q.snapshot();
    auto r = throws([&] { attnlab::quantize(ctx, in, out, s == nullptr ? &scale : s, &amax); }, code, needle);
    if (r && !q.same_bytes(before)) return ::testing::AssertionFailure() << "a refused call wrote out";
    if (r && amax != 7.0f) return ::testing::AssertionFailure() << "a refused call wrote amax";
    return r;
  }
};

TEST_F(Fp8ConvertValidation, Dtypes) {
  TensorView bad = x.view();
  bad.dtype = DType::e5m2;
  EXPECT_TRUE(refused_quantize(bad, q.view(), "quantize: in.dtype must be f32, f16 or bf16, got e5m2"));
  bad = q.view();
  bad.dtype = DType::f16;
  EXPECT_TRUE(refused_quantize(x.view(), bad, "quantize: out.dtype must be e4m3 or e5m2, got f16"));
  bad.dtype = DType::i32;
  EXPECT_TRUE(refused_quantize(x.view(), bad, "quantize: out.dtype must be e4m3 or e5m2, got i32"));
  EXPECT_TRUE(throws([&] { attnlab::dequantize(ctx, x.view(), x.view(), &scale); }, ErrorCode::invalid_argument,
                     "dequantize: in.dtype must be e4m3 or e5m2, got f32"));
  EXPECT_TRUE(throws([&] { attnlab::dequantize(ctx, q.view(), q.view(), &scale); }, ErrorCode::invalid_argument,
                     "dequantize: out.dtype must be f32, f16 or bf16, got e4m3"));
}

TEST_F(Fp8ConvertValidation, Shapes) {
  HostTensor other(DType::e4m3, {4, 5});
  EXPECT_TRUE(refused_quantize(x.view(), other.view(), "out must have in's shape: in.shape[1] = 6, out.shape[1] = 5"));
  HostTensor flat(DType::e4m3, {24});
  EXPECT_TRUE(refused_quantize(x.view(), flat.view(), "out must have in's shape: in has rank 2, out rank 1"));
  TensorView bad = x.view();
  bad.rank = 0;
  EXPECT_TRUE(refused_quantize(bad, q.view(), "in must have rank 1..4, got 0"));
  bad.rank = 5;
  EXPECT_TRUE(refused_quantize(bad, q.view(), "in must have rank 1..4, got 5"));
  bad = q.view();
  bad.shape[0] = -1;
  EXPECT_TRUE(refused_quantize(x.view(), bad, "out.shape[0] must be ≥ 0, got -1"));
}

TEST_F(Fp8ConvertValidation, Strides) {
  TensorView bad = x.view();
  bad.strides[0] = -6;
  EXPECT_TRUE(refused_quantize(bad, q.view(), "in.strides[0] must be ≥ 0, got -6"));
  bad = x.view();
  bad.shape[1] = 3;
  bad.strides[1] = 2;
  TensorView out = q.view();
  out.shape[1] = 3;
  EXPECT_TRUE(refused_quantize(bad, out, "in: the last dimension must be contiguous (stride 1), got stride 2"));
  out = q.view();
  out.strides[0] = 0;
  EXPECT_TRUE(refused_quantize(x.view(), out, "out: its strides make distinct elements share memory"));
  out = q.view();
  out.strides[0] = 3;  // rows overlap each other
  EXPECT_TRUE(refused_quantize(x.view(), out, "out: its strides make distinct elements share memory"));
  // A broadcast input (stride 0) is fine: only the output must not repeat elements.
  TensorView row = x.view();
  row.strides[0] = 0;
  attnlab::quantize(ctx, row, q.view(), &scale);
}

TEST_F(Fp8ConvertValidation, Pointers) {
  TensorView bad = x.view();
  bad.data = nullptr;
  EXPECT_TRUE(refused_quantize(bad, q.view(), "quantize: in.data is null"));
  EXPECT_TRUE(throws([&] { attnlab::quantize(ctx, x.view(), q.view(), nullptr); }, ErrorCode::invalid_argument,
                     "quantize: scale is null"));
  EXPECT_TRUE(throws([&] { attnlab::dequantize(ctx, q.view(), x.view(), nullptr); }, ErrorCode::invalid_argument,
                     "dequantize: scale_inv is null"));
  HostTensor h(DType::bf16, {4, 7});
  bad = h.view();
  bad.shape[1] = 6;
  bad.data = static_cast<char*>(h.data()) + 1;
  EXPECT_TRUE(refused_quantize(bad, q.view(), "in.data is not aligned to its element size (2 bytes)"));
  // out inside in's bytes: the loop (or the kernel) would overwrite input it has yet to read.
  TensorView alias = q.view();
  alias.data = static_cast<char*>(x.data()) + 8;
  EXPECT_TRUE(refused_quantize(x.view(), alias, "quantize: out overlaps in in memory"));
}

TEST_F(Fp8ConvertValidation, Devices) {
  TensorView gpu = q.view();
  gpu.device = Device::cuda;
  EXPECT_TRUE(refused_quantize(x.view(), gpu, "in and out must be on one device: in is on cpu:0, out on cuda:0"));
  TensorView gpu_in = x.view();
  gpu_in.device = Device::cuda;
  const bool no_gpu = !ATTNLAB_WITH_CUDA || [] {
    try {
      attnlab::Context c;
      attnlab::DelayedScaling probe(c, {}, Device::cuda);
      return false;
    } catch (const attnlab::Error&) {
      return true;
    }
  }();
  if (!no_gpu) GTEST_SKIP() << "a GPU is here: CUDA tensors are not refused";
  // Without CUDA compiled in: "built without CUDA"; compiled in but no usable GPU: "no usable CUDA device".
  EXPECT_TRUE(refused_quantize(gpu_in, gpu, "CUDA", nullptr, ErrorCode::unsupported));
}

}  // namespace
}  // namespace attnlab_test
