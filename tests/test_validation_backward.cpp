// Every precondition specific to a backward call: dtype, d_o, the forward call's lse, the gradients' shapes,
// dtypes, devices, self-overlap and aliasing. The checks shared with forward run too (a sample is repeated here).
// Each test expects the error code, a message naming the rule, and every buffer untouched.
#include <gtest/gtest.h>

#include <string>

#include "validation.h"

namespace attnlab_test {
namespace {

using attnlab::BackwardArgs;
using attnlab::ErrorCode;

class BackwardValidation : public ValidationTest {};

TensorView& grad_field(BackwardArgs& a, const std::string& name) {
  if (name == "dq") return a.dq;
  if (name == "dk") return a.dk;
  if (name == "dv") return a.dv;
  return a.d_o;
}

TEST_F(BackwardValidation, BaselineIsValidationClean) {
  // Only dispatch may fail the baseline (a path may be missing); validation must not.
  try {
    attnlab::backward(ctx_, backward_args_());
  } catch (const attnlab::Error& e) {
    EXPECT_NE(int(e.code()), int(ErrorCode::invalid_argument)) << e.what();
  }
}

// FP8 backward calls carry their scales (the rules of an FP8 backward: test_fp8_validation.cpp).
TEST_F(BackwardValidation, Fp8NeedsItsScales) {
  HostTensor q8(DType::e4m3, {2, 3, 4, 8}), k8(DType::e4m3, {2, 5, 2, 8}), v8(DType::e4m3, {2, 5, 2, 6}),
      o8(DType::e4m3, {2, 3, 4, 6}), do8(DType::e4m3, {2, 3, 4, 6}), dq8(DType::e4m3, {2, 3, 4, 8}),
      dk8(DType::e4m3, {2, 5, 2, 8}), dv8(DType::e4m3, {2, 5, 2, 6});
  for (HostTensor* t : {&q8, &k8, &v8, &o8, &do8, &dq8, &dk8, &dv8}) watch(*t, "fp8 tensor");
  for (DType dt : {DType::e4m3, DType::e5m2})
    reject_backward(
        [&](BackwardArgs& a) {
          a.q = q8.view(), a.k = k8.view(), a.v = v8.view(), a.o = o8.view(), a.d_o = do8.view();
          a.dq = dq8.view(), a.dk = dk8.view(), a.dv = dv8.view();
          for (TensorView* t : {&a.q, &a.k, &a.v, &a.o, &a.d_o, &a.dq, &a.dk, &a.dv}) t->dtype = dt;
          a.options.bias = {};
        },
        std::string(dtype_name(dt)) + " inputs need their scales: set BackwardArgs::fp8");
}

TEST_F(BackwardValidation, MissingLse) {
  reject_backward([](BackwardArgs& a) { a.lse = {}; }, "backward needs the forward call's lse");
}

TEST_F(BackwardValidation, LseShapeAndDtype) {
  reject_backward([](BackwardArgs& a) { a.lse.dtype = attnlab::DType::bf16; }, "lse must be f32, got bf16");
  reject_backward([](BackwardArgs& a) { a.lse.shape[2] = 2; }, "lse must have shape (B, N, T) = (2, 4, 3)");
  reject_backward([](BackwardArgs& a) { a.lse.rank = 2; }, "lse must have rank 3");
  reject_backward([](BackwardArgs& a) { a.lse.data = nullptr; }, "lse.data is null");
}

TEST_F(BackwardValidation, GradOutput) {
  reject_backward([](BackwardArgs& a) { a.d_o.rank = 3; }, "d_o must have rank 4");
  reject_backward([](BackwardArgs& a) { a.d_o.data = nullptr; }, "d_o.data is null");
  reject_backward([](BackwardArgs& a) { a.d_o.strides[3] = 2; }, "d_o: the last dimension must be contiguous");
  reject_backward([](BackwardArgs& a) { a.d_o = shifted(a.d_o, 2); }, "d_o.data is not aligned");
  for (int d = 0; d < 4; ++d)
    reject_backward([&](BackwardArgs& a) { a.d_o.shape[d] -= 1; }, "d_o must have the shape of o (2, 3, 4, 6)");
  reject_backward([](BackwardArgs& a) { a.d_o.dtype = attnlab::DType::f16; }, "d_o must have the dtype of o (f32)");
  reject_backward([](BackwardArgs& a) { a.d_o.device = attnlab::Device::cuda; }, "d_o is on cuda:0 but q is on cpu:0");
}

TEST_F(BackwardValidation, GradientsGenericTensorRules) {
  for (const std::string name : {"dq", "dk", "dv"}) {
    reject_backward([&](BackwardArgs& a) { grad_field(a, name).rank = 3; }, name + " must have rank 4");
    reject_backward([&](BackwardArgs& a) { grad_field(a, name).data = nullptr; }, name + ".data is null");
    reject_backward([&](BackwardArgs& a) { grad_field(a, name).shape[1] = 0; }, name + ".shape[1] must be ≥ 1");
    reject_backward([&](BackwardArgs& a) { grad_field(a, name).strides[0] = -1; }, name + ".strides[0] must be ≥ 0");
    reject_backward([&](BackwardArgs& a) { grad_field(a, name).strides[3] = 3; },
                    name + ": the last dimension must be contiguous");
    reject_backward([&](BackwardArgs& a) { grad_field(a, name) = shifted(grad_field(a, name), 1); },
                    name + ".data is not aligned");
    reject_backward([&](BackwardArgs& a) { grad_field(a, name).device = attnlab::Device::cuda; },
                    name + " is on cuda:0 but q is on cpu:0");
  }
}

TEST_F(BackwardValidation, GradientShapes) {
  for (int d = 0; d < 4; ++d) {
    reject_backward([&](BackwardArgs& a) { a.dq.shape[d] -= 1; }, "dq must have the shape of q (2, 3, 4, 8)");
    reject_backward([&](BackwardArgs& a) { a.dk.shape[d] -= 1; }, "dk must have the shape of k (2, 5, 2, 8)");
    reject_backward([&](BackwardArgs& a) { a.dv.shape[d] -= 1; }, "dv must have the shape of v (2, 5, 2, 6)");
  }
}

TEST_F(BackwardValidation, GradientDtypes) {
  reject_backward([](BackwardArgs& a) { a.dq.dtype = attnlab::DType::f16; }, "dq must have the dtype of q (f32), got f16");
  reject_backward([](BackwardArgs& a) { a.dk.dtype = attnlab::DType::bf16; }, "dk must have the dtype of k (f32)");
  reject_backward([](BackwardArgs& a) { a.dv.dtype = attnlab::DType::i32; }, "dv must have the dtype of v (f32)");
}

TEST_F(BackwardValidation, GradientSelfOverlap) {
  reject_backward([](BackwardArgs& a) { a.dq.strides[2] = 0; }, "dq: output strides make distinct elements share memory");
  reject_backward([](BackwardArgs& a) { a.dk.strides[1] = 4; }, "dk: output strides make distinct elements share memory");
  reject_backward([](BackwardArgs& a) { a.dv.strides[0] = 0; }, "dv: output strides make distinct elements share memory");
}

TEST_F(BackwardValidation, GradientsAliasInputs) {
  // Each gradient placed inside an input at least as large, or in an arena holding both.
  reject_backward([](BackwardArgs& a) { a.dq.data = a.q.data; }, "dq overlaps q in memory");
  reject_backward([](BackwardArgs& a) { a.dk.data = a.k.data; }, "dk overlaps k in memory");
  reject_backward([](BackwardArgs& a) { a.dv.data = a.v.data; }, "dv overlaps v in memory");
  reject_backward([](BackwardArgs& a) { a.dv.data = a.o.data; }, "dv overlaps o in memory");
  reject_backward([](BackwardArgs& a) { a.dv.data = a.d_o.data; }, "dv overlaps d_o in memory");
  reject_backward([](BackwardArgs& a) { a.dv.data = a.options.bias.data; }, "dv overlaps bias in memory");
  HostTensor arena(DType::f32, {1024});
  watch(arena, "arena");
  float* base = static_cast<float*>(arena.data());
  reject_backward([&](BackwardArgs& a) { a.lse.data = base, a.dv.data = base + 10; }, "dv overlaps lse in memory");
  reject_backward([&](BackwardArgs& a) { a.q.data = base + 300, a.dk.data = base + 300 - 159; },
                  "dk overlaps q in memory");
}

TEST_F(BackwardValidation, GradientsAliasEachOther) {
  reject_backward([](BackwardArgs& a) { a.dv.data = a.dk.data; }, "dk overlaps dv in memory: outputs must not alias each other");
  reject_backward([](BackwardArgs& a) { a.dk.data = a.dq.data; }, "dq overlaps dk in memory: outputs must not alias each other");
}

TEST_F(BackwardValidation, SharedRulesApplyToBackward) {
  reject_backward([](BackwardArgs& a) { a.k.dtype = attnlab::DType::f16; }, "q, k and v must share one dtype");
  reject_backward([](BackwardArgs& a) { a.options.softcap = -2.0f; }, "softcap must be finite and ≥ 0");
  reject_backward([](BackwardArgs& a) { a.options.mask.window_left = -3; }, "mask.window_left must be ≥ 0, or −1");
  reject_backward([](BackwardArgs& a) { a.o.shape[3] = 5; }, "o must have shape (B, T, N, Hv)");
  reject_backward([](BackwardArgs& a) { a.options.path = "nope"; }, "unknown path 'nope'");
  reject_backward([&](BackwardArgs& a) { a.options.bool_mask = mask_.view(); }, "give at most one of bias and bool_mask");
}

TEST_F(BackwardValidation, CudaTensorsOnCpuPaths) {
  const auto all_cuda = [](BackwardArgs& a) {
    for (TensorView* t : {&a.q, &a.k, &a.v, &a.o, &a.d_o, &a.lse, &a.dq, &a.dk, &a.dv, &a.options.bias,
                          &a.options.q_seqlens, &a.options.kv_seqlens})
      t->device = attnlab::Device::cuda;
  };
  for (const std::string path : {"cpu-naive", "cpu-flash"})
    reject_backward(
        [&](BackwardArgs& a) {
          all_cuda(a);
          a.options.path = path;
        },
        path + ": cannot run this backward call: it runs on cpu tensors, these are on cuda", ErrorCode::unsupported);
  if (attnlab::build_info().cuda) GTEST_SKIP() << "CUDA paths are built in: auto may pick one (needs a GPU test)";
  reject_backward(all_cuda, "auto: no path in this build can run this backward call", ErrorCode::unsupported);
}

}  // namespace
}  // namespace attnlab_test
