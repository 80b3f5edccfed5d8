#include "harness.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "attnlab/version.h"
#include "device_mirror.h"

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace attnlab_test {

::testing::AssertionResult ran_as_asked(const std::string& ran, const std::string& asked) {
  const bool member = asked == "flash" && (ran == "flash-sm80" || ran == "flash-sm90");
  if (ran == asked || member) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "asked for path " << asked << ", ran " << ran;
}

std::vector<std::string> cpu_paths() { return {"cpu-naive", "cpu-flash"}; }
std::vector<DType> float_dtypes() { return {DType::f32, DType::f16, DType::bf16}; }

std::string Case::str() const {
  std::ostringstream s;
  s << "path=" << path << " dtype=" << dtype_name(dtype) << " B=" << B << " T=" << T << " S=" << S << " N=" << N
    << " K=" << K << " Hqk=" << Hqk << " Hv=" << Hv;
  if (scale) s << " scale=" << *scale;
  if (softcap > 0) s << " softcap=" << softcap;
  if (mask.causal) s << " causal";
  s << (mask.align == attnlab::MaskAlign::bottom_right ? " bottom-right" : " top-left");
  if (mask.window_left >= 0 || mask.window_right >= 0)
    s << " window=(" << mask.window_left << "," << mask.window_right << ")";
  if (!q_lens.empty()) {
    s << " q_lens=[";
    for (auto x : q_lens) s << x << " ";
    s << "]";
  }
  if (!kv_lens.empty()) {
    s << " kv_lens=[";
    for (auto x : kv_lens) s << x << " ";
    s << "]";
  }
  if (bias != BiasKind::none) {
    static const char* names[] = {"none", "bias-f32", "bias-dtype", "bool-mask"};
    s << " " << names[int(bias)] << "(" << (bias_per_batch ? "B" : "1") << "," << (bias_per_head ? "N" : "1")
      << ",T,S)" << (expand_broadcast ? " expanded" : "") << " hidden_rows=" << hidden_rows;
  }
  if (!with_lse) s << " no-lse";
  if (device == Device::cuda) s << " cuda" << (seqlens_on_device ? "" : " host-seqlens");
  if (stream != nullptr) s << " own-stream";
  if (threads) s << " threads=" << threads;
  return s.str();
}

double effective_scale(const Case& c) {
  return c.scale ? double(*c.scale) : double(float(1.0 / std::sqrt(double(c.Hqk))));
}

namespace {
// NaN in every element of the rows the case's lengths mark as padding (Case::nan_padding).
void poison_padding(const Case& c, Tensors& t) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto poison_rows = [&](HostTensor& x, const std::vector<std::int32_t>& lens, std::int64_t rows) {
    if (lens.empty()) return;
    const std::int64_t heads = x.shape()[2], dim = x.shape()[3];
    for (std::int64_t b = 0; b < c.B; ++b)
      for (std::int64_t r = lens[std::size_t(b)]; r < rows; ++r)
        for (std::int64_t i = 0; i < heads * dim; ++i) x.set((b * rows + r) * heads * dim + i, nan);
  };
  poison_rows(t.q, c.q_lens, c.T);
  poison_rows(t.k, c.kv_lens, c.S);
  poison_rows(t.v, c.kv_lens, c.S);
}
}  // namespace

