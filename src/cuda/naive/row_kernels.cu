// Row kernels of cuda-naive: masked softmax forward, softmax backward (dS), accumulator stores, GEMM pointer
// arrays. Deliberately simple — one block per score row, three sweeps over it in global memory — because this path
// exists to be the materialized baseline and the GPU reference, not to be fast.
#include <cuda_runtime.h>

#include <cmath>
#include <limits>

#include "core/mask.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/dtype.cuh"
#include "cuda/naive/row_kernels.h"

namespace attnlab::cuda::naive {
namespace {

constexpr int kRowThreads = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <class Op>
__device__ float block_reduce(float value, Op op, float* shared) {
  for (int offset = 16; offset > 0; offset /= 2) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `shared` may still be read by a previous reduction
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = shared[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) value = op(value, shared[w]);
  return value;
}
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

struct RowIndex {
  std::int64_t b, n, i;
  core::KeyRange keys;
  std::int64_t mod_row;  // offset of this row in the bias / boolean mask
};

__device__ __forceinline__ std::int64_t clamp_length(std::int32_t len, std::int64_t max_len) {
  return len < 0 ? 0 : (std::int64_t(len) > max_len ? max_len : std::int64_t(len));
}

__device__ RowIndex locate_row(const ScoreParams& p, std::int64_t row) {
  RowIndex r;
  r.i = row % p.T;
  r.n = (row / p.T) % p.N;
  r.b = row / (p.T * p.N);
  // Device-side lengths cannot be validated before launch: clamp them to [0, T] / [0, S].
  const std::int64_t q_len = p.q_seqlens ? clamp_length(p.q_seqlens[r.b], p.T) : p.T;
  const std::int64_t kv_len = p.kv_seqlens ? clamp_length(p.kv_seqlens[r.b], p.S) : p.S;
  r.keys = core::visible_keys(p.mask, r.i, q_len, kv_len);
  r.mod_row = r.b * p.mod_stride_b + r.n * p.mod_stride_n + r.i * p.mod_stride_t;
  return r;
}

// The capped score before bias: scale·q·k, then softcap.
__device__ __forceinline__ float capped_score(const ScoreParams& p, float raw) {
  const float s = raw * p.scale;
  return p.softcap > 0.0f ? p.softcap * tanhf(s / p.softcap) : s;
}

// Bias and every mask on top of the capped score; −inf when key j is hidden.
__device__ __forceinline__ float final_score(const ScoreParams& p, const RowIndex& r, std::int64_t j, float capped) {
  if (j < r.keys.begin || j >= r.keys.end) return kNegInf;
  if (p.bool_mask != nullptr && p.bool_mask[r.mod_row + j] == 0) return kNegInf;
  if (p.bias != nullptr) capped += load_as_float(p.bias, p.bias_dtype, r.mod_row + j);
  return capped;
}

template <class P>
__global__ void __launch_bounds__(kRowThreads) softmax_forward_kernel(ScoreParams p, float* scores, P* probs,
                                                                       LseOut lse) {
  __shared__ float shared[kRowThreads / 32];
  const std::int64_t row = blockIdx.x;
  const RowIndex r = locate_row(p, row);
  float* s = scores + row * p.S;
  P* out = probs + row * p.S;

  float row_max = kNegInf;
  for (std::int64_t j = threadIdx.x; j < p.S; j += blockDim.x) {
    const float v = final_score(p, r, j, capped_score(p, s[j]));
    s[j] = v;
    row_max = fmaxf(row_max, v);
  }
  row_max = block_reduce(row_max, MaxOp{}, shared);

  float row_sum = 0.0f;
  if (row_max != kNegInf)
    for (std::int64_t j = threadIdx.x; j < p.S; j += blockDim.x) row_sum += expf(s[j] - row_max);
  row_sum = block_reduce(row_sum, SumOp{}, shared);

  const float inv_sum = row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
  for (std::int64_t j = threadIdx.x; j < p.S; j += blockDim.x)
    out[j] = from_float<P>(row_sum > 0.0f ? expf(s[j] - row_max) * inv_sum : 0.0f);
  if (threadIdx.x == 0 && lse.data != nullptr)
    lse.data[r.b * lse.stride_b + r.n * lse.stride_n + r.i * lse.stride_t] =
        row_sum > 0.0f ? row_max + logf(row_sum) : kNegInf;
}

template <class P, class IO>
__global__ void __launch_bounds__(kRowThreads) softmax_backward_kernel(ScoreParams p, BackwardRowArgs a) {
  __shared__ float shared[kRowThreads / 32];
  const std::int64_t row = blockIdx.x;
  const RowIndex r = locate_row(p, row);
  const float lse = a.lse[r.b * a.lse_stride_b + r.n * a.lse_stride_n + r.i * a.lse_stride_t];

  // D_i = dO_i · O_i: the softmax Jacobian's correction term.
  const IO* o = static_cast<const IO*>(a.o) + r.b * a.o_strides[0] + r.i * a.o_strides[1] + r.n * a.o_strides[2];
  const IO* d_o =
      static_cast<const IO*>(a.d_o) + r.b * a.d_o_strides[0] + r.i * a.d_o_strides[1] + r.n * a.d_o_strides[2];
  float dot = 0.0f;
  for (std::int64_t h = threadIdx.x; h < a.Hv; h += blockDim.x) dot += to_float(o[h]) * to_float(d_o[h]);
  const float D = block_reduce(dot, SumOp{}, shared);

  const float* s = a.scores + row * p.S;
  const float* dp = a.d_probs + row * p.S;
  P* probs = static_cast<P*>(a.probs) + row * p.S;
  P* ds = static_cast<P*>(a.d_scores) + row * p.S;
  for (std::int64_t j = threadIdx.x; j < p.S; j += blockDim.x) {
    const float capped = capped_score(p, s[j]);
    const float v = final_score(p, r, j, capped);
    const float prob = (v == kNegInf || lse == kNegInf) ? 0.0f : expf(v - lse);
    float grad = prob * (dp[j] - D);
    if (p.softcap > 0.0f) {
      const float t = capped / p.softcap;
      grad *= 1.0f - t * t;
    }
    probs[j] = from_float<P>(prob);
    ds[j] = from_float<P>(grad);
  }
}

template <class Out>
__global__ void store_accumulator_kernel(const float* acc, Out* out, std::int64_t B, std::int64_t L, std::int64_t K,
                                         std::int64_t H, std::int64_t s0, std::int64_t s1, std::int64_t s2) {
  const std::int64_t total = B * K * L * H;
  for (std::int64_t idx = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t h = idx % H;
    const std::int64_t l = (idx / H) % L;
    const std::int64_t kh = (idx / (H * L)) % K;
    const std::int64_t b = idx / (H * L * K);
    out[b * s0 + l * s1 + kh * s2 + h] = from_float<Out>(acc[idx]);
  }
}

__device__ const void* operand_pointer(const BatchOperand& op, std::int64_t b, std::int64_t h) {
  const std::int64_t head = (h * op.head_mul + op.head_add) / op.head_div;
  return static_cast<const char*>(op.base) + op.elem_bytes * (b * op.stride_b + head * op.stride_h);
}

__global__ void make_batch_pointers_kernel(BatchOperand a, BatchOperand b, BatchOperand c, std::int64_t batch,
                                           std::int64_t heads, const void** out) {
  const std::int64_t count = batch * heads;
  for (std::int64_t idx = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t bi = idx / heads, h = idx % heads;
    out[idx] = operand_pointer(a, bi, h);
    out[count + idx] = operand_pointer(b, bi, h);
    out[2 * count + idx] = operand_pointer(c, bi, h);
  }
}

unsigned grid_for(std::int64_t total, int threads) {
  const std::int64_t blocks = (total + threads - 1) / threads;
  return unsigned(std::min<std::int64_t>(std::max<std::int64_t>(blocks, 1), 65535 * 16));
}

}  // namespace

void softmax_forward(const ScoreParams& params, float* scores, void* probs, DType p_dtype, const LseOut& lse,
                     cudaStream_t stream) {
  const std::int64_t rows = params.B * params.N * params.T;
  dispatch_float_dtype(p_dtype, [&](auto tag) {
    using P = decltype(tag);
    softmax_forward_kernel<P><<<unsigned(rows), kRowThreads, 0, stream>>>(params, scores, static_cast<P*>(probs), lse);
  });
  check_launch("cuda-naive: softmax_forward");
}

void softmax_backward(const ScoreParams& params, const BackwardRowArgs& args, DType p_dtype, cudaStream_t stream) {
  const std::int64_t rows = params.B * params.N * params.T;
  dispatch_float_dtype(p_dtype, [&](auto tag) {
    using P = decltype(tag);
    softmax_backward_kernel<P, P><<<unsigned(rows), kRowThreads, 0, stream>>>(params, args);
  });
  check_launch("cuda-naive: softmax_backward");
}

void store_accumulator(const float* acc, const TensorView& out, cudaStream_t stream) {
  const std::int64_t B = out.shape[0], L = out.shape[1], K = out.shape[2], H = out.shape[3];
  dispatch_float_dtype(out.dtype, [&](auto tag) {
    using Out = decltype(tag);
    store_accumulator_kernel<Out><<<grid_for(B * K * L * H, 256), 256, 0, stream>>>(
        acc, static_cast<Out*>(out.data), B, L, K, H, out.strides[0], out.strides[1], out.strides[2]);
  });
  check_launch("cuda-naive: store_accumulator");
}

void make_batch_pointers(const BatchOperand& a, const BatchOperand& b, const BatchOperand& c, std::int64_t batch,
                         std::int64_t heads, const void** out, cudaStream_t stream) {
  make_batch_pointers_kernel<<<grid_for(batch * heads, 256), 256, 0, stream>>>(a, b, c, batch, heads, out);
  check_launch("cuda-naive: make_batch_pointers");
}

}  // namespace attnlab::cuda::naive
