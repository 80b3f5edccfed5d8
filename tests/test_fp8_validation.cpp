// The preconditions of FP8 calls (docs/design.md §7), on host tensors: each rule named in the error, before any
// path runs; and FP8 refused by the paths that have none, with the way to the one that has (path=cudnn).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "attnlab/attention.h"

namespace {

using attnlab::DType;
using attnlab::TensorView;

// A small FP8 problem on host memory: B 1, T 4, S 6, N 2, K 1, H 16, every scale present.
struct Fp8Args {
  std::vector<std::uint8_t> q = std::vector<std::uint8_t>(1 * 4 * 2 * 16, 0x38);  // e4m3 1.0
  std::vector<std::uint8_t> k = std::vector<std::uint8_t>(1 * 6 * 1 * 16, 0x30);
  std::vector<std::uint8_t> v = std::vector<std::uint8_t>(1 * 6 * 1 * 16, 0x40);
  std::vector<std::uint8_t> o = std::vector<std::uint8_t>(1 * 4 * 2 * 16, 0x7F);
  std::vector<std::uint16_t> o16 = std::vector<std::uint16_t>(1 * 4 * 2 * 16);
  std::vector<std::uint16_t> k16 = std::vector<std::uint16_t>(1 * 6 * 1 * 16);
  std::vector<std::uint8_t> d_o = o, dq = q, dk = k, dv = v;
  std::vector<float> lse = std::vector<float>(1 * 2 * 4);
  float scalars[20] = {};