Tensors make_inputs(const Case& c, Rng& rng) {
  Tensors t;
  t.q = HostTensor(c.dtype, {c.B, c.T, c.N, c.Hqk}, c.q_layout);
  t.k = HostTensor(c.dtype, {c.B, c.S, c.K, c.Hqk}, c.k_layout);
  t.v = HostTensor(c.dtype, {c.B, c.S, c.K, c.Hv}, c.v_layout);
  t.o = HostTensor(c.dtype, {c.B, c.T, c.N, c.Hv}, c.o_layout);
  for (HostTensor* x : {&t.q, &t.k, &t.v}) x->poison();  // padding of inputs is NaN too: it must never be read
  t.q.fill_random(rng, c.input_scale);
  t.k.fill_random(rng, c.input_scale);
  t.v.fill_random(rng);
  t.o.poison();
  if (c.with_lse) {
    t.lse = HostTensor(DType::f32, {c.B, c.N, c.T}, c.lse_layout);
    t.lse.poison();
  }
  if (!c.q_lens.empty()) {
    t.q_lens = HostTensor(DType::i32, {c.B});
    for (std::int64_t b = 0; b < c.B; ++b) t.q_lens.set(b, c.q_lens[std::size_t(b)]);
  }
  if (!c.kv_lens.empty()) {
    t.kv_lens = HostTensor(DType::i32, {c.B});
    for (std::int64_t b = 0; b < c.B; ++b) t.kv_lens.set(b, c.kv_lens[std::size_t(b)]);
  }
  if (c.nan_padding) poison_padding(c, t);
  if (c.bias != BiasKind::none) {
    const std::int64_t bB = c.bias_per_batch ? c.B : 1, bN = c.bias_per_head ? c.N : 1;
    const bool is_mask = c.bias == BiasKind::bool_mask;
    const DType dt = is_mask ? DType::u8 : (c.bias == BiasKind::f32 ? DType::f32 : c.dtype);
    HostTensor x(dt, {bB, bN, c.T, c.S}, c.q_layout);  // strided like q when q is strided
    x.poison();
    for (std::int64_t slice = 0; slice < bB * bN; ++slice) {
      // Rows that hide every key, spread over the slice.
      std::vector<bool> hidden(std::size_t(c.T), false);
      for (int r = 0; r < c.hidden_rows; ++r) hidden[std::size_t(rng.integer(0, c.T - 1))] = true;
      for (std::int64_t i = 0; i < c.T; ++i)
        for (std::int64_t j = 0; j < c.S; ++j) {
          const std::int64_t at = (slice * c.T + i) * c.S + j;
          if (is_mask) {
            const bool show = !hidden[std::size_t(i)] && rng.chance(0.7);
            x.set(at, show ? double(rng.integer(1, 255)) : 0.0);  // any non-zero byte means visible
          } else {
            const bool neg_inf = hidden[std::size_t(i)] || rng.chance(c.neg_inf_bias);
            x.set(at, neg_inf ? -std::numeric_limits<double>::infinity() : 0.5 * rng.value());
          }
        }
    }
    (is_mask ? t.mask : t.bias) = std::move(x);
  }
  return t;
}

attnlab::ForwardArgs forward_args(const Case& c, const Tensors& t) {
  attnlab::ForwardArgs a;
  a.q = t.q.view();
  a.k = t.k.view();
  a.v = t.v.view();
  a.o = t.o.view();
  a.lse = t.lse.view();
  a.options.scale = c.scale;
  a.options.softcap = c.softcap;
  a.options.mask = c.mask;
  a.options.q_seqlens = t.q_lens.view();
  a.options.kv_seqlens = t.kv_lens.view();
  a.options.bias = t.bias.view();
  a.options.bool_mask = t.mask.view();
  if (c.expand_broadcast)
    for (TensorView* x : {&a.options.bias, &a.options.bool_mask}) {
      if (x->empty()) continue;
      const std::int64_t full[2] = {c.B, c.N};
      for (int d = 0; d < 2; ++d)
        if (x->shape[d] == 1) x->shape[d] = full[d], x->strides[d] = 0;
    }
  a.options.path = c.path;
  return a;
}

ref::Problem reference_problem(const Case& c, const Tensors& t) {
  ref::Problem p;
  p.B = c.B, p.T = c.T, p.S = c.S, p.N = c.N, p.K = c.K, p.Hqk = c.Hqk, p.Hv = c.Hv;
  p.scale = effective_scale(c);
  p.softcap = c.softcap;
  p.causal = c.mask.causal;
  p.bottom_right = c.mask.align == attnlab::MaskAlign::bottom_right;
  p.window_left = c.mask.window_left;
  p.window_right = c.mask.window_right;
  for (auto x : c.q_lens) p.q_lens.push_back(x);
  for (auto x : c.kv_lens) p.kv_lens.push_back(x);
  p.q = t.q.values();
  p.k = t.k.values();
  p.v = t.v.values();
  if (t.bias.defined()) {
    p.bias = t.bias.values();
    p.bias_B = t.bias.shape()[0];
    p.bias_N = t.bias.shape()[1];
  }
  if (t.mask.defined()) {
    for (double x : t.mask.values()) p.mask.push_back(std::uint8_t(x));
    p.mask_B = t.mask.shape()[0];
    p.mask_N = t.mask.shape()[1];
  }
  return p;
}

