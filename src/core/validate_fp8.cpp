// FP8 preconditions. A scale is one f32 in device memory, written by earlier work on the call's stream (a recipe's
// update), so nothing here can read it: only its presence and alignment are checked, before any launch.
#include "core/validate_fp8.h"

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "core/error.h"

namespace attnlab::core {
namespace {

using Named = std::pair<const char*, const void*>;

void require(const char* call, std::initializer_list<Named> scales, const char* why) {
  for (auto [name, ptr] : scales) {
    if (ptr == nullptr) invalid("{}: fp8.{} is required ({})", call, name, why);
  }
}

void check_alignment(std::initializer_list<Named> scales) {
  for (auto [name, ptr] : scales)
    if (reinterpret_cast<std::uintptr_t>(ptr) % alignof(float) != 0)
      invalid("fp8.{} must point to a 4-byte aligned f32, got {}", name, ptr);
}

// The amaxes a call writes must be distinct floats, none of them a scale it reads: cuDNN writes them concurrently
// with reading the scales.
void check_distinct_outputs(std::initializer_list<Named> outputs, std::initializer_list<Named> inputs) {
  for (auto a = outputs.begin(); a != outputs.end(); ++a) {
    if (a->second == nullptr) continue;
    for (auto b = a + 1; b != outputs.end(); ++b)
      if (a->second == b->second) invalid("fp8.{} and fp8.{} point to the same float", a->first, b->first);
    for (auto [name, ptr] : inputs)
      if (a->second == ptr) invalid("fp8.{} points to fp8.{}, which the call reads", a->first, name);
  }
}

bool is_half(DType d) { return d == DType::f16 || d == DType::bf16; }

}  // namespace

void check_fp8_forward(const ForwardArgs& a, Problem& p) {
  if (!is_fp8_dtype(p.dtype))
    invalid("fp8 scales were given but q, k, v are {}: FP8 calls take e4m3 or e5m2 inputs (quantize them with "
            "attnlab::quantize)",
            to_string(p.dtype));
  if (!a.fp8)
    invalid("{} inputs need their scales: set ForwardArgs::fp8 (descale_q, descale_k, descale_v, scale_s, "
            "descale_s; scale_o for an FP8 O), e.g. from DelayedScaling::forward_scales()",
            to_string(p.dtype));
  const Fp8ForwardScales& s = *a.fp8;
  const DType o = a.o.dtype;
  if (!is_fp8_dtype(o) && !is_half(o))
    invalid("o of an FP8 call must be e4m3, e5m2, bf16 or f16, got {}", to_string(o));
  require("forward", {{"descale_q", s.descale_q}, {"descale_k", s.descale_k}, {"descale_v", s.descale_v}},
          "the inputs' descales");
  require("forward", {{"scale_s", s.scale_s}, {"descale_s", s.descale_s}}, "P is quantized before P·V");
  if (is_fp8_dtype(o)) require("forward", {{"scale_o", s.scale_o}}, "o is FP8");
  check_alignment({{"descale_q", s.descale_q}, {"descale_k", s.descale_k}, {"descale_v", s.descale_v},
                   {"scale_s", s.scale_s}, {"descale_s", s.descale_s}, {"amax_s", s.amax_s},
                   {"scale_o", s.scale_o}, {"amax_o", s.amax_o}});
  check_distinct_outputs({{"amax_s", s.amax_s}, {"amax_o", s.amax_o}},
                         {{"descale_q", s.descale_q}, {"descale_k", s.descale_k}, {"descale_v", s.descale_v},
                          {"scale_s", s.scale_s}, {"descale_s", s.descale_s}, {"scale_o", s.scale_o}});
  p.fp8_forward = s;
}

void check_fp8_backward(const BackwardArgs& a, Problem& p) {
  if (!is_fp8_dtype(p.dtype))
    invalid("fp8 scales were given but q, k, v are {}: FP8 backward calls take e4m3 or e5m2 inputs",
            to_string(p.dtype));
  if (!a.fp8)
    invalid("{} inputs need their scales: set BackwardArgs::fp8, e.g. from DelayedScaling::backward_scales()",
            to_string(p.dtype));
  if (!is_fp8_dtype(a.o.dtype))
    invalid("o of an FP8 backward call must be the forward call's FP8 output (e4m3 or e5m2), got {}",
            to_string(a.o.dtype));
  if (!is_fp8_dtype(a.d_o.dtype))
    invalid("d_o of an FP8 backward call must be e5m2 or e4m3 (quantize it with attnlab::quantize), got {}",
            to_string(a.d_o.dtype));
  const DType g = a.dq.dtype;
  if (a.dk.dtype != g || a.dv.dtype != g)
    invalid("dq, dk and dv must share one dtype, got {}, {}, {}", to_string(g), to_string(a.dk.dtype),
            to_string(a.dv.dtype));
  if (!is_fp8_dtype(g) && !is_half(g))
    invalid("the gradients of an FP8 call must be e4m3, e5m2, bf16 or f16, got {}", to_string(g));
  const Fp8BackwardScales& s = *a.fp8;
  require("backward", {{"descale_q", s.descale_q}, {"descale_k", s.descale_k}, {"descale_v", s.descale_v},
                       {"descale_o", s.descale_o}, {"descale_do", s.descale_do}},
          "the inputs' descales");
  require("backward", {{"scale_s", s.scale_s}, {"descale_s", s.descale_s}}, "P is recomputed and quantized");
  require("backward", {{"scale_dp", s.scale_dp}, {"descale_dp", s.descale_dp}}, "dS is quantized");
  if (is_fp8_dtype(g))
    require("backward", {{"scale_dq", s.scale_dq}, {"scale_dk", s.scale_dk}, {"scale_dv", s.scale_dv}},
            "the gradients are FP8");
  check_alignment({{"descale_q", s.descale_q}, {"descale_k", s.descale_k}, {"descale_v", s.descale_v},
                   {"descale_o", s.descale_o}, {"descale_do", s.descale_do}, {"scale_s", s.scale_s},
                   {"descale_s", s.descale_s}, {"scale_dp", s.scale_dp}, {"descale_dp", s.descale_dp},
                   {"scale_dq", s.scale_dq}, {"scale_dk", s.scale_dk}, {"scale_dv", s.scale_dv},
                   {"amax_dp", s.amax_dp}, {"amax_dq", s.amax_dq}, {"amax_dk", s.amax_dk}, {"amax_dv", s.amax_dv}});
  check_distinct_outputs({{"amax_dp", s.amax_dp}, {"amax_dq", s.amax_dq}, {"amax_dk", s.amax_dk},
                          {"amax_dv", s.amax_dv}},
                         {{"descale_q", s.descale_q}, {"descale_k", s.descale_k}, {"descale_v", s.descale_v},
                          {"descale_o", s.descale_o}, {"descale_do", s.descale_do}, {"scale_s", s.scale_s},
                          {"descale_s", s.descale_s}, {"scale_dp", s.scale_dp}, {"descale_dp", s.descale_dp},
                          {"scale_dq", s.scale_dq}, {"scale_dk", s.scale_dk}, {"scale_dv", s.scale_dv}});
  p.fp8_backward = s;
}

}  // namespace attnlab::core
