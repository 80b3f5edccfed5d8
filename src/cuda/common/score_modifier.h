// The optional additive bias or boolean mask of a problem, as kernels index it: one pointer and the strides of a
// (B|1, N|1, T, S) view, stride 0 on a broadcast dimension. Shared by the GPU paths that read it element-wise.
#pragma once

#include <cstdint>

#include "core/problem.h"

namespace attnlab::cuda {

struct ScoreModifier {
  const void* bias = nullptr;  // additive bias (bias_dtype), or null
  DType bias_dtype = DType::f32;
  const std::uint8_t* bool_mask = nullptr;  // 0 = hidden, or null
  std::int64_t stride_b = 0, stride_n = 0, stride_t = 0;
};

inline ScoreModifier score_modifier(const core::Problem& p) {
  ScoreModifier m;
  const TensorView* mod = !p.bias.empty() ? &p.bias : (!p.bool_mask.empty() ? &p.bool_mask : nullptr);
  if (mod == nullptr) return m;
  if (mod == &p.bias) {
    m.bias = p.bias.data;
    m.bias_dtype = p.bias.dtype;
  } else {
    m.bool_mask = static_cast<const std::uint8_t*>(p.bool_mask.data);
  }
  m.stride_b = mod->shape[0] == 1 ? 0 : mod->strides[0];
  m.stride_n = mod->shape[1] == 1 ? 0 : mod->strides[1];
  m.stride_t = mod->strides[2];
  return m;
}

}  // namespace attnlab::cuda
