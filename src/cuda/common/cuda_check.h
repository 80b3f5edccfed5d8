// Turning CUDA runtime and cuBLAS failures into attnlab::Error(device_error / out_of_memory) with the call named.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string_view>

#include "core/error.h"

namespace attnlab::cuda {

inline void check_cuda(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess) return;
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error so the context stays usable
    core::fail(ErrorCode::out_of_memory, "{}: out of device memory ({})", what, cudaGetErrorString(status));
  }
  core::fail(ErrorCode::device_error, "{}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status));
}

inline void check_cublas(cublasStatus_t status, std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  if (status == CUBLAS_STATUS_ALLOC_FAILED)
    core::fail(ErrorCode::out_of_memory, "{}: cuBLAS could not allocate device memory", what);
  core::fail(ErrorCode::device_error, "{}: cuBLAS failed: {}", what, cublasGetStatusString(status));
}

// After a kernel launch: launch-configuration errors surface here, before the next call.
inline void check_launch(std::string_view what) { check_cuda(cudaGetLastError(), what); }

}  // namespace attnlab::cuda