  attnlab::ForwardArgs forward() {
    attnlab::ForwardArgs a;
    a.q = TensorView::contiguous(q.data(), DType::e4m3, {1, 4, 2, 16});
    a.k = TensorView::contiguous(k.data(), DType::e4m3, {1, 6, 1, 16});
    a.v = TensorView::contiguous(v.data(), DType::e4m3, {1, 6, 1, 16});
    a.o = TensorView::contiguous(o.data(), DType::e4m3, {1, 4, 2, 16});
    attnlab::Fp8ForwardScales s;
    s.descale_q = &scalars[0], s.descale_k = &scalars[1], s.descale_v = &scalars[2];
    s.scale_s = &scalars[3], s.descale_s = &scalars[4], s.scale_o = &scalars[5];
    s.amax_s = &scalars[6], s.amax_o = &scalars[7];
    a.fp8 = s;
    return a;
  }
  attnlab::BackwardArgs backward() {
    attnlab::BackwardArgs a;
    a.q = TensorView::contiguous(q.data(), DType::e4m3, {1, 4, 2, 16});
    a.k = TensorView::contiguous(k.data(), DType::e4m3, {1, 6, 1, 16});
    a.v = TensorView::contiguous(v.data(), DType::e4m3, {1, 6, 1, 16});
    a.o = TensorView::contiguous(o.data(), DType::e4m3, {1, 4, 2, 16});
    a.d_o = TensorView::contiguous(d_o.data(), DType::e5m2, {1, 4, 2, 16});
    a.lse = TensorView::contiguous(lse.data(), DType::f32, {1, 2, 4});
    a.dq = TensorView::contiguous(dq.data(), DType::e5m2, {1, 4, 2, 16});
    a.dk = TensorView::contiguous(dk.data(), DType::e5m2, {1, 6, 1, 16});
    a.dv = TensorView::contiguous(dv.data(), DType::e5m2, {1, 6, 1, 16});
    attnlab::Fp8BackwardScales s;
    const float** in[] = {&s.descale_q, &s.descale_k, &s.descale_v, &s.descale_o, &s.descale_do, &s.scale_s,
                          &s.descale_s, &s.scale_dp, &s.descale_dp, &s.scale_dq, &s.scale_dk, &s.scale_dv};
    for (int i = 0; i < 12; ++i) *in[i] = &scalars[i];
    s.amax_dp = &scalars[12], s.amax_dq = &scalars[13], s.amax_dk = &scalars[14], s.amax_dv = &scalars[15];
    a.fp8 = s;
    return a;
  }
};

template <class Args>
void expect_error(Args args, attnlab::ErrorCode code, const std::string& words) {
  attnlab::Context ctx;
  try {
    if constexpr (std::is_same_v<Args, attnlab::ForwardArgs>)
      attnlab::forward(ctx, args);
    else
      attnlab::backward(ctx, args);
    ADD_FAILURE() << "the call ran; expected an error containing \"" << words << "\"";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(int(e.code()), int(code)) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Fp8Validation, ForwardRulesNamed) {
  Fp8Args t;
  const auto invalid = attnlab::ErrorCode::invalid_argument;
  {
    auto a = t.forward();
    a.k = TensorView::contiguous(t.k16.data(), DType::f16, {1, 6, 1, 16});
    expect_error(a, invalid, "q, k and v must share one dtype");
  }
  {
    auto a = t.forward();
    a.fp8.reset();
    expect_error(a, invalid, "ForwardArgs::fp8");
  }
  for (int which = 0; which < 6; ++which) {
    auto a = t.forward();
    const float** slots[] = {&a.fp8->descale_q, &a.fp8->descale_k, &a.fp8->descale_v,
                             &a.fp8->scale_s,   &a.fp8->descale_s, &a.fp8->scale_o};
    const char* names[] = {"descale_q", "descale_k", "descale_v", "scale_s", "descale_s", "scale_o"};
    *slots[which] = nullptr;
    expect_error(a, invalid, std::string("fp8.") + names[which] + " is required");
  }
  {
    auto a = t.forward();
    a.fp8->scale_o = nullptr;  // not needed for a bf16 O: the call then fails only for want of a path
    a.o = TensorView::contiguous(t.o16.data(), DType::bf16, {1, 4, 2, 16});
    expect_error(a, attnlab::ErrorCode::unsupported, "e4m3");
  }
  {
    std::vector<float> o32(1 * 4 * 2 * 16);
    auto a = t.forward();
    a.o = TensorView::contiguous(o32.data(), DType::f32, {1, 4, 2, 16});
    expect_error(a, invalid, "o of an FP8 call must be e4m3, e5m2, bf16 or f16");
  }
  {
    auto a = t.forward();
    a.fp8->amax_s = reinterpret_cast<float*>(reinterpret_cast<char*>(&t.scalars[6]) + 1);
    expect_error(a, invalid, "4-byte aligned");
  }
  {
    // Scales with bf16 inputs: a mistake, not something to ignore.
    std::vector<std::uint16_t> q16(1 * 4 * 2 * 16), v16(1 * 6 * 1 * 16);
    auto a = t.forward();
    a.q = TensorView::contiguous(q16.data(), DType::bf16, {1, 4, 2, 16});
    a.k = TensorView::contiguous(t.k16.data(), DType::bf16, {1, 6, 1, 16});
    a.v = TensorView::contiguous(v16.data(), DType::bf16, {1, 6, 1, 16});
    a.o = TensorView::contiguous(t.o16.data(), DType::bf16, {1, 4, 2, 16});
    expect_error(a, invalid, "fp8 scales were given but q, k, v are bf16");
  }
  EXPECT_TRUE(std::all_of(t.o.begin(), t.o.end(), [](std::uint8_t b) { return b == 0x7F; })) << "O was written";
}

TEST(Fp8Validation, AmaxesMustBeDistinct) {
  Fp8Args t;
  auto a = t.forward();
  a.fp8->amax_o = a.fp8->amax_s;
  expect_error(a, attnlab::ErrorCode::invalid_argument, "fp8.amax_s and fp8.amax_o point to the same float");
  a = t.forward();
  a.fp8->amax_s = const_cast<float*>(a.fp8->scale_s);
  expect_error(a, attnlab::ErrorCode::invalid_argument, "fp8.amax_s points to fp8.scale_s");
  auto b = t.backward();
  b.fp8->amax_dv = b.fp8->amax_dq;
  expect_error(b, attnlab::ErrorCode::invalid_argument, "point to the same float");
}

TEST(Fp8Validation, BackwardRulesNamed) {
  Fp8Args t;
  const auto invalid = attnlab::ErrorCode::invalid_argument;
  {
    auto a = t.backward();
    a.fp8.reset();
    expect_error(a, invalid, "BackwardArgs::fp8");
  }
  {
    auto a = t.backward();
    a.o = TensorView::contiguous(t.o16.data(), DType::bf16, {1, 4, 2, 16});
    expect_error(a, invalid, "o of an FP8 backward call must be the forward call's FP8 output");
  }
  {
    auto a = t.backward();
    a.d_o = TensorView::contiguous(t.o16.data(), DType::bf16, {1, 4, 2, 16});
    expect_error(a, invalid, "d_o of an FP8 backward call must be e5m2 or e4m3");
  }
  {
    auto a = t.backward();
    a.dk = TensorView::contiguous(t.dk.data(), DType::e4m3, {1, 6, 1, 16});
    expect_error(a, invalid, "dq, dk and dv must share one dtype");
  }
  {
    auto a = t.backward();
    a.fp8->scale_dp = nullptr;
    expect_error(a, invalid, "fp8.scale_dp is required");
  }
  {
    auto a = t.backward();
    a.fp8->scale_dv = nullptr;
    expect_error(a, invalid, "fp8.scale_dv is required");
  }
}

// The CPU paths have no FP8: a forced one names the dtype, auto says no path can run it (the GPU's cudnn can).
TEST(Fp8Validation, CpuPathsRefuseFp8) {
  Fp8Args t;
  for (const char* path : {"cpu-naive", "cpu-flash", "auto"}) {
    auto a = t.forward();
    a.options.path = path;
    expect_error(a, attnlab::ErrorCode::unsupported, "e4m3");
  }
}

}  // namespace