ExpectedForward expected_forward(const Case& c, const Tensors& t) {
  const ref::Problem p = reference_problem(c, t);
  return {ref::forward(p), ref::forward_in_dtype(p, c.dtype)};
}

void check_forward_outputs(const Case& c, const Tensors& t, const ExpectedForward& e) {
  EXPECT_EQ(t.o.count_nan(), 0) << "O elements left unwritten (poison) or NaN";
  EXPECT_TRUE(meets_criterion("O", c.dtype, t.o.values(), e.f64.o, e.same.o));
  if (c.with_lse) {
    EXPECT_EQ(t.lse.count_nan(), 0) << "LSE elements left unwritten (poison) or NaN";
    EXPECT_TRUE(meets_criterion("LSE", DType::f32, t.lse.values(), e.f64.lse, e.same.lse));
  }
}

namespace {

// The case's context: the one it names, or `local`; with the case's thread count.
attnlab::Context& context_for(const Case& c, attnlab::Context& local) {
  attnlab::Context& ctx = c.context ? *c.context : local;
  if (c.threads > 0) ctx.set_num_threads(c.threads);
  if (c.stream != nullptr) ctx.set_stream(c.stream);
  return ctx;
}

// Waits for the case's own stream (nothing to do on the legacy stream: DeviceMirror's copies are ordered after it)
// and fails the test on an asynchronous error.
void synchronize_stream(const Case& c) {
#if ATTNLAB_WITH_CUDA
  if (c.stream == nullptr) return;
  const cudaError_t status = cudaStreamSynchronize(static_cast<cudaStream_t>(c.stream));
  ASSERT_EQ(status, cudaSuccess) << "asynchronous CUDA error on the case's stream: " << cudaGetErrorString(status);
#else
  (void)c;
#endif
}

// Runs forward / backward on the case's device. On CUDA the outputs, and the inputs (to check they are untouched),
// are copied back into the host tensors afterwards.
attnlab::RunInfo run_forward(attnlab::Context& ctx, const Case& c, Tensors& t) {
  if (c.device == Device::cpu) return attnlab::forward(ctx, forward_args(c, t));
  DeviceMirror mirror;
  const attnlab::ForwardArgs args = device_forward_args(c, t, mirror);
  // A pageable upload may still be in flight when cudaMemcpy returns, and an own stream does not wait for it.
  if (c.stream != nullptr) mirror.synchronize();
  const attnlab::RunInfo info = attnlab::forward(ctx, args);
  synchronize_stream(c);
  mirror.synchronize();
  for (HostTensor* x : {&t.o, &t.lse, &t.q, &t.k, &t.v, &t.bias, &t.mask}) mirror.download(*x);
  if (c.seqlens_on_device) {
    mirror.download(t.q_lens);
    mirror.download(t.kv_lens);
  }
  return info;
}

attnlab::RunInfo run_backward(attnlab::Context& ctx, const Case& c, Tensors& t, GradTensors& g) {
  if (c.device == Device::cpu) return attnlab::backward(ctx, backward_args(c, t, g));
  DeviceMirror mirror;
  const attnlab::BackwardArgs args = device_backward_args(c, t, g, mirror);
  if (c.stream != nullptr) mirror.synchronize();  // as in run_forward
  const attnlab::RunInfo info = attnlab::backward(ctx, args);
  synchronize_stream(c);
  mirror.synchronize();
  for (HostTensor* x : {&g.dq, &g.dk, &g.dv, &g.d_o, &t.o, &t.lse, &t.q, &t.k, &t.v, &t.bias, &t.mask})
    mirror.download(*x);
  return info;
}

void check_run_info(const Case& c, const attnlab::RunInfo& info) {
  if (c.path != "auto") {
    EXPECT_TRUE(ran_as_asked(info.path, c.path)) << "RunInfo.path must name the forced path";
  }
  if (!c.expect_path.empty()) {
    EXPECT_TRUE(ran_as_asked(info.path, c.expect_path)) << "a different path ran";
  }
}

std::vector<std::uint8_t> snap(const HostTensor& t) { return t.defined() ? t.snapshot() : std::vector<std::uint8_t>{}; }

void expect_unchanged(const char* name, const HostTensor& t, const std::vector<std::uint8_t>& before) {
  if (t.defined()) {
    EXPECT_TRUE(t.same_bytes(before)) << "input " << name << " was modified by the call";
  }
}

}  // namespace

