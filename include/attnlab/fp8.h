// attnlab — FP8 helpers around attention (docs/design.md §7): quantizing tensors with a per-tensor scale, and
// TransformerEngine's DelayedScaling recipe, whose scales and amax histories live in device memory and are updated
// on the stream, so that a training or inference loop never waits for the host.
//
//   attnlab::DelayedScaling recipe(ctx, {}, attnlab::Device::cuda);     // margin 0, HYBRID, history 1024, "max"
//   attnlab::quantize(ctx, q_bf16, q_fp8, recipe.tensor(attnlab::Fp8Tensor::q));   // likewise k and v
//   args.fp8 = recipe.forward_scales();                                  // descales, scale_s, scale_o, amaxes
//   attnlab::forward(ctx, args);
//   recipe.update(ctx, attnlab::Fp8Pass::forward);                        // one small kernel, no host sync
// In training the backward call comes before update(forward): it reads the descales q, k, v, o were quantized with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "attnlab/attention.h"

namespace attnlab {

// ---------------------------------------------------------------------------------------------------------------
// Quantization: out = fp8(in · scale), rounded to nearest even and saturated to the format's largest finite value
// (NaN stays NaN); amax (when not null) receives max |in| over the tensor. in is f32, f16 or bf16; out is e4m3 or
// e5m2 of the same shape, on the same device. scale and amax are single f32 values in that device's memory (host
// memory for Device::cpu). On the GPU both are ordered on the context's stream; nothing is allocated and nothing
// waits for the host. in and out: rank 1 to 4, the same shape, strides ≥ 0 (in elements), the last dimension
// contiguous, out's elements distinct and apart from in's. A tensor of no elements writes amax = 0 and nothing else.
// amax is exact: the largest |in| as a float (f16 / bf16 inputs are widened exactly); it is NaN when in holds a NaN
// (an inf otherwise wins), so that a recipe keeps its scale for a step that produced NaN.
// dequantize is the inverse map: out = float(in) · scale_inv, rounded to out's dtype (f32, f16 or bf16) to nearest
// even; a NaN result is the quiet NaN with the code's sign, so that both devices write the same bytes. Both throw Error(invalid_argument) naming the rule a view breaks, Error(unsupported) for a CUDA tensor in a
// build without CUDA or on a machine without a usable GPU.
// ---------------------------------------------------------------------------------------------------------------
ATTNLAB_API void quantize(Context& ctx, const TensorView& in, const TensorView& out, const float* scale,
                          float* amax = nullptr);
ATTNLAB_API void dequantize(Context& ctx, const TensorView& in, const TensorView& out, const float* scale_inv);

// ---------------------------------------------------------------------------------------------------------------
// DelayedScaling: the FP8 scaling state of one attention layer, one entry per tensor of Fp8Tensor, with
// TransformerEngine's recipe (docs/design.md §7): each step's amax enters an amax history; the scale for the next
// step is (fp8_max / amax) / 2^margin, amax taken over the history ("max") or its newest entry ("most_recent"); the
// previous scale is kept where amax is 0 or not finite. One exception, for P (Fp8Tensor::s): its scale never
// exceeds fp8_max / 2^margin, because the fused kernels quantize the running probabilities exp(s − m) ≤ 1 (m the
// running row maximum) while amax_s reports the largest normalized probability; the rule's fp8_max / amax_s would
// saturate every running value above amax_s (docs/design.md §7).
// ---------------------------------------------------------------------------------------------------------------
enum class Fp8RecipeFormat : std::uint8_t {
  e4m3,    // every tensor in e4m3
  hybrid,  // e4m3 in the forward pass, e5m2 for the gradients (TransformerEngine's Format.HYBRID)
};
enum class AmaxAlgorithm : std::uint8_t { max, most_recent };

struct DelayedScalingRecipe {
  int margin = 0;  // 0..32: scales leave 2^margin of headroom below the format's largest value
  Fp8RecipeFormat format = Fp8RecipeFormat::hybrid;
  std::size_t amax_history_len = 1024;  // 1 .. 2^24
  AmaxAlgorithm amax_compute_algo = AmaxAlgorithm::max;
};

// The tensors of one attention layer a recipe scales: the forward pass's (format e4m3) and the backward pass's
// (e5m2 under HYBRID). s is the softmax matrix P, d_p the gradient of the scores (dS).
enum class Fp8Tensor : int { q, k, v, s, o, d_o, d_p, dq, dk, dv };
inline constexpr int kFp8TensorCount = 10;
enum class Fp8Pass : std::uint8_t { forward, backward };

// One tensor's state, as pointers into the recipe's memory (device memory for Device::cuda).
struct Fp8TensorScaling {
  float* scale = nullptr;      // what the next quantization multiplies by
  float* scale_inv = nullptr;  // 1 / scale: the descale of a tensor quantized with `scale`
  // This step's amax: the staging slot of the amax history (its slot 0 in memory, as in TransformerEngine).
  // quantize() and attention calls write it (overwriting: the last write of a step counts), update() takes it into
  // the history and clears it to 0.
  float* amax = nullptr;
};

// quantize() with a recipe's tensor: its scale, its staging slot as the amax.
inline void quantize(Context& ctx, const TensorView& in, const TensorView& out, const Fp8TensorScaling& tensor) {
  quantize(ctx, in, out, tensor.scale, tensor.amax);
}

// A host copy of one tensor's state (DelayedScaling::read).
struct Fp8TensorState {
  float scale = 1.0f;
  float scale_inv = 1.0f;
  // The amax_history_len (L) amaxes the next update() takes its amax from ("max": all of them, "most_recent": the
  // last), in time order, oldest first:
  //   amax_history[0 .. L−2]  the amaxes of the last L − 1 update() steps, oldest first (0 before there were any);
  //   amax_history[L−1]       the staging slot (Fp8TensorScaling::amax): what this step has written so far, 0 right
  //                           after update().
  // In memory the staging slot comes first (TransformerEngine's order); read() rotates it to the end so that the
  // history reads in order. With L = 1 the history is the staging slot alone: update() keeps no amax of its own.
  std::vector<float> amax_history;
};

class ATTNLAB_API DelayedScaling {
 public:
  // Allocates the state (kFp8TensorCount · (amax_history_len + 2) floats) on the device — the one allocation of the
  // recipe — and initializes it on the context's stream: scales 1, histories 0, as TransformerEngine starts.
  // Device::cpu keeps the state in host memory and updates it on the calling thread.
  // Throws Error(invalid_argument) on a bad recipe or device index, Error(unsupported) for Device::cuda without CUDA
  // (build or machine), Error(device_error / out_of_memory) when the device fails.
  DelayedScaling(Context& ctx, const DelayedScalingRecipe& recipe, Device device = Device::cuda, int device_index = 0);
  ~DelayedScaling();  // frees the state without throwing; the caller has let the stream's work that uses it finish
  DelayedScaling(const DelayedScaling&) = delete;
  DelayedScaling& operator=(const DelayedScaling&) = delete;
  // A moved-from recipe holds no state: every call on it but destruction and assignment throws.
  DelayedScaling(DelayedScaling&&) noexcept;
  DelayedScaling& operator=(DelayedScaling&&) noexcept;

