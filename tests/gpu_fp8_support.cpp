#include "gpu_fp8_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "attnlab/version.h"
#include "core/fp8.h"
#include "fp8_random.h"

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace attnlab_test {

using attnlab::DType;
using attnlab::core::Fp8Format;
using attnlab::core::float_to_fp8;

namespace {

#if ATTNLAB_WITH_CUDA
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}
#endif

constexpr std::uint8_t kPoisonCode = 0x7F;  // e4m3 NaN

}  // namespace

int gpu_compute_capability() {
#if ATTNLAB_WITH_CUDA
  if (!gpu_unavailable().empty()) return 0;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess) return 0;
  return major * 10 + minor;
#else
  return 0;
#endif
}

std::string fp8_gpu_unavailable() {
  if (std::string why = gpu_unavailable(); !why.empty()) return why;
  const int cc = gpu_compute_capability();
  if (cc < 90) return "FP8 attention needs compute capability ≥ 9.0, device 0 has " + std::to_string(cc / 10) + "." +
                      std::to_string(cc % 10);
  return "";
}

fp8ref::Problem random_fp8_problem(Rng& rng, std::int64_t B, std::int64_t T, std::int64_t S, std::int64_t N,
                                   std::int64_t K, std::int64_t Hqk, std::int64_t Hv, bool causal,
                                   bool bottom_right, float scale_s) {
  fp8ref::Problem p;
  p.B = B, p.T = T, p.S = S, p.N = N, p.K = K, p.Hqk = Hqk, p.Hv = Hv;
  p.causal = causal;
  p.bottom_right = bottom_right;
  p.scale_s = scale_s;
  random_fp8_codes(rng, std::size_t(B * T * N * Hqk), rng.uniform(0.5, 2.0), Fp8Format::e4m3, p.q, p.d_q);
  random_fp8_codes(rng, std::size_t(B * S * K * Hqk), rng.uniform(0.5, 2.0), Fp8Format::e4m3, p.k, p.d_k);
  random_fp8_codes(rng, std::size_t(B * S * K * Hv), rng.uniform(0.2, 5.0), Fp8Format::e4m3, p.v, p.d_v);
  return p;
}

#if ATTNLAB_WITH_CUDA
// Scalars in one device block: the inputs the call reads, then the amaxes it writes.
enum Scalar : int { descale_q, descale_k, descale_v, scale_s, descale_s, scale_o, amax_s, amax_o, kScalars };

struct Fp8Call::Impl {
  fp8ref::Problem p;
  DType o_dtype = DType::e4m3;
  cudaStream_t stream = nullptr;
  bool own_stream = false;
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float* lse = nullptr;
  float* scalars = nullptr;
  bool with_scale_o = true;
  bool with_lse = true;
  bool with_amaxes = true;
  std::vector<std::int32_t> q_lens, kv_lens;
  attnlab::Context ctx;  // one per call object: a second run reuses its handles and cached graph

  std::size_t o_count() const { return std::size_t(p.B * p.T * p.N * p.Hv); }
  std::size_t lse_count() const { return std::size_t(p.B * p.N * p.T); }
  std::size_t o_bytes() const { return o_count() * attnlab::size_of(o_dtype); }

  void* upload(const std::vector<std::uint8_t>& codes) {
    void* d = nullptr;
    check(cudaMalloc(&d, std::max<std::size_t>(codes.size(), 1)), "cudaMalloc");
    check(cudaMemcpy(d, codes.data(), codes.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    return d;
  }
};

Fp8Call::Fp8Call(const fp8ref::Problem& p, bool non_blocking_stream, DType o_dtype) : impl_(new Impl) {
  Impl& m = *impl_;
  m.p = p;
  m.o_dtype = p.scale_o ? DType::e4m3 : o_dtype;
  if (non_blocking_stream) {
    check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    m.own_stream = true;
  }
  m.q = m.upload(p.q);
  m.k = m.upload(p.k);
  m.v = m.upload(p.v);
  check(cudaMalloc(&m.o, m.o_bytes()), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&m.lse), m.lse_count() * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&m.scalars), kScalars * sizeof(float)), "cudaMalloc");
  const float host[kScalars] = {p.d_q, p.d_k, p.d_v, p.scale_s, 1.0f / p.scale_s, p.scale_o.value_or(1.0f),
                                std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN()};
  check(cudaMemcpy(m.scalars, host, sizeof host, cudaMemcpyHostToDevice), "cudaMemcpy");
  poison_outputs();
}

