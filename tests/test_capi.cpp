// The C ABI (attnlab.h): contexts, init defaults, forward and backward equal to the C++ API bit for bit, the
// path_ran string (truncation included), status codes and the per-thread last error, NULL pointers rejected
// cleanly, and the path listing. test_capi_abi checks the struct versioning and the workspace fields.
#include "attnlab/attnlab.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <tuple>

#include "capi_util.h"
#include "harness.h"

namespace attnlab_test {
namespace {

TEST(CApi, ContextLifecycle) {
  attnlab_context* ctx = nullptr;
  ASSERT_EQ(attnlab_context_create(&ctx), ATTNLAB_OK);
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(attnlab_context_set_num_threads(ctx, 2), ATTNLAB_OK);
  EXPECT_EQ(attnlab_context_set_num_threads(ctx, 0), ATTNLAB_OK);
  EXPECT_EQ(attnlab_context_set_num_threads(ctx, -1), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("num_threads"), std::string::npos) << attnlab_last_error();
  EXPECT_EQ(attnlab_context_set_stream(ctx, nullptr), ATTNLAB_OK);
  attnlab_context_destroy(ctx);
  attnlab_context_destroy(nullptr);  // a no-op, like free(NULL)
}

TEST(CApi, InitDefaults) {
  attnlab_options o;
  std::memset(&o, 0xab, sizeof o);
  ASSERT_EQ(attnlab_options_init(&o), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_EQ(o.struct_size, sizeof o);
  EXPECT_EQ(o.has_scale, 0);
  EXPECT_EQ(o.softcap, 0.0f);
  EXPECT_EQ(o.causal, 0);
  EXPECT_EQ(o.mask_align, ATTNLAB_TOP_LEFT);
  EXPECT_EQ(o.window_left, -1);
  EXPECT_EQ(o.window_right, -1);
  for (const attnlab_tensor* t : {&o.q_seqlens, &o.kv_seqlens, &o.bias, &o.bool_mask}) EXPECT_TRUE(is_absent(*t));
  EXPECT_TRUE(o.path == nullptr || std::string(o.path) == "auto");

  attnlab_forward_args f;
  std::memset(&f, 0xab, sizeof f);
  ASSERT_EQ(attnlab_forward_args_init(&f), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_EQ(f.struct_size, sizeof f);
  for (const attnlab_tensor* t : {&f.q, &f.k, &f.v, &f.o, &f.lse}) EXPECT_TRUE(is_absent(*t));
  EXPECT_EQ(f.options, nullptr);
  EXPECT_EQ(f.has_workspace, 0);
  EXPECT_EQ(f.workspace, nullptr);
  EXPECT_EQ(f.workspace_bytes, 0u);

  attnlab_backward_args b;
  std::memset(&b, 0xab, sizeof b);
  ASSERT_EQ(attnlab_backward_args_init(&b), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_EQ(b.struct_size, sizeof b);
  for (const attnlab_tensor* t : {&b.q, &b.k, &b.v, &b.o, &b.d_o, &b.lse, &b.dq, &b.dk, &b.dv})
    EXPECT_TRUE(is_absent(*t));
  EXPECT_EQ(b.options, nullptr);
  EXPECT_EQ(b.has_workspace, 0);
  EXPECT_EQ(b.workspace, nullptr);
  EXPECT_EQ(b.workspace_bytes, 0u);
}

TEST(CApi, TensorContiguous) {
  float x[60];
  const int64_t shape[4] = {3, 4, 5, 1};
  const attnlab_tensor t = attnlab_tensor_contiguous(x, ATTNLAB_F16, ATTNLAB_CPU, 3, shape);
  EXPECT_EQ(t.data, x);
  EXPECT_EQ(t.dtype, ATTNLAB_F16);
  EXPECT_EQ(t.device, ATTNLAB_CPU);
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.shape[0], 3);
  EXPECT_EQ(t.shape[2], 5);
  EXPECT_EQ(t.strides[0], 20);
  EXPECT_EQ(t.strides[1], 5);
  EXPECT_EQ(t.strides[2], 1);
}

// ---------------------------------------------------------------------------------------------------------------
// Round trips: the C ABI and the C++ API produce the same bytes.
// ---------------------------------------------------------------------------------------------------------------
using PathDtype = std::tuple<std::string, DType>;
class CApiRoundTrip : public ::testing::TestWithParam<PathDtype> {
 protected:
  Case feature_case() const {
    Case c;
    c.path = std::get<0>(GetParam());
    c.dtype = std::get<1>(GetParam());
    c.B = 3, c.T = 21, c.S = 34, c.N = 4, c.K = 2, c.Hqk = 24, c.Hv = 40;
    c.scale = 0.3f;
    c.softcap = 4.0f;
    c.mask.causal = true;
    c.mask.align = attnlab::MaskAlign::bottom_right;
    c.mask.window_left = 6;
    c.q_lens = {21, 9, 0};
    c.kv_lens = {34, 12, 5};
    c.bias = BiasKind::same_dtype;
    c.bias_per_batch = false;
    c.q_layout = permuted12();
    c.o_layout = c.lse_layout = c.grad_layout = padded();
    c.threads = 2;
    return c;
  }
};

TEST_P(CApiRoundTrip, ForwardEqualsCpp) {
  ATTNLAB_TEST_RNG(rng);
  for (bool bool_mask : {false, true}) {
    Case c = feature_case();
    if (bool_mask) c.bias = BiasKind::bool_mask, c.hidden_rows = 2;
    Tensors t = make_inputs(c, rng);
    attnlab::Context ctx;
    ctx.set_num_threads(c.threads);
    const attnlab::RunInfo info = attnlab::forward(ctx, forward_args(c, t));
    const auto o_cpp = t.o.snapshot(), lse_cpp = t.lse.snapshot();
    t.o.poison();
    t.lse.poison();
    CContext cc;
    ASSERT_EQ(attnlab_context_set_num_threads(cc.ctx, c.threads), ATTNLAB_OK);
    const attnlab::ForwardArgs a = forward_args(c, t);
    const CForward ca = to_c(a);
    char ran[64];
    ASSERT_EQ(attnlab_forward(cc.ctx, &ca.args, ran, sizeof ran), ATTNLAB_OK) << attnlab_last_error();
    EXPECT_EQ(std::string(ran), info.path);
    EXPECT_TRUE(t.o.same_bytes(o_cpp)) << "O differs between the C ABI and the C++ API";
    EXPECT_TRUE(t.lse.same_bytes(lse_cpp)) << "LSE differs between the C ABI and the C++ API";
    check_forward_outputs(c, t, expected_forward(c, t));
  }
}

TEST_P(CApiRoundTrip, BackwardEqualsCpp) {
  ATTNLAB_TEST_RNG(rng);
  Case c = feature_case();
  Tensors t = make_inputs(c, rng);
  attnlab::Context ctx;
  ctx.set_num_threads(c.threads);
  attnlab::forward(ctx, forward_args(c, t));
  GradTensors g = make_grads(c, rng);
  const attnlab::RunInfo info = attnlab::backward(ctx, backward_args(c, t, g));
  const auto dq = g.dq.snapshot(), dk = g.dk.snapshot(), dv = g.dv.snapshot();
  for (HostTensor* x : {&g.dq, &g.dk, &g.dv}) x->poison();
  CContext cc;
  ASSERT_EQ(attnlab_context_set_num_threads(cc.ctx, c.threads), ATTNLAB_OK);
  const attnlab::BackwardArgs a = backward_args(c, t, g);
  const CBackward ca = to_c(a);
  char ran[64];
  ASSERT_EQ(attnlab_backward(cc.ctx, &ca.args, ran, sizeof ran), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_EQ(std::string(ran), info.path);
  EXPECT_TRUE(g.dq.same_bytes(dq)) << "dQ differs between the C ABI and the C++ API";
  EXPECT_TRUE(g.dk.same_bytes(dk)) << "dK differs between the C ABI and the C++ API";
  EXPECT_TRUE(g.dv.same_bytes(dv)) << "dV differs between the C ABI and the C++ API";
}

INSTANTIATE_TEST_SUITE_P(Paths, CApiRoundTrip,
                         ::testing::Combine(::testing::Values(std::string("auto"), std::string("cpu-naive"),
                                                              std::string("cpu-flash")),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         [](const ::testing::TestParamInfo<PathDtype>& info) {
                           std::string name = std::get<0>(info.param) + "_" + dtype_name(std::get<1>(info.param));
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// ---------------------------------------------------------------------------------------------------------------
// path_ran, status codes, last error, NULL pointers
// ---------------------------------------------------------------------------------------------------------------
TEST_F(CApiCalls, PathRanAndTruncation) {
  CForward a = to_c(forward_args(c_, t_));
  a.options.path = nullptr;  // NULL means auto
  char ran[32];
  ASSERT_EQ(run(a, ran, sizeof ran), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_STREQ(ran, "cpu-flash");
  a.options.path = "cpu-naive";
  std::memset(ran, 'x', sizeof ran);
  ASSERT_EQ(run(a, ran, 4), ATTNLAB_OK);
  EXPECT_STREQ(ran, "cpu") << "truncated to 3 characters and a NUL";
  EXPECT_EQ(ran[4], 'x') << "nothing written past path_ran_size";
  std::memset(ran, 'x', sizeof ran);
  ASSERT_EQ(run(a, ran, 1), ATTNLAB_OK);
  EXPECT_EQ(ran[0], '\0');
  EXPECT_EQ(ran[1], 'x');
  std::memset(ran, 'x', sizeof ran);
  ASSERT_EQ(run(a, ran, 0), ATTNLAB_OK);
  EXPECT_EQ(ran[0], 'x') << "size 0: nothing may be written";
  ASSERT_EQ(run(a, ran, 10), ATTNLAB_OK);
  EXPECT_STREQ(ran, "cpu-naive");  // exactly fits (9 characters + NUL)
  EXPECT_EQ(run(a, nullptr, 0), ATTNLAB_OK);
  EXPECT_EQ(run(a, nullptr, 16), ATTNLAB_OK) << "a NULL path_ran is allowed whatever the size";
  a.args.lse = attnlab_tensor{};  // absent optional output
  EXPECT_EQ(run(a), ATTNLAB_OK) << attnlab_last_error();
}

TEST_F(CApiCalls, StatusCodesAndLastError) {
  const auto o_before = t_.o.snapshot();
  CForward a = to_c(forward_args(c_, t_));
  a.args.k.shape[3] = 7;
  char ran[16] = "untouched";
  EXPECT_EQ(run(a, ran, sizeof ran), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("k.shape[3] (Hqk = 7) must equal q.shape[3]"), std::string::npos)
      << attnlab_last_error();
  EXPECT_TRUE(t_.o.same_bytes(o_before)) << "a failed call wrote O";

  a = to_c(forward_args(c_, t_));
  a.options.path = "nope";
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("unknown path 'nope'"), std::string::npos) << attnlab_last_error();

  // FP8 inputs: without scales a precondition fails; with scales (args.fp8) the CPU path refuses them.
  a = to_c(forward_args(c_, t_));
  a.args.q.dtype = a.args.k.dtype = a.args.v.dtype = a.args.o.dtype = ATTNLAB_E4M3;
  a.options.path = "cpu-flash";
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("scales"));
  const float one = 1.0f;
  attnlab_fp8_forward_scales fp8;
  ASSERT_EQ(attnlab_fp8_forward_scales_init(&fp8), ATTNLAB_OK);
  fp8.descale_q = fp8.descale_k = fp8.descale_v = fp8.scale_s = fp8.descale_s = fp8.scale_o = &one;
  a.args.fp8 = &fp8;
  EXPECT_EQ(run(a), ATTNLAB_UNSUPPORTED);
  EXPECT_TRUE(error_has("e4m3"));

  GradTensors g = make_grads(c_, rng_);
  CBackward b = to_c(backward_args(c_, t_, g));
  b.args.lse = attnlab_tensor{};
  EXPECT_EQ(run_backward(b.args), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("backward needs the forward call's lse"), std::string::npos)
      << attnlab_last_error();
  EXPECT_TRUE(t_.o.same_bytes(o_before));
}

TEST_F(CApiCalls, OutOfRangeEnumsRejected) {
  // Integers from C that are no valid enum value must be rejected, not cast blindly.
  const auto o_before = t_.o.snapshot();
  const CForward good = to_c(forward_args(c_, t_));
  CForward a = good;
  a.args.q.dtype = a.args.k.dtype = a.args.v.dtype = a.args.o.dtype = 99;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  a = good;
  a.args.q.dtype = -1;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  a = good;
  a.args.q.device = a.args.k.device = a.args.v.device = a.args.o.device = a.args.lse.device = 7;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  a = good;
  a.options.mask_align = 3;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("options.mask_align: 3 is not an attnlab_mask_align"));
  a = good;
  a.args.q.rank = 5;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  a = good;
  a.args.q.rank = -1;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(t_.o.same_bytes(o_before));
  EXPECT_EQ(run(good), ATTNLAB_OK) << attnlab_last_error();
}

TEST_F(CApiCalls, LastErrorIsPerThread) {
  CForward a = to_c(forward_args(c_, t_));
  a.options.softcap = -1.0f;
  ASSERT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  const std::string mine = attnlab_last_error();
  EXPECT_NE(mine.find("softcap"), std::string::npos) << mine;
  std::string other_initial, other_after;
  std::thread th([&] {
    other_initial = attnlab_last_error();
    attnlab_context* ctx = nullptr;
    attnlab_context_create(&ctx);
    CForward b = to_c(forward_args(c_, t_));
    b.options.window_left = -7;
    attnlab_forward(ctx, &b.args, nullptr, 0);
    other_after = attnlab_last_error();
    attnlab_context_destroy(ctx);
  });
  th.join();
  EXPECT_EQ(other_initial, "") << "a new thread has no last error";
  EXPECT_NE(other_after.find("window_left"), std::string::npos) << other_after;
  EXPECT_EQ(std::string(attnlab_last_error()), mine) << "another thread's failure changed this thread's last error";
}

TEST_F(CApiCalls, NullPointersRejected) {
  const CForward ca = to_c(forward_args(c_, t_));
  const attnlab_forward_args& a = ca.args;
  EXPECT_EQ(attnlab_forward(nullptr, &a, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_STRNE(attnlab_last_error(), "");
  EXPECT_EQ(attnlab_forward(cc_.ctx, nullptr, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  GradTensors g = make_grads(c_, rng_);
  const CBackward cb = to_c(backward_args(c_, t_, g));
  const attnlab_backward_args& b = cb.args;
  EXPECT_EQ(attnlab_backward(nullptr, &b, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_backward(cc_.ctx, nullptr, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_context_create(nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_context_set_stream(nullptr, nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_context_set_num_threads(nullptr, 1), ATTNLAB_INVALID_ARGUMENT);
  size_t bytes = 7;
  EXPECT_EQ(attnlab_forward_workspace_size(nullptr, &a, &bytes), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_forward_workspace_size(cc_.ctx, nullptr, &bytes), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_forward_workspace_size(cc_.ctx, &a, nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_forward_workspace_size: bytes is NULL"));
  EXPECT_EQ(attnlab_backward_workspace_size(cc_.ctx, &b, nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, 7u) << "a failed call wrote *bytes";
  // Init functions write nothing through NULL, and say so.
  EXPECT_EQ(attnlab_options_init(nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_options_init_sized: attnlab_options is NULL"));
  EXPECT_EQ(attnlab_forward_args_init(nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_backward_args_init(nullptr), ATTNLAB_INVALID_ARGUMENT);
  // Tensor data pointers: a NULL q is the validation rule "q.data is null".
  attnlab_forward_args n = a;
  n.q.data = nullptr;
  EXPECT_EQ(run(n), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("q.data is null"), std::string::npos) << attnlab_last_error();
}

TEST(CApi, PathListingMatchesCpp) {
  const auto paths = attnlab::list_paths();
  ASSERT_EQ(attnlab_path_count(), int32_t(paths.size()));
  for (int32_t i = 0; i < attnlab_path_count(); ++i) {
    const char* name = nullptr;
    const char* reason = nullptr;
    int32_t device = -1, available = -1;
    ASSERT_EQ(attnlab_path_info(i, &name, &device, &available, &reason), ATTNLAB_OK) << attnlab_last_error();
    ASSERT_NE(name, nullptr);
    EXPECT_EQ(std::string(name), paths[std::size_t(i)].name);
    EXPECT_EQ(device, int32_t(paths[std::size_t(i)].device));
    EXPECT_EQ(available != 0, paths[std::size_t(i)].available);
    if (!paths[std::size_t(i)].available) {
      ASSERT_NE(reason, nullptr);
      EXPECT_EQ(std::string(reason), paths[std::size_t(i)].unavailable);
    }
  }
  const char* name = nullptr;
  const char* reason = nullptr;
  int32_t device = 0, available = 0;
  EXPECT_EQ(attnlab_path_info(-1, &name, &device, &available, &reason), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_path_info(attnlab_path_count(), &name, &device, &available, &reason), ATTNLAB_INVALID_ARGUMENT);
}

TEST(CApi, Version) {
  ASSERT_NE(attnlab_version(), nullptr);
  EXPECT_EQ(std::string(attnlab_version()), attnlab::build_info().version);
}

}  // namespace
}  // namespace attnlab_test
