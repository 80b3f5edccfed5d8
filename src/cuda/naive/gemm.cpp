#include "cuda/naive/gemm.h"

#include "cuda/common/cuda_check.h"
#include "cuda/common/data_type.h"

namespace attnlab::cuda::naive {

void batched_gemm(cublasHandle_t handle, const GemmShape& s, const void* const* pointers, DType a_type, int lda,
                  DType b_type, int ldb, DType c_type, std::int64_t ldc, std::int64_t count, const char* who) {
  const void* const* a = pointers;
  const void* const* b = pointers + count;
  void* const* c = const_cast<void* const*>(pointers + 2 * count);
  check_cublas(cublasGemmBatchedEx(handle, s.op_a, s.op_b, int(s.m), int(s.n), int(s.k), &s.alpha, a,
                                   cuda_data_type(a_type), lda, b, cuda_data_type(b_type), ldb, &s.beta, c,
                                   cuda_data_type(c_type), int(ldc), int(count), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT),
               who);
}

}  // namespace attnlab::cuda::naive