void check_forward(const Case& c, Rng& rng) {
  SCOPED_TRACE(c.str());
  Tensors t = make_inputs(c, rng);
  const ExpectedForward expected = expected_forward(c, t);
  const auto q0 = snap(t.q), k0 = snap(t.k), v0 = snap(t.v), b0 = snap(t.bias), m0 = snap(t.mask),
             ql0 = snap(t.q_lens), kl0 = snap(t.kv_lens), o0 = snap(t.o), l0 = snap(t.lse);
  attnlab::Context local;
  attnlab::Context& ctx = context_for(c, local);
  attnlab::RunInfo info;
  try {
    info = run_forward(ctx, c, t);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "forward threw: " << e.what();
    return;
  }
  check_run_info(c, info);
  check_forward_outputs(c, t, expected);
  EXPECT_TRUE(t.o.padding_unchanged(o0)) << "O: bytes outside the view were written";
  if (c.with_lse) {
    EXPECT_TRUE(t.lse.padding_unchanged(l0)) << "LSE: bytes outside the view were written";
  }
  expect_unchanged("q", t.q, q0);
  expect_unchanged("k", t.k, k0);
  expect_unchanged("v", t.v, v0);
  expect_unchanged("bias", t.bias, b0);
  expect_unchanged("bool_mask", t.mask, m0);
  expect_unchanged("q_seqlens", t.q_lens, ql0);
  expect_unchanged("kv_seqlens", t.kv_lens, kl0);
}

GradTensors make_grads(const Case& c, Rng& rng) {
  GradTensors g;
  g.d_o = HostTensor(c.dtype, {c.B, c.T, c.N, c.Hv}, c.grad_layout);
  g.d_o.poison();
  g.d_o.fill_random(rng);
  g.dq = HostTensor(c.dtype, {c.B, c.T, c.N, c.Hqk}, c.grad_layout);
  g.dk = HostTensor(c.dtype, {c.B, c.S, c.K, c.Hqk}, c.grad_layout);
  g.dv = HostTensor(c.dtype, {c.B, c.S, c.K, c.Hv}, c.grad_layout);
  for (HostTensor* x : {&g.dq, &g.dk, &g.dv}) x->poison();
  return g;
}

attnlab::BackwardArgs backward_args_from(const attnlab::ForwardArgs& f, const TensorView& d_o, const TensorView& dq,
                                         const TensorView& dk, const TensorView& dv) {
  attnlab::BackwardArgs a;
  a.q = f.q;
  a.k = f.k;
  a.v = f.v;
  a.o = f.o;
  a.lse = f.lse;
  a.options = f.options;
  a.d_o = d_o;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  return a;
}

attnlab::BackwardArgs backward_args(const Case& c, const Tensors& t, const GradTensors& g) {
  return backward_args_from(forward_args(c, t), g.d_o.view(), g.dq.view(), g.dk.view(), g.dv.view());
}

attnlab::ForwardArgs device_forward_args(const Case& c, const Tensors& t, DeviceMirror& mirror) {
  attnlab::ForwardArgs a = forward_args(c, t);
  a.q = mirror.upload(t.q);
  a.k = mirror.upload(t.k);
  a.v = mirror.upload(t.v);
  a.o = mirror.upload(t.o);
  a.lse = mirror.upload(t.lse);
  a.options.bias = mirror.upload(t.bias);
  a.options.bool_mask = mirror.upload(t.mask);
  if (c.seqlens_on_device) {
    a.options.q_seqlens = mirror.upload(t.q_lens);
    a.options.kv_seqlens = mirror.upload(t.kv_lens);
  }
  return a;
}

attnlab::BackwardArgs device_backward_args(const Case& c, const Tensors& t, const GradTensors& g,
                                           DeviceMirror& mirror) {
  const attnlab::ForwardArgs f = device_forward_args(c, t, mirror);
  return backward_args_from(f, mirror.upload(g.d_o), mirror.upload(g.dq), mirror.upload(g.dk), mirror.upload(g.dv));
}

