// TransformerEngine's DelayedScaling recipe for one FP8 tensor (docs/design.md §7), on the host: the reference a
// device update kernel is checked against. Plain C++, no CUDA.
//
// One step, in TransformerEngine's order:
//   1. the quantizations of the step record their amax into slot 0 of the history (the staging slot);
//   2. the amax to scale with is taken from the whole history, slot 0 included, before it moves: "max" is the
//      maximum of all L entries, "most_recent" is slot 0;
//   3. the history rolls left by one: slot 0 (the newest) moves to the end, slot 1 (the oldest) leaves, and slot 0
//      is zeroed for the next step;
//   4. scale = (fp8_max / amax) / 2^margin where amax is finite and > 0, the previous scale otherwise; a scale that
//      overflows float (a tiny amax) becomes FLT_MAX; scale_inv = 1 / scale.
// Between steps slots 1..L−1 therefore hold the last L−1 amaxes, oldest first, and the scale of step n is used to
// quantize step n + 1 (hence "delayed").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnlab/fp8.h"
#include "core/fp8.h"

namespace attnlab::core {

// The public enums (attnlab/fp8.h), so that the recipe's options reach this reference unconverted. The format says
// which FP8 format each tensor uses: e4m3 everywhere, or HYBRID: e4m3 for the forward pass (q, k, v, s, o) and e5m2
// for gradients (dO, dS), whose range matters more than their precision.
using attnlab::AmaxAlgorithm;
using attnlab::Fp8RecipeFormat;
enum class Fp8Role : std::uint8_t { forward, backward };

// TransformerEngine has two implementations of the update that differ in corner cases; both are reproduced.
//   reference: its Python update (what docs/design.md §7 states): "max" propagates a NaN in the history (so the
//              previous scale is kept while it stays there), the history rolls every step, and the scale is
//              computed as (fp8_max / amax) / 2^margin.
//   fused:     its CUDA kernel for many tensors, which its PyTorch modules call by default: "max" skips NaN entries
//              (fmaxf), a step whose new amax is 0 neither rolls the history nor changes the scale, and the scale is
//              (fp8_max · 2^-margin) / amax (equal to the other form unless fp8_max / amax overflows or underflows).
enum class DelayedScalingUpdate : std::uint8_t { reference, fused };

struct RecipeParams {
  int margin = 0;                  // the scale leaves 2^margin of headroom below fp8_max
  std::size_t history_len = 1024;  // L, at least 1
  AmaxAlgorithm algorithm = AmaxAlgorithm::max;
  Fp8RecipeFormat format = Fp8RecipeFormat::hybrid;
  DelayedScalingUpdate update = DelayedScalingUpdate::reference;
};

Fp8Format recipe_fp8_format(Fp8RecipeFormat format, Fp8Role role);

struct DelayedScalingState {
  std::vector<float> amax_history;  // L entries: [0] the staging slot (0 between steps), [1..L−1] oldest → newest
  float scale = 1.0f;               // real value · scale is what is quantized
  float scale_inv = 1.0f;           // the descale: stored value · scale_inv is the real value
};

// L zeros and scale 1, as TransformerEngine starts a tensor.
DelayedScalingState initial_delayed_scaling_state(const RecipeParams& params);

// The amax step 2 takes from a history whose slot 0 holds the step's amax.
float delayed_scaling_amax(const RecipeParams& params, const std::vector<float>& history);

// One step: `new_amax` (max |x| of the tensor this step, before quantization) enters slot 0, then steps 2–4.
// Throws std::invalid_argument when the history's length is not params.history_len or is 0.
DelayedScalingState delayed_scaling_step(const RecipeParams& params, Fp8Role role, const std::vector<float>& history,
                                         float prev_scale, float new_amax);

inline DelayedScalingState delayed_scaling_step(const RecipeParams& params, Fp8Role role,
                                                const DelayedScalingState& prev, float new_amax) {
  return delayed_scaling_step(params, role, prev.amax_history, prev.scale, new_amax);
}

}  // namespace attnlab::core