  const DelayedScalingRecipe& recipe() const;
  Device device() const;
  int device_index() const;
  // The format a tensor is quantized to: e4m3, or e5m2 for backward tensors under HYBRID.
  DType dtype(Fp8Tensor tensor) const;

  Fp8TensorScaling tensor(Fp8Tensor tensor) const;
  // The scales a forward / backward call takes: descales of its inputs, scales and amax slots of what it quantizes.
  // forward: descale_q/k/v = scale_inv of q/k/v; scale_s, descale_s, amax_s of s; scale_o, amax_o of o.
  // backward: descale_q/k/v/o and descale_do = scale_inv of q/k/v/o/d_o; scale_s, descale_s of s; scale_dp,
  // descale_dp, amax_dp of d_p; scale_dq/dk/dv and amax_dq/dk/dv of dq/dk/dv.
  // The pointers stay valid for the recipe's life; what they point at changes with update(). The backward call
  // reads the forward tensors' descales, which must still be the scales q, k, v, o were quantized with: in training,
  // update(forward) comes after the backward call (forward, backward, update(forward), update(backward)).
  Fp8ForwardScales forward_scales() const;
  Fp8BackwardScales backward_scales() const;

  // One recipe step for the pass's five tensors (forward: q, k, v, s, o; backward: d_o, d_p, dq, dk, dv), from the
  // amax each wrote to its staging slot this step: the amax to scale with is taken over the history with the
  // staging slot, the history rolls (the staging slot's amax becomes the newest, the oldest leaves, the staging
  // slot is 0 again), then scale = (fp8_max / amax) / 2^margin and scale_inv = 1 / scale, the previous scale kept
  // where amax is 0 or not finite, FLT_MAX where the scale overflows (docs/design.md §7). Every step rolls, also one
  // that wrote no amax. On the GPU one kernel on the context's stream, no device memory allocated, nothing
  // synchronized; on the CPU host code that works on a host copy of each history. Bit for bit the same on both.
  void update(Context& ctx, Fp8Pass pass);
  // A host copy of the state, after the context's stream has run what was enqueued: for Device::cuda a copy on the
  // context's stream and then cudaStreamSynchronize of that stream (never the device). For debugging and tests,
  // not for a training loop.
  Fp8TensorState read(Context& ctx, Fp8Tensor tensor) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnlab
