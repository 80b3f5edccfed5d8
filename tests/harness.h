// One attention case end to end: random inputs in the chosen dtype and layouts, poisoned outputs, the library
// call, and every check the suite makes of a successful call (accuracy against the references, every output
// element written, padding around strided outputs untouched, inputs untouched, the path that ran).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "reference.h"
#include "test_support.h"

namespace attnlab_test {

enum class BiasKind { none, f32, same_dtype, bool_mask };

struct Case {
  std::string path = "auto";
  DType dtype = DType::f32;
  std::int64_t B = 1, T = 1, S = 1, N = 1, K = 1, Hqk = 64, Hv = 64;
  std::optional<float> scale;
  float softcap = 0.0f;
  attnlab::MaskOptions mask;
  std::vector<std::int32_t> q_lens, kv_lens;  // per batch; empty = not given
  // With lengths: the padding they mark out (query rows ≥ q_len of Q, key rows ≥ kv_len of K and V) holds NaN
  // instead of random values, so that a path which lets padding reach a result fails (docs/design.md §2).
  bool nan_padding = false;
  BiasKind bias = BiasKind::none;
  bool bias_per_batch = true;  // false: the bias / bool mask has size 1 in that dimension (broadcast)
  bool bias_per_head = true;
  bool expand_broadcast = false;  // pass a broadcast bias / mask as a full (B, N, T, S) view with stride 0 there
  int hidden_rows = 0;          // rows per (batch, head) slice where the bias is −inf / the bool mask all zero
  double neg_inf_bias = 0.0;    // fraction of other bias entries set to −inf
  double input_scale = 1.0;     // magnitude of q and k
  Layout q_layout, k_layout, v_layout, o_layout, lse_layout;
  Layout grad_layout;           // d_o, dq, dk, dv (backward)
  bool with_lse = true;
  int threads = 0;  // CPU threads of the context; 0 = its default
  // Device: with cuda every tensor is copied to the GPU for the call and back afterwards (DeviceMirror), so every
  // host-side check applies unchanged.
  Device device = Device::cpu;
  bool seqlens_on_device = true;        // cuda only: false passes host sequence lengths with device tensors
  std::string expect_path;              // non-empty: RunInfo.path must be this, or for "flash" a member
  attnlab::Context* context = nullptr;  // the context to call with; nullptr = a fresh one per case
  // cuda only: the cudaStream_t the context runs the case on (nullptr = the legacy default stream). The harness
  // waits for the uploads before the call and for this stream before copying outputs back, since a stream made
  // with cudaStreamNonBlocking does not wait for the legacy stream that DeviceMirror's copies use, nor it for it.
  void* stream = nullptr;

  std::string str() const;
};

struct Tensors {
  HostTensor q, k, v, o, lse, q_lens, kv_lens, bias, mask;
};

struct GradTensors {
  HostTensor d_o, dq, dk, dv;
};

class DeviceMirror;

// Fresh random inputs (values never zero) and poisoned (NaN) outputs.
Tensors make_inputs(const Case& c, Rng& rng);
attnlab::ForwardArgs forward_args(const Case& c, const Tensors& t);
// The reference problem reads the values back from the buffers: exactly what the library sees.
ref::Problem reference_problem(const Case& c, const Tensors& t);
double effective_scale(const Case& c);

struct ExpectedForward {
  ref::Forward f64, same;
};
ExpectedForward expected_forward(const Case& c, const Tensors& t);
// O and LSE against the criterion, no NaN anywhere (poison survives nowhere).
void check_forward_outputs(const Case& c, const Tensors& t, const ExpectedForward& expected);

// Everything for one forward case: inputs, call, accuracy, poison, padding, inputs untouched, RunInfo.path.
void check_forward(const Case& c, Rng& rng);

// Backward: runs the library's forward (same path) for O and LSE, then backward with a random d_o, and checks
// dQ/dK/dV against the fp64 reference backward by the criterion, plus poison, padding and inputs untouched.
GradTensors make_grads(const Case& c, Rng& rng);
attnlab::BackwardArgs backward_args(const Case& c, const Tensors& t, const GradTensors& g);
// The backward call of forward arguments `f` (its tensors and options) with these gradient tensors.
attnlab::BackwardArgs backward_args_from(const attnlab::ForwardArgs& f, const TensorView& d_o, const TensorView& dq,
                                         const TensorView& dk, const TensorView& dv);

// The references a backward call's gradients are judged by, from the inputs of `t`, the O and LSE in `t` (those
// the backward call receives) and g.d_o.
struct ExpectedBackward {
  ref::Backward f64, same, given;
};
ExpectedBackward expected_backward(const Case& c, const Tensors& t, const GradTensors& g);
// dQ, dK, dV against the criterion, no NaN anywhere (poison survives nowhere).
void check_backward_outputs(const Case& c, const GradTensors& g, const ExpectedBackward& expected);

// The arguments with every tensor replaced by a device copy held by `mirror` (host sequence lengths stay on the
// host when !c.seqlens_on_device). Copy outputs back with mirror.download().
attnlab::ForwardArgs device_forward_args(const Case& c, const Tensors& t, DeviceMirror& mirror);
attnlab::BackwardArgs device_backward_args(const Case& c, const Tensors& t, const GradTensors& g, DeviceMirror& mirror);
void check_backward(const Case& c, Rng& rng);

// A forward call on device copies of the case's tensors (through c.context when set) that must fail as
// `unsupported` with a message naming `fragment`, and leave O untouched.
void expect_forward_refused_on_device(const Case& c, const std::string& fragment);

// Whether a call that asked for path `asked` ran it. Path flash is a family: RunInfo names the member that ran,
// flash-sm80 or flash-sm90 (src/cuda/flash_family_path.cpp).
::testing::AssertionResult ran_as_asked(const std::string& ran, const std::string& asked);

std::vector<std::string> cpu_paths();
std::vector<DType> float_dtypes();

}  // namespace attnlab_test
