// One cublasGemmBatchedEx call over pointer arrays (A, B, C laid out back to back by make_batch_pointers), fp32
// accumulation always: CUBLAS_COMPUTE_32F, no TF32, so the f32 path stays an accurate reference.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "attnlab/attention.h"

namespace attnlab::cuda::naive {

struct GemmShape {
  cublasOperation_t op_a, op_b;
  std::int64_t m, n, k;  // column-major: C (m × n) = alpha · op(A) (m × k) · op(B) (k × n) + beta · C
  float alpha, beta;
};

void batched_gemm(cublasHandle_t handle, const GemmShape& shape, const void* const* pointers, DType a_type, int lda,
                  DType b_type, int ldb, DType c_type, std::int64_t ldc, std::int64_t count, const char* who);

}  // namespace attnlab::cuda::naive
