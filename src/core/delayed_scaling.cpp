#include "core/delayed_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace attnlab::core {

Fp8Format recipe_fp8_format(Fp8RecipeFormat format, Fp8Role role) {
  return format == Fp8RecipeFormat::hybrid && role == Fp8Role::backward ? Fp8Format::e5m2 : Fp8Format::e4m3;
}

DelayedScalingState initial_delayed_scaling_state(const RecipeParams& params) {
  DelayedScalingState state;
  state.amax_history.assign(params.history_len, 0.0f);
  return state;
}

float delayed_scaling_amax(const RecipeParams& params, const std::vector<float>& history) {
  if (history.empty()) return 0.0f;
  if (params.algorithm == AmaxAlgorithm::most_recent) return history[0];
  float amax = 0.0f;  // amaxes are ≥ 0; an all-zero history gives 0, which keeps the previous scale
  for (float a : history) {
    if (params.update == DelayedScalingUpdate::fused) {
      amax = std::fmax(amax, a);  // fmax returns the other operand when one is NaN: NaN entries are skipped
    } else if (std::isnan(a) || std::isnan(amax)) {
      amax = std::numeric_limits<float>::quiet_NaN();  // a max over a tensor holding NaN is NaN
    } else {
      amax = std::max(amax, a);
    }
  }
  return amax;
}

namespace {

float next_scale(const RecipeParams& params, float fp8_max, float amax, float prev_scale) {
  float scale = prev_scale;
  if (std::isfinite(amax) && amax > 0.0f) {
    // The two forms round differently only where fp8_max / amax leaves float's range: kept apart on purpose.
    if (params.update == DelayedScalingUpdate::fused)
      scale = (fp8_max * std::ldexp(1.0f, -params.margin)) / amax;
    else
      scale = (fp8_max / amax) / std::ldexp(1.0f, params.margin);
  }
  // A tiny amax overflows the scale; the largest float maps amax below fp8_max, but stays usable.
  if (std::isinf(scale)) scale = std::numeric_limits<float>::max();
  return scale;
}

}  // namespace

DelayedScalingState delayed_scaling_step(const RecipeParams& params, Fp8Role role, const std::vector<float>& history,
                                         float prev_scale, float new_amax) {
  if (params.history_len == 0 || history.size() != params.history_len)
    throw std::invalid_argument("delayed scaling: the amax history has " + std::to_string(history.size()) +
                                " entries, the recipe asks for " + std::to_string(params.history_len) +
                                " (at least 1)");
  const float fp8_max_value = fp8_max(recipe_fp8_format(params.format, role));

  DelayedScalingState next;
  next.amax_history = history;
  next.amax_history[0] = new_amax;  // step 1: the staging slot holds this step's amax

  if (params.update == DelayedScalingUpdate::fused && new_amax == 0.0f) {
    // The fused kernel leaves such a tensor alone: no roll, the previous scale.
    next.scale = next_scale(params, fp8_max_value, 0.0f, prev_scale);
  } else {
    const float amax = delayed_scaling_amax(params, next.amax_history);  // step 2, before the roll
    // Step 3: roll left by one, the newest to the end, then clear the staging slot (with L = 1, only the clear).
    std::vector<float>& h = next.amax_history;
    std::rotate(h.begin(), h.begin() + 1, h.end());
    h[0] = 0.0f;
    next.scale = next_scale(params, fp8_max_value, amax, prev_scale);  // step 4
  }
  next.scale_inv = 1.0f / next.scale;
  return next;
}

}  // namespace attnlab::core
