// cuda-naive: attention the way the codelab writes it from scratch, on the GPU.
//   forward:  scores = Q·Kᵀ (cuBLAS, fp32 out) → masked softmax kernel (P in the inputs' dtype, LSE) → O = P·V
//   backward: scores and dP = dO·Vᵀ again → row kernel (P, dS) → dQ = scale·dS·K, dK = scale·dSᵀ·Q, dV = Pᵀ·dO
// The (B, N, T, S) score matrix is materialized, which is the point: it is the baseline the fused paths beat, and
// the GPU reference in tests. GQA/MQA map query heads onto KV heads through the GEMMs' pointer arrays — no copies.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>

#include "core/context_impl.h"
#include "core/error.h"
#include "core/path.h"
#include "cuda/common/call_scratch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"
#include "cuda/common/library_handle.h"
#include "cuda/common/scratch_layout.h"
#include "cuda/common/score_modifier.h"
#include "cuda/common/seqlens.h"
#include "cuda/naive/gemm.h"
#include "cuda/naive/row_kernels.h"

namespace attnlab::cuda {
namespace naive {
namespace {

constexpr const char* kName = "cuda-naive";
// cuBLAS's scratch, carved from the call's workspace so that cuBLAS allocates nothing of its own per stream and a
// caller workspace covers the whole call (cuBLAS picks algorithms that fit; 4 MiB is its pre-Hopper default).
constexpr std::size_t kCublasWorkspace = std::size_t(4) << 20;

struct Cublas {
  using Handle = cublasHandle_t;
  static constexpr const char* name = "cuBLAS";
  static constexpr int kOutOfMemory = CUBLAS_STATUS_ALLOC_FAILED;
  static int create(Handle* h) { return int(cublasCreate(h)); }
  static void destroy(Handle h) noexcept { cublasDestroy(h); }
  static const char* error(int status) { return cublasGetStatusString(cublasStatus_t(status)); }
};

struct State : PathState {
  LibraryHandles<Cublas> cublas;
};

// cuBLAS on the call's stream, with its scratch in the call's workspace (cublasSetStream resets the workspace,
// so both are set on every call).
cublasHandle_t handle_for(Context::Impl& ctx, int device, cudaStream_t stream, void* cublas_scratch) {
  cublasHandle_t handle = ctx.state_for<State>(kName).cublas.get(device, ctx.device_allocations, kName);
  check_cublas(cublasSetStream(handle, stream), "cuda-naive: cublasSetStream");
  check_cublas(cublasSetWorkspace(handle, cublas_scratch, kCublasWorkspace), "cuda-naive: cublasSetWorkspace");
  return handle;
}

// Where each piece of a call's scratch lies (byte offsets into one block).
struct Layout {
  std::size_t ptrs = 0, scores = 0, probs = 0, dprobs = 0, dscores = 0, dk = 0, dv = 0, seqlens = 0, cublas = 0;
  std::size_t total = 0;
};

Layout layout_of(const core::Problem& p) {
  const auto& d = p.dims;
  const bool f32 = p.dtype == DType::f32;
  const std::size_t elem = size_of(p.dtype);
  ScratchLayout carve(kName);
  const std::size_t cells = carve.checked_mul(carve.checked_mul(std::size_t(d.B * d.N), std::size_t(d.T)),
                                              std::size_t(d.S));
  Layout l;
  l.ptrs = carve.add(3 * std::size_t(d.B * d.N), sizeof(void*));
  l.scores = carve.add(cells, 4);
  if (p.direction == core::Direction::forward) {
    l.probs = f32 ? l.scores : carve.add(cells, elem);
  } else {
    l.dprobs = carve.add(cells, 4);
    l.probs = f32 ? l.scores : carve.add(cells, elem);
    l.dscores = f32 ? l.dprobs : carve.add(cells, elem);
    l.dk = carve.add(std::size_t(d.B * d.K * d.S * d.Hqk), 4);
    l.dv = carve.add(std::size_t(d.B * d.K * d.S * d.Hv), 4);
  }
  l.seqlens = carve.add(seqlens_scratch_bytes(p));
  l.cublas = carve.add(kCublasWorkspace);
  l.total = carve.size();
  return l;
}

ScoreParams score_params(const core::Problem& p) {
  ScoreParams s;
  s.B = p.dims.B;
  s.N = p.dims.N;
  s.T = p.dims.T;
  s.S = p.dims.S;
  s.scale = p.scale;
  s.softcap = p.softcap;
  s.mask = p.mask;
  const ScoreModifier mod = score_modifier(p);
  s.bias = mod.bias;
  s.bias_dtype = mod.bias_dtype;
  s.bool_mask = mod.bool_mask;
  s.mod_stride_b = mod.stride_b, s.mod_stride_n = mod.stride_n, s.mod_stride_t = mod.stride_t;
  return s;
}

void place_seqlens(const core::Problem& p, ScoreParams& s, std::int32_t* device_copy, cudaStream_t stream) {
  const DeviceSeqlens lengths = cuda::place_seqlens(p, device_copy, stream, kName);
  s.q_seqlens = lengths.q;
  s.kv_seqlens = lengths.kv;
}

// The sequence-stride of a (B, L, H, D) view as a GEMM leading dimension (any value ≥ D is fine for L == 1).
int leading_dim(const TensorView& t) {
  const std::int64_t d = t.shape[3];
  return int(t.shape[1] == 1 ? std::max(t.strides[1], d) : t.strides[1]);
}

BatchOperand tensor_operand(const TensorView& t, std::int64_t head_div = 1, std::int64_t head_mul = 1,
                            std::int64_t head_add = 0) {
  return {t.data, std::int64_t(size_of(t.dtype)), t.strides[0], t.strides[2], head_mul, head_add, head_div};
}

// A (batch, heads, rows, cols) contiguous scratch matrix as a GEMM operand.
BatchOperand scratch_operand(const void* base, std::size_t elem, std::int64_t heads, std::int64_t rows,
                             std::int64_t cols, std::int64_t head_mul = 1, std::int64_t head_add = 0) {
  return {base, std::int64_t(elem), heads * rows * cols, rows * cols, head_mul, head_add, 1};
}

void forward(Context::Impl& ctx, const core::Problem& p, const Layout& l, char* base, cudaStream_t stream) {
  const auto& d = p.dims;
  const std::size_t elem = size_of(p.dtype);
  auto** ptrs = reinterpret_cast<const void**>(base + l.ptrs);
  auto* scores = reinterpret_cast<float*>(base + l.scores);
  void* probs = base + l.probs;

  ScoreParams params = score_params(p);
  cublasHandle_t handle = handle_for(ctx, p.device_index, stream, base + l.cublas);  // before anything is enqueued
  place_seqlens(p, params, reinterpret_cast<std::int32_t*>(base + l.seqlens), stream);
  const std::int64_t G = d.group();

  // scores[b, n] (T × S, row-major) = Q[b, n] · K[b, n / G]ᵀ; column-major: (S × T) = Kᵀ·Q.
  make_batch_pointers(tensor_operand(p.k, G), tensor_operand(p.q), scratch_operand(scores, 4, d.N, d.T, d.S), d.B,
                      d.N, ptrs, stream);
  batched_gemm(handle, {CUBLAS_OP_T, CUBLAS_OP_N, d.S, d.T, d.Hqk, 1.0f, 0.0f}, ptrs, p.dtype, leading_dim(p.k),
               p.dtype, leading_dim(p.q), DType::f32, d.S, d.B * d.N, kName);

  LseOut lse;
  if (p.has_lse()) lse = {static_cast<float*>(p.lse.data), p.lse.strides[0], p.lse.strides[1], p.lse.strides[2]};
  softmax_forward(params, scores, probs, p.dtype, lse, stream);

  // O[b, n] (T × Hv) = P[b, n] · V[b, n / G]; column-major: (Hv × T) = V·P.
  make_batch_pointers(tensor_operand(p.v, G), scratch_operand(probs, elem, d.N, d.T, d.S), tensor_operand(p.o), d.B,
                      d.N, ptrs, stream);
  batched_gemm(handle, {CUBLAS_OP_N, CUBLAS_OP_N, d.Hv, d.T, d.S, 1.0f, 0.0f}, ptrs, p.dtype, leading_dim(p.v),
               p.dtype, int(d.S), p.dtype, leading_dim(p.o), d.B * d.N, kName);
}

void backward(Context::Impl& ctx, const core::Problem& p, const Layout& l, char* base, cudaStream_t stream) {
  const auto& d = p.dims;
  const std::size_t elem = size_of(p.dtype);
  auto** ptrs = reinterpret_cast<const void**>(base + l.ptrs);
  auto* scores = reinterpret_cast<float*>(base + l.scores);
  auto* dprobs = reinterpret_cast<float*>(base + l.dprobs);
  void* probs = base + l.probs;
  void* dscores = base + l.dscores;
  auto* dk_acc = reinterpret_cast<float*>(base + l.dk);
  auto* dv_acc = reinterpret_cast<float*>(base + l.dv);

  ScoreParams params = score_params(p);
  cublasHandle_t handle = handle_for(ctx, p.device_index, stream, base + l.cublas);  // before anything is enqueued
  place_seqlens(p, params, reinterpret_cast<std::int32_t*>(base + l.seqlens), stream);
  const std::int64_t G = d.group();

  // Raw scores again, as in forward.
  make_batch_pointers(tensor_operand(p.k, G), tensor_operand(p.q), scratch_operand(scores, 4, d.N, d.T, d.S), d.B,
                      d.N, ptrs, stream);
  batched_gemm(handle, {CUBLAS_OP_T, CUBLAS_OP_N, d.S, d.T, d.Hqk, 1.0f, 0.0f}, ptrs, p.dtype, leading_dim(p.k),
               p.dtype, leading_dim(p.q), DType::f32, d.S, d.B * d.N, kName);
  // dP[b, n] (T × S) = dO · Vᵀ; column-major: (S × T) = Vᵀ·dO.
  make_batch_pointers(tensor_operand(p.v, G), tensor_operand(p.d_o), scratch_operand(dprobs, 4, d.N, d.T, d.S), d.B,
                      d.N, ptrs, stream);
  batched_gemm(handle, {CUBLAS_OP_T, CUBLAS_OP_N, d.S, d.T, d.Hv, 1.0f, 0.0f}, ptrs, p.dtype, leading_dim(p.v),
               p.dtype, leading_dim(p.d_o), DType::f32, d.S, d.B * d.N, kName);

  BackwardRowArgs rows;
  rows.scores = scores;
  rows.d_probs = dprobs;
  rows.lse = static_cast<const float*>(p.lse.data);
  rows.lse_stride_b = p.lse.strides[0];
  rows.lse_stride_n = p.lse.strides[1];
  rows.lse_stride_t = p.lse.strides[2];
  rows.o = p.o.data;
  rows.d_o = p.d_o.data;
  for (int k = 0; k < 4; ++k) {
    rows.o_strides[k] = p.o.strides[k];
    rows.d_o_strides[k] = p.d_o.strides[k];
  }
  rows.Hv = d.Hv;
  rows.probs = probs;
  rows.d_scores = dscores;
  softmax_backward(params, rows, p.dtype, stream);

  // dQ[b, n] (T × Hqk) = scale · dS · K; column-major: (Hqk × T) = K·dS.
  make_batch_pointers(tensor_operand(p.k, G), scratch_operand(dscores, elem, d.N, d.T, d.S), tensor_operand(p.dq),
                      d.B, d.N, ptrs, stream);
  batched_gemm(handle, {CUBLAS_OP_N, CUBLAS_OP_N, d.Hqk, d.T, d.S, p.scale, 0.0f}, ptrs, p.dtype, leading_dim(p.k),
               p.dtype, int(d.S), p.dtype, leading_dim(p.dq), d.B * d.N, kName);

  // dK / dV of KV head h sum over the G query heads h·G + g: one batched GEMM per g, accumulating (beta = 1).
  for (std::int64_t g = 0; g < G; ++g) {
    const float beta = g == 0 ? 0.0f : 1.0f;
    // dV[b, h] (S × Hv) += P[b, hG+g]ᵀ · dO[b, hG+g]; column-major: (Hv × S) = dO·P.
    make_batch_pointers(tensor_operand(p.d_o, 1, G, g), scratch_operand(probs, elem, d.N, d.T, d.S, G, g),
                        scratch_operand(dv_acc, 4, d.K, d.S, d.Hv), d.B, d.K, ptrs, stream);
    batched_gemm(handle, {CUBLAS_OP_N, CUBLAS_OP_T, d.Hv, d.S, d.T, 1.0f, beta}, ptrs, p.dtype, leading_dim(p.d_o),
                 p.dtype, int(d.S), DType::f32, int(d.Hv), d.B * d.K, kName);
    // dK[b, h] (S × Hqk) += scale · dS[b, hG+g]ᵀ · Q[b, hG+g]; column-major: (Hqk × S) = Q·dS.
    make_batch_pointers(tensor_operand(p.q, 1, G, g), scratch_operand(dscores, elem, d.N, d.T, d.S, G, g),
                        scratch_operand(dk_acc, 4, d.K, d.S, d.Hqk), d.B, d.K, ptrs, stream);
    batched_gemm(handle, {CUBLAS_OP_N, CUBLAS_OP_T, d.Hqk, d.S, d.T, p.scale, beta}, ptrs, p.dtype,
                 leading_dim(p.q), p.dtype, int(d.S), DType::f32, int(d.Hqk), d.B * d.K, kName);
  }
  store_accumulator(dk_acc, p.dk, stream);
  store_accumulator(dv_acc, p.dv, stream);
}

class NaivePath final : public core::Path {
 public:
  std::string_view name() const override { return kName; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "cuBLAS GEMM → softmax kernel → GEMM; materializes the (B, N, T, S) scores; f32/f16/bf16, fwd+bwd, "
           "every mask; the GPU reference";
  }
  std::optional<std::string> unavailable() const override { return cuda_unavailable(); }
  std::optional<std::string> why_not(const core::Problem& p) const override {
    if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
      return fmt::format("{} inputs unsupported; use f32, f16 or bf16 (FP8 runs on path=cudnn)", to_string(p.dtype));
    const auto& d = p.dims;
    if (d.T > INT_MAX || d.S > INT_MAX || d.B * d.N > INT_MAX)
      return std::string("T, S and B·N must each fit cuBLAS's 32-bit sizes");
    const std::pair<const char*, const TensorView*> seq_views[] = {
        {"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"o", &p.o}, {"d_o", &p.d_o}, {"dq", &p.dq}};
    for (auto [name, t] : seq_views) {
      if (t->empty()) continue;
      if (t->shape[1] > 1 && t->strides[1] < t->shape[3])
        return fmt::format("{}.strides[1] = {} is below its head dim {}: cuBLAS needs a leading dimension ≥ the "
                           "head dim",
                           name, t->strides[1], t->shape[3]);
      if (t->strides[1] > INT_MAX) return fmt::format("{}.strides[1] exceeds cuBLAS's 32-bit leading dimension", name);
    }
    return std::nullopt;
  }
  core::Verdict plan(Context::Impl& ctx, const core::Problem& p) const override {
    core::Verdict v;
    v.reason = refusal(ctx, p, v.workspace_bytes);
    return v;
  }
  std::optional<std::string> run_if_able(Context::Impl& ctx, const core::Problem& p) const override {
    std::size_t bytes = 0;
    if (auto why = refusal(ctx, p, bytes)) return why;
    const Layout layout = layout_of(p);
    DeviceGuard guard(p.device_index);
    auto stream = static_cast<cudaStream_t>(ctx.stream);
    ScratchLease scratch(ctx, p, layout.total, stream, kName);
    if (p.direction == core::Direction::forward)
      forward(ctx, p, layout, scratch.data(), stream);
    else
      backward(ctx, p, layout, scratch.data(), stream);
    return std::nullopt;
  }

 private:
  // The rules, then what the call itself would run into before launching (scratch, cuBLAS's handle); `bytes` is
  // the scratch the call needs.
  std::optional<std::string> refusal(Context::Impl& ctx, const core::Problem& p, std::size_t& bytes) const {
    if (auto why = why_not(p)) return why;
    bytes = layout_of(p).total;
    auto stream = static_cast<cudaStream_t>(ctx.stream);
    if (auto why = scratch_refusal(ctx, p, bytes, stream)) return why;
    return ctx.state_for<State>(kName).cublas.refusal(p.device_index, stream);
  }
};

}  // namespace
}  // namespace naive

const core::Path& naive_path() {
  static const naive::NaivePath path;
  return path;
}

}  // namespace attnlab::cuda
