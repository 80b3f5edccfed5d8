// The element-wise kernels of cuda-naive, between its cuBLAS GEMMs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attnlab/attention.h"
#include "cuda/naive/score_params.h"

namespace attnlab::cuda::naive {

// Forward, one block per row (b, n, i) of the (B, N, T, S) fp32 `scores`: applies scale, softcap, bias and masks
// in place, then writes P = softmax(row) in `p_dtype` to `probs` (row-major, leading dimension S; may alias
// `scores` when p_dtype is f32) and the row's log-sum-exp. A row with no visible key gets P = 0, LSE = −inf.
void softmax_forward(const ScoreParams& params, float* scores, void* probs, DType p_dtype, const LseOut& lse,
                     cudaStream_t stream);

// Backward, one block per row: from raw scores and dP = dO·Vᵀ (both fp32, (B, N, T, S)) and the forward LSE,
// recomputes P and writes P and dS = P∘(dP − D)·softcap'(s) in `p_dtype` (may alias scores / d_probs for f32).
// D_i = Σ_h dO[i, h]·O[i, h] is computed in the same pass.
struct BackwardRowArgs {
  const float* scores = nullptr;
  const float* d_probs = nullptr;
  const float* lse = nullptr;  // (B, N, T) with strides
  std::int64_t lse_stride_b = 0, lse_stride_n = 0, lse_stride_t = 0;
  const void* o = nullptr;
  const void* d_o = nullptr;
  std::int64_t o_strides[4] = {}, d_o_strides[4] = {};
  std::int64_t Hv = 0;
  void* probs = nullptr;    // out, p_dtype
  void* d_scores = nullptr; // out, p_dtype
};
void softmax_backward(const ScoreParams& params, const BackwardRowArgs& args, DType p_dtype, cudaStream_t stream);

// Converts an fp32 (B, K, L, H) contiguous accumulator to a strided output view of its dtype.
void store_accumulator(const float* acc, const TensorView& out, cudaStream_t stream);

// Pointer arrays for cublasGemmBatchedEx: entry idx = b·heads + h of a GEMM batched over (batch, head) points at
// base + elem·(b·stride_b + ((h·head_mul + head_add) / head_div)·stride_h). Built on the device: no host sync.
struct BatchOperand {
  const void* base = nullptr;
  std::int64_t elem_bytes = 0;
  std::int64_t stride_b = 0, stride_h = 0;
  std::int64_t head_mul = 1, head_add = 0, head_div = 1;
};
void make_batch_pointers(const BatchOperand& a, const BatchOperand& b, const BatchOperand& c, std::int64_t batch,
                         std::int64_t heads, const void** out, cudaStream_t stream);

}  // namespace attnlab::cuda::naive
