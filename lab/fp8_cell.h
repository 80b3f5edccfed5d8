// The GPU side of `attnlab fp8` (the codelab's FP8 cell): random bf16 Q, K, V on the GPU; their e4m3 copies,
// quantized with a DelayedScaling recipe (attnlab/fp8.h); the FP8 forward call with the recipe's scales and an
// e4m3 O; that O dequantized back to bf16 with the scale_inv it was written with; one recipe update per step.
//
// What a learner reads off it must be what the library did, so: every output is poisoned (NaN) before the call
// that writes it, every call's errors surface (the lab synchronizes after each step), and each piece is checked on
// its own — quantize's codes against the lab's own rounding of x · scale, the FP8 call against bf16 attention on
// the very inputs it saw (its e4m3 Q, K, V decoded), and the dequantized O against the lab's decoding of its bytes —
// so that a difference from bf16 can be traced to the step that made it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <attnlab/attention.h>
#include <attnlab/fp8.h>

#include "gpu.h"

namespace lab {

// The forward tensors of one attention layer, in the order the lab prints them.
inline constexpr std::array<attnlab::Fp8Tensor, 5> kForwardTensors = {
    attnlab::Fp8Tensor::q, attnlab::Fp8Tensor::k, attnlab::Fp8Tensor::v, attnlab::Fp8Tensor::s,
    attnlab::Fp8Tensor::o};
const char* fp8_tensor_name(attnlab::Fp8Tensor tensor);  // "q", ..., "s (P)", "o"

struct Fp8Shape {
  std::int64_t B, T, N, H;
  bool causal;
};

// One recipe step as it ran.
struct Fp8Step {
  int step = 0;                         // 1-based
  std::array<float, 5> scale_used{};    // per kForwardTensors: the scale its quantization used in this step
  double max_abs = 0, mean_abs = 0;     // |O_bf16 − O_fp8| over every element (NaN when any side is NaN)
  // The FP8 call alone: |O_fp8 − bf16 attention on the FP8 call's own inputs (e4m3 Q, K, V decoded)|.
  double call_max_abs = 0, call_mean_abs = 0;
  std::int64_t quantize_mismatches = 0; // Q, K, V codes that differ from the lab's e4m3(x · scale)
  double dequant_max_rel = 0;           // attnlab::dequantize vs the lab's decoding of the e4m3 O, relative
  bool dequant_agrees = false;          // within bf16 rounding (2^-8) everywhere
};

class Fp8Cell {
 public:
  // Allocates the tensors on GPU 0 and the recipe (TransformerEngine's defaults: DelayedScalingRecipe{}), draws
  // Q, K, V from `seed` (streams 0, 1, 2, as the other experiments) and uploads them as bf16.
  Fp8Cell(const Fp8Shape& shape, std::uint64_t seed);
  ~Fp8Cell();  // lets the device finish what still uses the recipe's state before it is freed
  Fp8Cell(const Fp8Cell&) = delete;
  Fp8Cell& operator=(const Fp8Cell&) = delete;

  // The library's reason `path` cannot run the FP8 call (e4m3 Q, K, V and O, the recipe's scales), or nullopt.
  // Asked with the context, so cuDNN builds the graph the call will use (attnlab::why_not).
  std::optional<std::string> why_not_fp8(const std::string& path);
  // bf16 attention on `path`: the reference the FP8 output is compared with. Throws when the path fails.
  void run_bf16(const std::string& path);
  // One recipe step on `path`: quantize Q, K, V; the FP8 call; dequantize O; update. Needs run_bf16 first.
  Fp8Step step(const std::string& path);
  // The same step's library calls only (no poisoning, no reads), for timing; without `dequantize` it is what a
  // real loop enqueues (the e4m3 O feeds the next FP8 operation as it is).
  void enqueue_step(const std::string& path, bool dequantize = true);

  // A host copy of one tensor's recipe state (synchronizes the context's stream).
  attnlab::Fp8TensorState state(attnlab::Fp8Tensor tensor);
  const attnlab::DelayedScalingRecipe& recipe() const { return recipe_.recipe(); }
  attnlab::DType format(attnlab::Fp8Tensor tensor) const { return recipe_.dtype(tensor); }
  double max_abs_reference() const { return ref_max_abs_; }
  double mean_abs_reference() const { return ref_mean_abs_; }

 private:
  attnlab::TensorView view(const gpu::DeviceBuffer& buffer, attnlab::DType dtype) const;
  attnlab::ForwardArgs fp8_args(const std::string& path) const;
  std::vector<float> bf16_attention(const gpu::DeviceBuffer& q, const gpu::DeviceBuffer& k,
                                    const gpu::DeviceBuffer& v, gpu::DeviceBuffer& o);

  Fp8Shape shape_;
  std::int64_t count_;
  attnlab::Context ctx_;
  gpu::DeviceBuffer q_, k_, v_;        // bf16, as drawn
  gpu::DeviceBuffer q8_, k8_, v8_, o8_;  // e4m3
  gpu::DeviceBuffer o_ref_, o_deq_;    // bf16: the bf16 path's O, and the FP8 O dequantized
  gpu::DeviceBuffer qd_, kd_, vd_, od_;  // bf16: the FP8 call's inputs decoded, and bf16 attention on them
  attnlab::DelayedScaling recipe_;
  std::array<std::vector<float>, 3> inputs_;  // Q, K, V as drawn (bf16 values), for the quantize check
  std::string ref_path_;               // the bf16 path of run_bf16
  std::vector<float> ref_;             // O of the bf16 path, as f32
  double ref_max_abs_ = 0, ref_mean_abs_ = 0;
};

// fp8_max / amax / 2^margin, amax over the history ("max") or its newest entry ("most_recent"): the scale
// docs/design.md §7 says the recipe holds after a step (while fewer steps than the history's length have run);
// `previous` where that amax is 0 or not finite. P's (Fp8Tensor::s) is capped at fp8_max / 2^margin (fp8.h).
double expected_scale(attnlab::Fp8Tensor tensor, const attnlab::Fp8TensorState& state, attnlab::DType format,
                      int margin, double previous, attnlab::AmaxAlgorithm algorithm);

}  // namespace lab
