// The C ABI (attnlab.h): contexts, init defaults, forward and backward equal to the C++ API bit for bit, the
// path_ran string (truncation included), status codes and the per-thread last error, NULL pointers rejected
// cleanly, and the path listing.
#include "attnlab/attnlab.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <tuple>

#include "harness.h"

namespace attnlab_test {
namespace {

attnlab_tensor to_c(const TensorView& t) {
  attnlab_tensor c;
  std::memset(&c, 0, sizeof c);
  c.data = t.data;
  c.dtype = int32_t(t.dtype);
  c.device = int32_t(t.device);
  c.device_index = t.device_index;
  c.rank = t.rank;
  for (int d = 0; d < 4; ++d) {
    c.shape[d] = t.shape[d];
    c.strides[d] = t.strides[d];
  }
  return c;
}

// Fills C options from C++ options; `path` must outlive the call.
void to_c(const attnlab::Options& o, const std::string& path, attnlab_options* c) {
  attnlab_options_init(c);
  c->has_scale = o.scale.has_value();
  c->scale = o.scale.value_or(0.0f);
  c->softcap = o.softcap;
  c->causal = o.mask.causal;
  c->mask_align = o.mask.align == attnlab::MaskAlign::bottom_right ? ATTNLAB_BOTTOM_RIGHT : ATTNLAB_TOP_LEFT;
  c->window_left = o.mask.window_left;
  c->window_right = o.mask.window_right;
  c->q_seqlens = to_c(o.q_seqlens);
  c->kv_seqlens = to_c(o.kv_seqlens);
  c->bias = to_c(o.bias);
  c->bool_mask = to_c(o.bool_mask);
  c->path = path.c_str();
}

attnlab_forward_args to_c(const attnlab::ForwardArgs& a) {
  attnlab_forward_args c;
  attnlab_forward_args_init(&c);
  c.q = to_c(a.q), c.k = to_c(a.k), c.v = to_c(a.v), c.o = to_c(a.o), c.lse = to_c(a.lse);
  to_c(a.options, a.options.path, &c.options);
  return c;
}

attnlab_backward_args to_c(const attnlab::BackwardArgs& a) {
  attnlab_backward_args c;
  attnlab_backward_args_init(&c);
  c.q = to_c(a.q), c.k = to_c(a.k), c.v = to_c(a.v), c.o = to_c(a.o), c.d_o = to_c(a.d_o), c.lse = to_c(a.lse);
  c.dq = to_c(a.dq), c.dk = to_c(a.dk), c.dv = to_c(a.dv);
  to_c(a.options, a.options.path, &c.options);
  return c;
}

bool is_absent(const attnlab_tensor& t) { return t.data == nullptr && t.rank == 0; }

struct CContext {
  attnlab_context* ctx = nullptr;
  CContext() { EXPECT_EQ(attnlab_context_create(&ctx), ATTNLAB_OK) << attnlab_last_error(); }
  ~CContext() { attnlab_context_destroy(ctx); }
};

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
  attnlab_options_init(&o);
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
  attnlab_forward_args_init(&f);
  for (const attnlab_tensor* t : {&f.q, &f.k, &f.v, &f.o, &f.lse}) EXPECT_TRUE(is_absent(*t));
  EXPECT_EQ(f.options.window_left, -1);
  EXPECT_EQ(f.options.has_scale, 0);

  attnlab_backward_args b;
  std::memset(&b, 0xab, sizeof b);
  attnlab_backward_args_init(&b);
  for (const attnlab_tensor* t : {&b.q, &b.k, &b.v, &b.o, &b.d_o, &b.lse, &b.dq, &b.dk, &b.dv})
    EXPECT_TRUE(is_absent(*t));
  EXPECT_EQ(b.options.window_right, -1);
  EXPECT_TRUE(is_absent(b.options.bias));
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
    const attnlab_forward_args ca = to_c(a);
    char ran[64];
    ASSERT_EQ(attnlab_forward(cc.ctx, &ca, ran, sizeof ran), ATTNLAB_OK) << attnlab_last_error();
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
  const attnlab_backward_args ca = to_c(a);
  char ran[64];
  ASSERT_EQ(attnlab_backward(cc.ctx, &ca, ran, sizeof ran), ATTNLAB_OK) << attnlab_last_error();
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
class CApiCalls : public ::testing::Test {
 protected:
  CApiCalls() : rng_(fresh_seed()) {
    c_.T = 5, c_.S = 7, c_.N = 2, c_.K = 1, c_.Hqk = 8, c_.Hv = 4;
    t_ = make_inputs(c_, rng_);
  }
  attnlab_status run(const attnlab_forward_args& a, char* ran = nullptr, size_t size = 0) {
    return attnlab_forward(cc_.ctx, &a, ran, size);
  }
  Case c_;
  Rng rng_;
  Tensors t_;
  CContext cc_;
};

TEST_F(CApiCalls, PathRanAndTruncation) {
  attnlab_forward_args a = to_c(forward_args(c_, t_));
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
  a.lse = attnlab_tensor{};  // absent optional output
  EXPECT_EQ(run(a), ATTNLAB_OK) << attnlab_last_error();
}

TEST_F(CApiCalls, StatusCodesAndLastError) {
  const auto o_before = t_.o.snapshot();
  attnlab_forward_args a = to_c(forward_args(c_, t_));
  a.k.shape[3] = 7;
  char ran[16] = "untouched";
  EXPECT_EQ(run(a, ran, sizeof ran), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("k.shape[3] (Hqk = 7) must equal q.shape[3]"), std::string::npos)
      << attnlab_last_error();
  EXPECT_TRUE(t_.o.same_bytes(o_before)) << "a failed call wrote O";

  a = to_c(forward_args(c_, t_));
  a.options.path = "nope";
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("unknown path 'nope'"), std::string::npos) << attnlab_last_error();

