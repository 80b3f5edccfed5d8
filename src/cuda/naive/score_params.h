// Everything the row kernels of cuda-naive need to turn raw scores q·k into the masked, scaled scores of
// docs/design.md §2: scale, softcap, bias / boolean mask (broadcast over batch and heads), interval masks and sequence
// lengths. Plain data, passed to kernels by value.
#pragma once

#include <cstdint>

#include "attnlab/attention.h"

namespace attnlab::cuda::naive {

struct ScoreParams {
  std::int64_t B = 0, N = 0, T = 0, S = 0;
  float scale = 1.0f;
  float softcap = 0.0f;
  MaskOptions mask;
  const std::int32_t* q_seqlens = nullptr;   // device, or null: T for every batch
  const std::int32_t* kv_seqlens = nullptr;  // device, or null: S for every batch
  // Bias (f32/f16/bf16) or boolean mask (u8); strides in elements, 0 on broadcast dimensions.
  const void* bias = nullptr;
  DType bias_dtype = DType::f32;
  const std::uint8_t* bool_mask = nullptr;
  std::int64_t mod_stride_b = 0, mod_stride_n = 0, mod_stride_t = 0;
};

// Where the per-row log-sum-exp goes (optional).
struct LseOut {
  float* data = nullptr;
  std::int64_t stride_b = 0, stride_n = 0, stride_t = 0;
};

}  // namespace attnlab::cuda::naive
