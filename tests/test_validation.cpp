// Every precondition of a forward call (docs/design.md §2: "every precondition is checked before any launch ... Nothing
// is written to O when a call fails"): each test breaks one rule and expects the error code, a message naming the
// rule, and every buffer untouched. Dispatch errors (unknown path, a forced path that cannot run) and parse_dtype
// are here too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "validation.h"

namespace attnlab_test {
namespace {

using attnlab::ErrorCode;
using attnlab::ForwardArgs;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

class ForwardValidation : public ValidationTest {};

TensorView& field(ForwardArgs& a, const std::string& name) {
  if (name == "q") return a.q;
  if (name == "k") return a.k;
  if (name == "v") return a.v;
  if (name == "o") return a.o;
  if (name == "lse") return a.lse;
  if (name == "bias") return a.options.bias;
  if (name == "q_seqlens") return a.options.q_seqlens;
  return a.options.kv_seqlens;
}

const std::vector<std::string> kTensors = {"q", "k", "v", "o", "lse", "bias", "q_seqlens", "kv_seqlens"};
const std::vector<std::string> kFourD = {"q", "k", "v", "o", "bias"};

TEST_F(ForwardValidation, BaselineIsValid) {
  // The baseline passes validation (why_not validates first and throws on a validation failure).
  EXPECT_NO_THROW(attnlab::why_not("auto", forward_args_()));
}

TEST_F(ForwardValidation, Rank) {
  reject_forward([](ForwardArgs& a) { a.q.rank = 3; }, "q must have rank 4");
  reject_forward([](ForwardArgs& a) { a.k.rank = 2; }, "k must have rank 4");
  reject_forward([](ForwardArgs& a) { a.v.rank = 1; }, "v must have rank 4");
  reject_forward([](ForwardArgs& a) { a.o.rank = 3; }, "o must have rank 4");
  reject_forward([](ForwardArgs& a) { a.lse.rank = 4; }, "lse must have rank 3");
  reject_forward([](ForwardArgs& a) { a.options.bias.rank = 3; }, "bias must have rank 4");
  reject_forward([](ForwardArgs& a) { a.options.q_seqlens.rank = 2; }, "q_seqlens must have rank 1");
  reject_forward([](ForwardArgs& a) { a.options.kv_seqlens.rank = 2; }, "kv_seqlens must have rank 1");
  // A present-but-rank-0 optional tensor (data set, rank 0) is not "absent".
  reject_forward([](ForwardArgs& a) { a.lse.rank = 0; }, "lse must have rank 3");
}

TEST_F(ForwardValidation, NullData) {
  for (const std::string& name : kTensors)
    reject_forward([&](ForwardArgs& a) { field(a, name).data = nullptr; }, name + ".data is null");
}

TEST_F(ForwardValidation, ExtentsAtLeastOne) {
  for (const std::string& name : kFourD)
    for (int d = 0; d < 4; ++d) {
      reject_forward([&](ForwardArgs& a) { field(a, name).shape[d] = 0; },
                     name + ".shape[" + std::to_string(d) + "] must be ≥ 1");
      reject_forward([&](ForwardArgs& a) { field(a, name).shape[d] = -3; },
                     name + ".shape[" + std::to_string(d) + "] must be ≥ 1");
    }
  reject_forward([](ForwardArgs& a) { a.lse.shape[2] = 0; }, "lse.shape[2] must be ≥ 1");
  reject_forward([](ForwardArgs& a) { a.options.q_seqlens.shape[0] = 0; }, "q_seqlens.shape[0] must be ≥ 1");
}

TEST_F(ForwardValidation, NegativeStrides) {
  for (const std::string& name : kFourD)
    for (int d = 0; d < 3; ++d)
      reject_forward([&](ForwardArgs& a) { field(a, name).strides[d] = -1; },
                     name + ".strides[" + std::to_string(d) + "] must be ≥ 0");
  reject_forward([](ForwardArgs& a) { a.lse.strides[0] = -12; }, "lse.strides[0] must be ≥ 0");
}

TEST_F(ForwardValidation, LastDimensionContiguous) {
  for (const std::string& name : kFourD)
    reject_forward([&](ForwardArgs& a) { field(a, name).strides[3] = 2; },
                   name + ": the last dimension must be contiguous");
  reject_forward([](ForwardArgs& a) { a.lse.strides[2] = 3; }, "lse: the last dimension must be contiguous");
  reject_forward([](ForwardArgs& a) { a.options.kv_seqlens.strides[0] = 2; },
                 "kv_seqlens: the last dimension must be contiguous");
}

TEST_F(ForwardValidation, Alignment) {
  for (const std::string& name : kTensors)
    reject_forward([&](ForwardArgs& a) { field(a, name) = shifted(field(a, name), 2); },
                   name + ".data is not aligned");
  // 16-bit inputs: one byte off.
  HostTensor q16(DType::bf16, {2, 3, 4, 8}), k16(DType::bf16, {2, 5, 2, 8}), v16(DType::bf16, {2, 5, 2, 6}),
      o16(DType::bf16, {2, 3, 4, 6});
  watch(q16, "q (bf16)"), watch(k16, "k (bf16)"), watch(v16, "v (bf16)"), watch(o16, "o (bf16)");
  reject_forward(
      [&](ForwardArgs& a) {
        a.q = shifted(q16.view(), 1), a.k = k16.view(), a.v = v16.view(), a.o = o16.view();
        a.options.bias = {};
      },
      "q.data is not aligned");
}

TEST_F(ForwardValidation, UnknownDtypeValue) {
  reject_forward([](ForwardArgs& a) { a.q.dtype = static_cast<attnlab::DType>(99); }, "q: unknown dtype");
  reject_forward([](ForwardArgs& a) { a.options.bias.dtype = static_cast<attnlab::DType>(42); },
                 "bias: unknown dtype");
}

TEST_F(ForwardValidation, SizeOverflow) {
  reject_forward(
      [](ForwardArgs& a) {
        a.q.shape[1] = std::int64_t(1) << 40;
        a.q.strides[1] = std::int64_t(1) << 40;
      },
      "q: size arithmetic overflows 64 bits");
  reject_forward(
      [](ForwardArgs& a) {
        a.k.shape[0] = std::numeric_limits<std::int64_t>::max();
        a.k.strides[0] = 1;  // (extent − 1)·stride fits; adding the other dimensions does not
        a.k.strides[1] = 1;
        a.k.shape[1] = 3;
      },
      "k: size arithmetic overflows 64 bits");
  reject_forward(
      [](ForwardArgs& a) {
        a.v.shape[0] = std::int64_t(1) << 61;  // element count fits, byte count (×4) does not
        a.v.strides[0] = 1;
        a.v.shape[1] = a.v.shape[2] = 1;
      },
      "v: size arithmetic overflows 64 bits");
  reject_forward(
      [](ForwardArgs& a) {
        a.q.data = reinterpret_cast<void*>(std::uintptr_t(0) - 64);  // near the top of the address space
      },
      "q: the tensor's address range wraps around");
}

TEST_F(ForwardValidation, OutputSelfOverlap) {
  reject_forward([](ForwardArgs& a) { a.o.strides[1] = 0; }, "o: output strides make distinct elements share memory");
  reject_forward([](ForwardArgs& a) { a.o.strides[2] = 2; },  // heads 2 apart, rows 6 long: interleaved
                 "o: output strides make distinct elements share memory");
  reject_forward([](ForwardArgs& a) { a.lse.strides[1] = 0; },
                 "lse: output strides make distinct elements share memory");
}

TEST_F(ForwardValidation, OutputsAliasInputs) {
  // Every aliasing view stays inside real buffers, so a library that failed to reject could not write out of bounds.
  reject_forward([](ForwardArgs& a) { a.o.data = a.q.data; }, "o overlaps q in memory");
  reject_forward([](ForwardArgs& a) { a.o.data = a.k.data; }, "o overlaps k in memory");
  reject_forward([](ForwardArgs& a) { a.lse.data = a.q.data; }, "lse overlaps q in memory");
  reject_forward([](ForwardArgs& a) { a.lse.data = a.options.bias.data; }, "lse overlaps bias in memory");
  reject_forward(
      [&](ForwardArgs& a) {
        a.options.bias = {};
        a.options.bool_mask = mask_.view();
        a.lse.data = mask_.data();
      },
      "lse overlaps bool_mask in memory");
  // v and the bias are smaller than o: place them in an arena with room for both.
  HostTensor arena(DType::f32, {1024});
  watch(arena, "arena");
  float* base = static_cast<float*>(arena.data());
  reject_forward([&](ForwardArgs& a) { a.v.data = base, a.o.data = base + 50; }, "o overlaps v in memory");
  reject_forward([&](ForwardArgs& a) { a.options.bias.data = base, a.o.data = base + 100; },
                 "o overlaps bias in memory");
  // A partial overlap: o (144 elements) ends one element into q.
  reject_forward([&](ForwardArgs& a) { a.q.data = base + 400, a.o.data = base + 400 - 143; },
                 "o overlaps q in memory");
}

TEST_F(ForwardValidation, OutputsAliasEachOther) {
  reject_forward([](ForwardArgs& a) { a.lse.data = static_cast<float*>(a.o.data) + 10; },
                 "outputs must not alias each other");
}

TEST_F(ForwardValidation, OutputAliasesSeqlens) {
  // Sequence lengths are inputs too: a path reads them while it writes O.
  HostTensor big(DType::i32, {2 * 3 * 4 * 6 + 8});
  watch(big, "buffer holding q_seqlens");
  big.set(0, 3);
  big.set(1, 2);
  reject_forward(
      [&](ForwardArgs& a) {
        a.options.q_seqlens = big.view();
        a.options.q_seqlens.shape[0] = 2;
        a.o.data = big.data();
      },
      "overlaps q_seqlens in memory");
}

TEST_F(ForwardValidation, DeviceMismatch) {
  for (const std::string name : {"k", "v", "o", "lse", "bias", "q_seqlens", "kv_seqlens"})
    reject_forward([&](ForwardArgs& a) { field(a, name).device = attnlab::Device::cuda; },
                   std::string(name) + " is on cuda:0 but q is on cpu:0");
  reject_forward(
      [&](ForwardArgs& a) {
        a.options.bias = {};
        a.options.bool_mask = mask_.view();
        a.options.bool_mask.device = attnlab::Device::cuda;
      },
      "bool_mask is on cuda:0 but q is on cpu:0");
  // All on CUDA, one on another GPU.
  reject_forward(
      [&](ForwardArgs& a) {
        for (const std::string& name : kTensors) field(a, name).device = attnlab::Device::cuda;
        a.v.device_index = 1;
      },
      "v is on cuda:1 but q is on cuda:0");
}

TEST_F(ForwardValidation, InputDtypes) {
  reject_forward([](ForwardArgs& a) { a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = attnlab::DType::i32; },
                 "q has dtype i32");
  reject_forward([](ForwardArgs& a) { a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = attnlab::DType::u8; },
                 "q has dtype u8");
  reject_forward([](ForwardArgs& a) { a.k.dtype = attnlab::DType::f16; }, "q, k and v must share one dtype");
  reject_forward([](ForwardArgs& a) { a.v.dtype = attnlab::DType::bf16; }, "q, k and v must share one dtype");
  reject_forward([](ForwardArgs& a) { a.o.dtype = attnlab::DType::f16; }, "o must have the inputs' dtype");
}

TEST_F(ForwardValidation, ShapeMismatches) {
  // Shrinking a view keeps it inside its buffer; only the shape relation is wrong.
  reject_forward([](ForwardArgs& a) { a.k.shape[0] = 1; }, "k.shape[0] (B = 1) must equal q.shape[0]");
  reject_forward([](ForwardArgs& a) { a.v.shape[0] = 1; }, "v.shape[0] (B = 1) must equal q.shape[0]");
  reject_forward([](ForwardArgs& a) { a.k.shape[3] = 7; }, "k.shape[3] (Hqk = 7) must equal q.shape[3]");
  reject_forward([](ForwardArgs& a) { a.v.shape[1] = 4; }, "v.shape[1] (S = 4) must equal k.shape[1]");
  reject_forward([](ForwardArgs& a) { a.v.shape[2] = 1; }, "v.shape[2] (K = 1) must equal k.shape[2]");
  for (int d = 0; d < 4; ++d)
    reject_forward([&](ForwardArgs& a) { a.o.shape[d] -= 1; }, "o must have shape (B, T, N, Hv) = (2, 3, 4, 6)");
}

TEST_F(ForwardValidation, HeadsMultipleOfKvHeads) {
  reject_forward(
      [](ForwardArgs& a) {
        a.q.shape[2] = 3;  // N = 3 over K = 2
        a.o.shape[2] = 3;
        a.lse.shape[1] = 3;
        a.options.bias.shape[1] = 1;
      },
      "N = 3 must be a multiple of KV heads K = 2");
}

TEST_F(ForwardValidation, ScaleFinite) {
  for (float s : {kInf, -kInf, kNaN})
    reject_forward([&](ForwardArgs& a) { a.options.scale = s; }, "scale must be finite");
}

TEST_F(ForwardValidation, Softcap) {
  for (float s : {-1.0f, -1e-30f, kNaN, kInf})
    reject_forward([&](ForwardArgs& a) { a.options.softcap = s; }, "softcap must be finite and ≥ 0");
}

TEST_F(ForwardValidation, MaskOptions) {
  reject_forward([](ForwardArgs& a) { a.options.mask.window_left = -2; }, "mask.window_left must be ≥ 0, or −1");
  reject_forward([](ForwardArgs& a) { a.options.mask.window_right = -5; }, "mask.window_right must be ≥ 0, or −1");
  reject_forward([](ForwardArgs& a) { a.options.mask.align = static_cast<attnlab::MaskAlign>(7); },
                 "mask.align is not a MaskAlign");
}

TEST_F(ForwardValidation, Seqlens) {
  HostTensor f32lens(DType::f32, {2}), long_lens(DType::i32, {3});
  watch(f32lens, "f32 lengths"), watch(long_lens, "long lengths");
  f32lens.set(0, 1), f32lens.set(1, 1);
  for (std::int64_t i = 0; i < 3; ++i) long_lens.set(i, 1);
  reject_forward([&](ForwardArgs& a) { a.options.q_seqlens = f32lens.view(); }, "q_seqlens must be i32, got f32");
  reject_forward([&](ForwardArgs& a) { a.options.kv_seqlens = long_lens.view(); },
                 "kv_seqlens must have shape (B) = (2), got (3)");
  // Out of range: each value is checked against [0, T] / [0, S].
  for (auto [name, index, value, rule] :
       {std::tuple{"q", 0, -1, "q_seqlens[0] = -1 is outside [0, 3]"},
        std::tuple{"q", 1, 4, "q_seqlens[1] = 4 is outside [0, 3]"},
        std::tuple{"kv", 1, 6, "kv_seqlens[1] = 6 is outside [0, 5]"},
        std::tuple{"kv", 0, std::numeric_limits<std::int32_t>::min(), "kv_seqlens[0] = -2147483648 is outside"}}) {
    HostTensor lens(DType::i32, {2});
    lens.set(0, 1), lens.set(1, 1);
    lens.set(index, value);
    watch(lens, "lengths");
    reject_forward(
        [&](ForwardArgs& a) { (std::string(name) == "q" ? a.options.q_seqlens : a.options.kv_seqlens) = lens.view(); },
        rule);
    unwatch_last();
  }
}

TEST_F(ForwardValidation, BiasAndBoolMaskTogether) {
  reject_forward([&](ForwardArgs& a) { a.options.bool_mask = mask_.view(); },
                 "give at most one of bias and bool_mask");
}

TEST_F(ForwardValidation, BiasShape) {
  const std::string rule = "bias must have shape (B|1, N|1, T, S) = (2|1, 4|1, 3, 5)";
  HostTensor bias(DType::f32, {3, 4, 3, 5});  // B = 3 where the problem has 2
  watch(bias, "bias (3, 4, 3, 5)");
  reject_forward([&](ForwardArgs& a) { a.options.bias = bias.view(); }, rule);
  reject_forward([](ForwardArgs& a) { a.options.bias.shape[1] = 2; }, rule);  // neither N nor 1
  reject_forward([](ForwardArgs& a) { a.options.bias.shape[2] = 2; }, rule);
  reject_forward([](ForwardArgs& a) { a.options.bias.shape[3] = 4; }, rule);
  reject_forward([](ForwardArgs& a) { a.options.bias.shape[2] = 1; }, rule);  // T and S never broadcast
  reject_forward(
      [&](ForwardArgs& a) {
        a.options.bias = {};
        a.options.bool_mask = mask_.view();
        a.options.bool_mask.shape[3] = 4;
      },
      "bool_mask must have shape (B|1, N|1, T, S)");
}

TEST_F(ForwardValidation, BiasAndMaskDtypes) {
  reject_forward([](ForwardArgs& a) { a.options.bias.dtype = attnlab::DType::f16; },
                 "bias must be f32 or the inputs' dtype f32, got f16");
  reject_forward([](ForwardArgs& a) { a.options.bias.dtype = attnlab::DType::i32; },
                 "bias must be f32 or the inputs' dtype f32, got i32");
  reject_forward(
      [&](ForwardArgs& a) {
        a.options.bias = {};
        a.options.bool_mask = t_.bias.view();  // an f32 tensor as a mask
      },
      "bool_mask must be u8");
}

TEST_F(ForwardValidation, LseShapeAndDtype) {
  reject_forward([](ForwardArgs& a) { a.lse.dtype = attnlab::DType::f16; }, "lse must be f32, got f16");
  for (int d = 0; d < 3; ++d)
    reject_forward([&](ForwardArgs& a) { a.lse.shape[d] -= 1; }, "lse must have shape (B, N, T) = (2, 4, 3)");
}

TEST_F(ForwardValidation, UnknownPath) {
  for (const char* name : {"nope", "", "CPU-NAIVE", "cpu_flash", "auto "})
    reject_forward([&](ForwardArgs& a) { a.options.path = name; }, "unknown path '" + std::string(name) + "'");
  // The message lists the paths this build has.
  try {
    ForwardArgs a = forward_args_();
    a.options.path = "nope";
    attnlab::forward(ctx_, a);
    ADD_FAILURE() << "accepted";
  } catch (const attnlab::Error& e) {
    for (const char* known : {"auto", "cpu-naive", "cpu-flash"})
      EXPECT_NE(std::string(e.what()).find(known), std::string::npos) << e.what();
  }
}

TEST_F(ForwardValidation, ForcedPathCannotRunFp8) {
  // FP8 inputs are valid arguments, but no CPU path runs them: unsupported, naming the path and the dtype.
  HostTensor q8(DType::e4m3, {2, 3, 4, 8}), k8(DType::e4m3, {2, 5, 2, 8}), v8(DType::e4m3, {2, 5, 2, 6}),
      o8(DType::e4m3, {2, 3, 4, 6});
  for (HostTensor* t : {&q8, &k8, &v8}) {
    for (std::int64_t i = 0; i < t->numel(); ++i) t->set(i, 0x38);  // 1.0 in e4m3
    watch(*t, "fp8 input");
  }
  o8.poison();
  watch(o8, "o (fp8)");
  // Host scales: valid arguments (only a GPU path would read them).
  static float scales[8] = {1, 1, 1, 448, 1.0f / 448, 1, 0, 0};
  attnlab::Fp8ForwardScales fp8;
  fp8.descale_q = &scales[0], fp8.descale_k = &scales[1], fp8.descale_v = &scales[2];
  fp8.scale_s = &scales[3], fp8.descale_s = &scales[4], fp8.scale_o = &scales[5];
  for (const std::string path : {"cpu-naive", "cpu-flash"})
    for (DType dt : {DType::e4m3, DType::e5m2})
      reject_forward(
          [&](ForwardArgs& a) {
            a.q = q8.view(), a.k = k8.view(), a.v = v8.view(), a.o = o8.view();
            a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = dt;
            a.options.bias = {};
            a.options.path = path;
            a.fp8 = fp8;
          },
          path + ": cannot run this forward call", ErrorCode::unsupported);
  reject_forward(
      [&](ForwardArgs& a) {
        a.q = q8.view(), a.k = k8.view(), a.v = v8.view(), a.o = o8.view();
        a.options.bias = {};
        a.options.path = "cpu-flash";
        a.fp8 = fp8;
      },
      "e4m3", ErrorCode::unsupported);
  if (!attnlab::build_info().cuda)
    reject_forward(
        [&](ForwardArgs& a) {
          a.q = q8.view(), a.k = k8.view(), a.v = v8.view(), a.o = o8.view();
          a.options.bias = {};
          a.fp8 = fp8;
        },
        "auto: no path in this build can run this forward call", ErrorCode::unsupported);
}

TEST_F(ForwardValidation, CudaTensorsOnCpuPaths) {
  const auto all_cuda = [](ForwardArgs& a) {
    for (const std::string& name : kTensors) field(a, name).device = attnlab::Device::cuda;
  };
  for (const std::string path : {"cpu-naive", "cpu-flash"})
    reject_forward(
        [&](ForwardArgs& a) {
          all_cuda(a);
          a.options.path = path;
        },
        path + ": cannot run this forward call: it runs on cpu tensors, these are on cuda", ErrorCode::unsupported);
  if (attnlab::build_info().cuda) GTEST_SKIP() << "CUDA paths are built in: auto may pick one (needs a GPU test)";
  reject_forward(all_cuda, "auto: no path in this build can run this forward call", ErrorCode::unsupported);
}

TEST(ResourceErrors, NaiveScoreMatrixTooLargeIsOutOfMemory) {
  // cpu-naive materialises the (B, N, T, S) scores: 2^20 × 2^20 floats (4 TiB) cannot be had. The call must fail
  // with out_of_memory naming the path, write nothing, and leave the context usable.
  ATTNLAB_TEST_RNG(rng);
  Case c;
  c.path = "cpu-naive";
  c.T = c.S = std::int64_t(1) << 20;
  c.Hqk = c.Hv = 1;
  Tensors t = make_inputs(c, rng);
  GradTensors g = make_grads(c, rng);
  attnlab::Context ctx;
  const auto o0 = t.o.snapshot(), l0 = t.lse.snapshot(), dq0 = g.dq.snapshot();
  for (bool backward : {false, true}) {
    try {
      if (backward)
        attnlab::backward(ctx, backward_args(c, t, g));
      else
        attnlab::forward(ctx, forward_args(c, t));
      ADD_FAILURE() << "a 4 TiB workspace was accepted";
    } catch (const attnlab::Error& e) {
      EXPECT_EQ(int(e.code()), int(ErrorCode::out_of_memory)) << e.what();
      EXPECT_NE(std::string(e.what()).find("cpu-naive"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(t.o.same_bytes(o0)) << "a failed call wrote O";
  EXPECT_TRUE(t.lse.same_bytes(l0)) << "a failed call wrote LSE";
  EXPECT_TRUE(g.dq.same_bytes(dq0)) << "a failed call wrote dQ";
  Case small;
  small.path = "cpu-naive";
  small.T = 9, small.S = 11, small.Hqk = small.Hv = 8;
  small.context = &ctx;
  check_forward(small, rng);
}

TEST(ParseDtype, RejectsUnknownNames) {
  for (const char* name : {"fp64", "", "int8", "f 32", "bf-16", "e4m3fn"}) {
    try {
      attnlab::parse_dtype(name);
      ADD_FAILURE() << "parse_dtype accepted '" << name << "'";
    } catch (const attnlab::Error& e) {
      EXPECT_EQ(int(e.code()), int(ErrorCode::invalid_argument));
      EXPECT_NE(std::string(e.what()).find("unknown dtype '" + std::string(name) + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(ContextValidation, NegativeThreadCount) {
  attnlab::Context ctx;
  ctx.set_num_threads(3);
  try {
    ctx.set_num_threads(-1);
    ADD_FAILURE() << "accepted -1 threads";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(int(e.code()), int(ErrorCode::invalid_argument));
    EXPECT_NE(std::string(e.what()).find("num_threads must be ≥ 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ctx.num_threads(), 3) << "a rejected setting must leave the old one";
}

TEST(TensorViewValidation, ContiguousRank) {
  float x = 1.0f;
  EXPECT_THROW(TensorView::contiguous(&x, DType::f32, {}), attnlab::Error);
  try {
    TensorView::contiguous(&x, DType::f32, {1, 1, 1, 1, 1});
    ADD_FAILURE() << "rank 5 accepted";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(int(e.code()), int(ErrorCode::invalid_argument));
    EXPECT_NE(std::string(e.what()).find("rank 5 is outside 1..4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnlab_test