  a = to_c(forward_args(c_, t_));
  a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = ATTNLAB_E4M3;
  a.options.path = "cpu-flash";
  EXPECT_EQ(run(a), ATTNLAB_UNSUPPORTED);
  EXPECT_NE(std::string(attnlab_last_error()).find("cpu-flash"), std::string::npos) << attnlab_last_error();

  attnlab_backward_args b;
  attnlab_backward_args_init(&b);
  GradTensors g = make_grads(c_, rng_);
  b = to_c(backward_args(c_, t_, g));
  b.lse = attnlab_tensor{};
  EXPECT_EQ(attnlab_backward(cc_.ctx, &b, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("backward needs the forward call's lse"), std::string::npos)
      << attnlab_last_error();
  EXPECT_TRUE(t_.o.same_bytes(o_before));
}

TEST_F(CApiCalls, OutOfRangeEnumsRejected) {
  // Integers from C that are no valid enum value must be rejected, not cast blindly.
  const auto o_before = t_.o.snapshot();
  const attnlab_forward_args good = to_c(forward_args(c_, t_));
  attnlab_forward_args a = good;
  a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = 99;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  a = good;
  a.q.dtype = -1;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  a = good;
  a.q.device = a.k.device = a.v.device = a.o.device = a.lse.device = 7;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  a = good;
  a.options.mask_align = 3;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  a = good;
  a.q.rank = 5;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  a = good;
  a.q.rank = -1;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(t_.o.same_bytes(o_before));
  EXPECT_EQ(run(good), ATTNLAB_OK) << attnlab_last_error();
}

TEST_F(CApiCalls, LastErrorIsPerThread) {
  attnlab_forward_args a = to_c(forward_args(c_, t_));
  a.options.softcap = -1.0f;
  ASSERT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  const std::string mine = attnlab_last_error();
  EXPECT_NE(mine.find("softcap"), std::string::npos) << mine;
  std::string other_initial, other_after;
  std::thread th([&] {
    other_initial = attnlab_last_error();
    attnlab_context* ctx = nullptr;
    attnlab_context_create(&ctx);
    attnlab_forward_args b = to_c(forward_args(c_, t_));
    b.options.window_left = -7;
    attnlab_forward(ctx, &b, nullptr, 0);
    other_after = attnlab_last_error();
    attnlab_context_destroy(ctx);
  });
  th.join();
  EXPECT_EQ(other_initial, "") << "a new thread has no last error";
  EXPECT_NE(other_after.find("window_left"), std::string::npos) << other_after;
  EXPECT_EQ(std::string(attnlab_last_error()), mine) << "another thread's failure changed this thread's last error";
}

TEST_F(CApiCalls, NullPointersRejected) {
  const attnlab_forward_args a = to_c(forward_args(c_, t_));
  EXPECT_EQ(attnlab_forward(nullptr, &a, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_STRNE(attnlab_last_error(), "");
  EXPECT_EQ(attnlab_forward(cc_.ctx, nullptr, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  GradTensors g = make_grads(c_, rng_);
  const attnlab_backward_args b = to_c(backward_args(c_, t_, g));
  EXPECT_EQ(attnlab_backward(nullptr, &b, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_backward(cc_.ctx, nullptr, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_context_create(nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_context_set_stream(nullptr, nullptr), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(attnlab_context_set_num_threads(nullptr, 1), ATTNLAB_INVALID_ARGUMENT);
  // Init functions have no status to return: NULL must simply do nothing.
  attnlab_options_init(nullptr);
  attnlab_forward_args_init(nullptr);
  attnlab_backward_args_init(nullptr);
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
