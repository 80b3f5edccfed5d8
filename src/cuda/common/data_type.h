// attnlab DTypes as CUDA library data types (host code).
#pragma once

#include <library_types.h>

#include "attnlab/attention.h"

namespace attnlab::cuda {

inline cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::e4m3: return CUDA_R_8F_E4M3;
    case DType::e5m2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
  }
}

}  // namespace attnlab::cuda