Fp8Call::~Fp8Call() {
  Impl& m = *impl_;
  for (void* d : {m.q, m.k, m.v, m.o, static_cast<void*>(m.lse), static_cast<void*>(m.scalars)}) cudaFree(d);
  if (m.own_stream) cudaStreamDestroy(m.stream);
}

void Fp8Call::poison_outputs() {
  Impl& m = *impl_;
  check(cudaMemset(m.o, m.o_dtype == DType::e4m3 ? kPoisonCode : 0xFF, m.o_bytes()), "cudaMemset");
  check(cudaMemset(m.lse, 0xFF, m.lse_count() * sizeof(float)), "cudaMemset");  // NaN
  const float nan[2] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN()};
  check(cudaMemcpy(m.scalars + amax_s, nan, sizeof nan, cudaMemcpyHostToDevice), "cudaMemcpy");
}

bool Fp8Call::o_untouched() {
  Impl& m = *impl_;
  std::vector<std::uint8_t> bytes(m.o_bytes());
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaMemcpy(bytes.data(), m.o, bytes.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  const std::uint8_t poison = m.o_dtype == DType::e4m3 ? kPoisonCode : 0xFF;
  return std::all_of(bytes.begin(), bytes.end(), [&](std::uint8_t b) { return b == poison; });
}

void Fp8Call::use_host_seqlens(std::vector<std::int32_t> q, std::vector<std::int32_t> kv) {
  impl_->q_lens = std::move(q);
  impl_->kv_lens = std::move(kv);
}

void Fp8Call::drop_scale_o() { impl_->with_scale_o = false; }
void Fp8Call::drop_lse() { impl_->with_lse = false; }
void Fp8Call::drop_amaxes() { impl_->with_amaxes = false; }

attnlab::RunInfo Fp8Call::run(const std::string& path) {
  Impl& m = *impl_;
  const fp8ref::Problem& p = m.p;
  attnlab::ForwardArgs a;
  a.q = attnlab::TensorView::contiguous(m.q, DType::e4m3, {p.B, p.T, p.N, p.Hqk}, attnlab::Device::cuda);
  a.k = attnlab::TensorView::contiguous(m.k, DType::e4m3, {p.B, p.S, p.K, p.Hqk}, attnlab::Device::cuda);
  a.v = attnlab::TensorView::contiguous(m.v, DType::e4m3, {p.B, p.S, p.K, p.Hv}, attnlab::Device::cuda);
  a.o = attnlab::TensorView::contiguous(m.o, m.o_dtype, {p.B, p.T, p.N, p.Hv}, attnlab::Device::cuda);
  if (m.with_lse) a.lse = attnlab::TensorView::contiguous(m.lse, DType::f32, {p.B, p.N, p.T}, attnlab::Device::cuda);
  a.options.path = path;
  a.options.scale = float(p.softmax_scale());
  a.options.mask.causal = p.causal;
  a.options.mask.align = p.bottom_right ? attnlab::MaskAlign::bottom_right : attnlab::MaskAlign::top_left;
  if (!m.q_lens.empty()) {
    a.options.q_seqlens = attnlab::TensorView::contiguous(m.q_lens.data(), DType::i32, {std::int64_t(m.q_lens.size())});
    a.options.kv_seqlens =
        attnlab::TensorView::contiguous(m.kv_lens.data(), DType::i32, {std::int64_t(m.kv_lens.size())});
  }
  attnlab::Fp8ForwardScales s;
  s.descale_q = m.scalars + descale_q;
  s.descale_k = m.scalars + descale_k;
  s.descale_v = m.scalars + descale_v;
  s.scale_s = m.scalars + scale_s;
  s.descale_s = m.scalars + descale_s;
  s.scale_o = m.with_scale_o && m.o_dtype != DType::bf16 && m.o_dtype != DType::f16 ? m.scalars + scale_o : nullptr;
  if (m.with_amaxes) {
    s.amax_s = m.scalars + amax_s;
    s.amax_o = m.scalars + amax_o;
  }
  a.fp8 = s;
  m.ctx.set_stream(m.stream);
  const attnlab::RunInfo info = attnlab::forward(m.ctx, a);
  check(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize");
  check(cudaGetLastError(), "after the call");
  return info;
}

Fp8Result Fp8Call::result() {
  Impl& m = *impl_;
  Fp8Result r;
  r.o.resize(m.o_bytes());
  r.lse.resize(m.lse_count());
  float amax[2];
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaMemcpy(r.o.data(), m.o, r.o.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(r.lse.data(), m.lse, r.lse.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(amax, m.scalars + amax_s, sizeof amax, cudaMemcpyDeviceToHost), "cudaMemcpy");
  r.amax_s = amax[0];
  r.amax_o = amax[1];
  return r;
}

// ---------------------------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------------------------
namespace {
DType dtype_of(Fp8Format f) { return f == Fp8Format::e4m3 ? DType::e4m3 : DType::e5m2; }
constexpr std::uint8_t kGradPoison = 0x7F;  // NaN in e4m3 (S.1111.111) and in e5m2 (S.11111.11) alike
enum BScalar : int {
  b_descale_q, b_descale_k, b_descale_v, b_descale_o, b_descale_do, b_scale_s, b_descale_s, b_scale_dp,
  b_descale_dp, b_scale_dq, b_scale_dk, b_scale_dv, b_amax_dp, b_amax_dq, b_amax_dk, b_amax_dv, kBScalars
};
}  // namespace

struct Fp8BackwardCall::Impl {
  fp8ref::Problem p;
  fp8ref::BackwardInputs in;
  Fp8Format grad = Fp8Format::e5m2;
  cudaStream_t stream = nullptr;
  bool own_stream = false;
  std::vector<void*> buffers;
  void *q, *k, *v, *o, *d_o, *dq, *dk, *dv;
  float *lse, *scalars;

  void* upload(const void* host, std::size_t bytes) {
    void* d = nullptr;
    check(cudaMalloc(&d, std::max<std::size_t>(bytes, 1)), "cudaMalloc");
    if (host != nullptr) check(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    buffers.push_back(d);
    return d;
  }
  std::size_t q_count() const { return std::size_t(p.B * p.T * p.N * p.Hqk); }
  std::size_t k_count() const { return std::size_t(p.B * p.S * p.K * p.Hqk); }
  std::size_t v_count() const { return std::size_t(p.B * p.S * p.K * p.Hv); }
};

Fp8BackwardCall::Fp8BackwardCall(const fp8ref::Problem& p, const fp8ref::BackwardInputs& in, bool non_blocking)
    : impl_(new Impl) {
  Impl& m = *impl_;
  m.p = p;
  m.in = in;
  m.grad = in.dq.format;
  if (non_blocking) {
    check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    m.own_stream = true;
  }
  m.q = m.upload(p.q.data(), p.q.size());
  m.k = m.upload(p.k.data(), p.k.size());
  m.v = m.upload(p.v.data(), p.v.size());
  m.o = m.upload(in.o.data(), in.o.size());
  m.d_o = m.upload(in.d_o.data(), in.d_o.size());
  m.lse = static_cast<float*>(m.upload(in.lse.data(), in.lse.size() * sizeof(float)));
  m.dq = m.upload(nullptr, m.q_count());
  m.dk = m.upload(nullptr, m.k_count());
  m.dv = m.upload(nullptr, m.v_count());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float host[kBScalars] = {p.d_q, p.d_k, p.d_v, in.descale_o, in.descale_do, p.scale_s,
                                 in.descale_s_or(p.scale_s), in.scale_dp, in.descale_dp_or_default(),
                                 in.dq.scale.value_or(1.0f), in.dk.scale.value_or(1.0f), in.dv.scale.value_or(1.0f),
                                 nan, nan, nan, nan};
  m.scalars = static_cast<float*>(m.upload(host, sizeof host));
  for (void* g : {m.dq, m.dk, m.dv})
    check(cudaMemset(g, kGradPoison, g == m.dq ? m.q_count() : g == m.dk ? m.k_count() : m.v_count()),
          "cudaMemset");
}

Fp8BackwardCall::~Fp8BackwardCall() {
  for (void* d : impl_->buffers) cudaFree(d);
  if (impl_->own_stream) cudaStreamDestroy(impl_->stream);
}

attnlab::RunInfo Fp8BackwardCall::run(const std::string& path) {
  Impl& m = *impl_;
  const fp8ref::Problem& p = m.p;
  const auto cuda = attnlab::Device::cuda;
  attnlab::BackwardArgs a;
  a.q = attnlab::TensorView::contiguous(m.q, DType::e4m3, {p.B, p.T, p.N, p.Hqk}, cuda);
  a.k = attnlab::TensorView::contiguous(m.k, DType::e4m3, {p.B, p.S, p.K, p.Hqk}, cuda);
  a.v = attnlab::TensorView::contiguous(m.v, DType::e4m3, {p.B, p.S, p.K, p.Hv}, cuda);
  a.o = attnlab::TensorView::contiguous(m.o, DType::e4m3, {p.B, p.T, p.N, p.Hv}, cuda);
  a.d_o = attnlab::TensorView::contiguous(m.d_o, dtype_of(m.in.do_format), {p.B, p.T, p.N, p.Hv}, cuda);
  a.lse = attnlab::TensorView::contiguous(m.lse, DType::f32, {p.B, p.N, p.T}, cuda);
  a.dq = attnlab::TensorView::contiguous(m.dq, dtype_of(m.grad), {p.B, p.T, p.N, p.Hqk}, cuda);
  a.dk = attnlab::TensorView::contiguous(m.dk, dtype_of(m.grad), {p.B, p.S, p.K, p.Hqk}, cuda);
  a.dv = attnlab::TensorView::contiguous(m.dv, dtype_of(m.grad), {p.B, p.S, p.K, p.Hv}, cuda);
  a.options.path = path;
  a.options.scale = float(p.softmax_scale());
  a.options.mask.causal = p.causal;
  a.options.mask.align = p.bottom_right ? attnlab::MaskAlign::bottom_right : attnlab::MaskAlign::top_left;
  attnlab::Fp8BackwardScales s;
  float* f = m.scalars;
  s.descale_q = f + b_descale_q, s.descale_k = f + b_descale_k, s.descale_v = f + b_descale_v;
  s.descale_o = f + b_descale_o, s.descale_do = f + b_descale_do;
  s.scale_s = f + b_scale_s, s.descale_s = f + b_descale_s;
  s.scale_dp = f + b_scale_dp, s.descale_dp = f + b_descale_dp;
  s.scale_dq = f + b_scale_dq, s.scale_dk = f + b_scale_dk, s.scale_dv = f + b_scale_dv;
  s.amax_dp = f + b_amax_dp, s.amax_dq = f + b_amax_dq, s.amax_dk = f + b_amax_dk, s.amax_dv = f + b_amax_dv;
  a.fp8 = s;
  attnlab::Context ctx;
  ctx.set_stream(m.stream);
  const attnlab::RunInfo info = attnlab::backward(ctx, a);
  check(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize");
  check(cudaGetLastError(), "after the call");
  return info;
}

bool Fp8BackwardCall::outputs_untouched() {
  const Fp8BackwardResult r = result();
  for (const auto* g : {&r.dq, &r.dk, &r.dv})
    for (std::uint8_t code : *g)
      if (code != kGradPoison) return false;
  return std::isnan(r.amax_dp) && std::isnan(r.amax_dq) && std::isnan(r.amax_dk) && std::isnan(r.amax_dv);
}

Fp8BackwardResult Fp8BackwardCall::result() {
  Impl& m = *impl_;
  Fp8BackwardResult r;
  r.dq.resize(m.q_count());
  r.dk.resize(m.k_count());
  r.dv.resize(m.v_count());
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaMemcpy(r.dq.data(), m.dq, r.dq.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(r.dk.data(), m.dk, r.dk.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(r.dv.data(), m.dv, r.dv.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  float amax[4];
  check(cudaMemcpy(amax, m.scalars + b_amax_dp, sizeof amax, cudaMemcpyDeviceToHost), "cudaMemcpy");
  r.amax_dp = amax[0], r.amax_dq = amax[1], r.amax_dk = amax[2], r.amax_dv = amax[3];
  return r;
}

#else  // no CUDA: the tests skip before constructing a call

struct Fp8Call::Impl {};
Fp8Call::Fp8Call(const fp8ref::Problem&, bool, DType) : impl_(new Impl) {}
Fp8Call::~Fp8Call() = default;
attnlab::RunInfo Fp8Call::run(const std::string&) { throw std::logic_error("built without CUDA"); }
Fp8Result Fp8Call::result() { return {}; }
void Fp8Call::poison_outputs() {}
bool Fp8Call::o_untouched() { return true; }
void Fp8Call::use_host_seqlens(std::vector<std::int32_t>, std::vector<std::int32_t>) {}
void Fp8Call::drop_scale_o() {}
void Fp8Call::drop_lse() {}
void Fp8Call::drop_amaxes() {}
struct Fp8BackwardCall::Impl {};
Fp8BackwardCall::Fp8BackwardCall(const fp8ref::Problem&, const fp8ref::BackwardInputs&, bool) : impl_(new Impl) {}
Fp8BackwardCall::~Fp8BackwardCall() = default;
attnlab::RunInfo Fp8BackwardCall::run(const std::string&) { throw std::logic_error("built without CUDA"); }
Fp8BackwardResult Fp8BackwardCall::result() { return {}; }
bool Fp8BackwardCall::outputs_untouched() { return true; }

#endif

}  // namespace attnlab_test
