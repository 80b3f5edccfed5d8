// What both CPU paths do to a raw score q·k before the softmax, in docs/design.md §2's order:
//   s = scale · q·k  →  softcap · tanh(s / softcap)  →  + bias  →  masked keys become −inf.
// The interval masks (causal, window, sequence lengths) come from core/mask.h as a visible key range per row;
// this file adds the element-wise part (bias, boolean mask) with broadcasting over batch and heads.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/mask.h"
#include "core/numeric.h"
#include "core/problem.h"

namespace attnlab::cpu {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Softcap and its derivative ds_capped/ds (for backward).
inline float softcap(float s, float cap) { return cap > 0.0f ? cap * std::tanh(s / cap) : s; }
inline float softcap_grad(float s_capped, float cap) {
  if (cap <= 0.0f) return 1.0f;
  const float t = s_capped / cap;  // tanh(s / cap)
  return 1.0f - t * t;
}

// Element-wise score modifiers of one (batch, head) pair: bias or boolean mask row access.
class ElementwiseMods {
 public:
  ElementwiseMods(const core::Problem& p, std::int64_t b, std::int64_t n) {
    const TensorView* t = !p.bias.empty() ? &p.bias : (!p.bool_mask.empty() ? &p.bool_mask : nullptr);
    if (t == nullptr) return;
    view_ = t;
    is_mask_ = t == &p.bool_mask;
    base_ = (t->shape[0] == 1 ? 0 : b * t->strides[0]) + (t->shape[1] == 1 ? 0 : n * t->strides[1]);
  }

  bool any() const { return view_ != nullptr; }

  // Applies the bias / boolean mask to scores[j - begin] for keys j in [begin, end) of query row i.
  void apply(std::int64_t i, std::int64_t begin, std::int64_t end, float* scores) const {
    if (view_ == nullptr) return;
    const std::int64_t row = base_ + i * view_->strides[2];
    if (is_mask_) {
      const auto* m = static_cast<const std::uint8_t*>(view_->data) + row;
      for (std::int64_t j = begin; j < end; ++j)
        if (m[j] == 0) scores[j - begin] = kNegInf;
    } else if (view_->dtype == DType::f32) {
      const auto* bias = static_cast<const float*>(view_->data) + row;
      for (std::int64_t j = begin; j < end; ++j) scores[j - begin] += bias[j];
    } else {
      for (std::int64_t j = begin; j < end; ++j) scores[j - begin] += core::load_float(view_->data, view_->dtype, row + j);
    }
  }

 private:
  const TensorView* view_ = nullptr;
  bool is_mask_ = false;
  std::int64_t base_ = 0;
};

}  // namespace attnlab::cpu