ExpectedBackward expected_backward(const Case& c, const Tensors& t, const GradTensors& g) {
  const ref::Problem p = reference_problem(c, t);
  const std::vector<double> d_o = g.d_o.values();
  const std::vector<double> o = t.o.values();
  const std::vector<double> lse = t.lse.values();
  return {ref::backward(p, d_o), ref::backward_in_dtype(p, d_o, c.dtype, &o),
          ref::backward(p, d_o, &o, &lse)};  // the last: exact, from the call's own O and LSE
}

void check_backward_outputs(const Case& c, const GradTensors& g, const ExpectedBackward& e) {
  EXPECT_EQ(g.dq.count_nan(), 0) << "dQ elements left unwritten (poison) or NaN";
  EXPECT_EQ(g.dk.count_nan(), 0) << "dK elements left unwritten (poison) or NaN";
  EXPECT_EQ(g.dv.count_nan(), 0) << "dV elements left unwritten (poison) or NaN";
  EXPECT_TRUE(meets_criterion("dQ", c.dtype, g.dq.values(), e.f64.dq, e.same.dq, &e.given.dq, true));
  EXPECT_TRUE(meets_criterion("dK", c.dtype, g.dk.values(), e.f64.dk, e.same.dk, &e.given.dk, true));
  EXPECT_TRUE(meets_criterion("dV", c.dtype, g.dv.values(), e.f64.dv, e.same.dv, &e.given.dv, true));
}

void check_backward(const Case& c0, Rng& rng) {
  Case c = c0;
  c.with_lse = true;  // backward needs the forward call's lse
  SCOPED_TRACE(c.str());
  Tensors t = make_inputs(c, rng);
  attnlab::Context local;
  attnlab::Context& ctx = context_for(c, local);
  try {
    run_forward(ctx, c, t);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "forward threw: " << e.what();
    return;
  }
  check_forward_outputs(c, t, expected_forward(c, t));  // the O backward receives must be right in the first place
  GradTensors g = make_grads(c, rng);
  const ExpectedBackward expected = expected_backward(c, t, g);
  const auto q0 = snap(t.q), k0 = snap(t.k), v0 = snap(t.v), o0 = snap(t.o), l0 = snap(t.lse), do0 = snap(g.d_o),
             b0 = snap(t.bias), m0 = snap(t.mask), dq0 = snap(g.dq), dk0 = snap(g.dk), dv0 = snap(g.dv);
  attnlab::RunInfo info;
  try {
    info = run_backward(ctx, c, t, g);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "backward threw: " << e.what();
    return;
  }
  check_run_info(c, info);
  check_backward_outputs(c, g, expected);
  EXPECT_TRUE(g.dq.padding_unchanged(dq0)) << "dQ: bytes outside the view were written";
  EXPECT_TRUE(g.dk.padding_unchanged(dk0)) << "dK: bytes outside the view were written";
  EXPECT_TRUE(g.dv.padding_unchanged(dv0)) << "dV: bytes outside the view were written";
  expect_unchanged("q", t.q, q0);
  expect_unchanged("k", t.k, k0);
  expect_unchanged("v", t.v, v0);
  expect_unchanged("o", t.o, o0);
  expect_unchanged("lse", t.lse, l0);
  expect_unchanged("d_o", g.d_o, do0);
  expect_unchanged("bias", t.bias, b0);
  expect_unchanged("bool_mask", t.mask, m0);
}

void expect_forward_refused_on_device(const Case& c, const std::string& fragment) {
  Rng rng(fresh_seed());
  Tensors t = make_inputs(c, rng);
  DeviceMirror mirror;
  attnlab::ForwardArgs a = device_forward_args(c, t, mirror);
  attnlab::Context local;
  attnlab::Context& ctx = context_for(c, local);
  try {
    attnlab::forward(ctx, a);
    ADD_FAILURE() << c.str() << ": expected an error naming '" << fragment << "'";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(e.code(), attnlab::ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message '" << e.what() << "' should name '" << fragment << "'";
  }
  mirror.synchronize();
  const auto before = t.o.snapshot();
  mirror.download(t.o);
  EXPECT_TRUE(t.o.same_bytes(before)) << "a failed call wrote to O";
}

}  // namespace attnlab_test
