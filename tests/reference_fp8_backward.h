// A brute-force reference of FP8 attention's backward (docs/design.md §7, format HYBRID), as cuDNN's FP8 SDPA
// backward defines it with per-tensor scales (cudnn-frontend's SDPAFP8BackwardNode, the non-MX branch). It takes
// what the forward left behind (the e4m3 O codes and the LSE) and the e5m2 (or e4m3) dO codes; everything between
// the quantization points is fp64, and each quantization point is where the frontend's graph puts it:
//
//   s_ij  = (((Σ_h q̂_ih · k̂_jh) · scale) · d_q) · d_k      bmm_Q_K, then attn_scale, descale_q, descale_k
//   p_ij  = float(exp(s_ij − lse_i))                       sub Stats, exp: P from the forward's LSE, held in f32
//   p̂_ij = e4m3(p_ij · scale_s)                           scale_S, cast to Q's type: the product in f32, then
//                                                          saturating RNE (core/fp8.h)
//   dV_jh = float(((Σ_i p̂_ij · dÔ_ih) · descale_s) · descale_do)       matmul_fp8(Pᵀ, dO): the GEMM, the sum
//                                                          over a KV head's query heads (GQA), descale A, descale B
//   D_i   = ((Σ_h dÔ_ih · Ô_ih) · descale_do) · descale_o  mul_dO_O, reduce, descale_dO, descale_O
//   dP_ij = ((Σ_h dÔ_ih · v̂_jh) · descale_do) · d_v        bmm_dO_V_T, descale_dO, descale_V
//   dS_ij = float(((dP_ij − D_i) · p_ij) · scale)          sub softmax_sum, mul exp_S, mul attn_scale
//   amax_dp = max |dS| over every visible (i, j)           before dS is scaled
//   dŜ_ij = fp8(dS_ij · scale_dp) in dO's format           scale_dP, cast to dO's type (e5m2 under HYBRID)
//   dQ_ih = float(((Σ_j dŜ_ij · k̂_jh) · descale_dp) · d_k)             matmul_fp8(dS, K)
//   dK_jh = float(((Σ_i dŜ_ij · q̂_ih) · descale_dp) · d_q)             matmul_fp8(dSᵀ, Q), GQA-summed like dV
//   amax_dq/dk/dv = max |dQ| / |dK| / |dV|                 matmul_fp8 takes the amax before scale_c
//   dQ, dK, dV in FP8 (when their scale is given) = fp8(g · scale_g), the product in f32
//
// q̂, k̂, v̂, Ô, dÔ are the decoded codes (Ô and dÔ without their descales: the frontend applies descales to the
// reduced or accumulated values, never to the operands). Products of FP8 values are exact in double, and the sums
// here are short enough to be nearly so. s, D and dP stay in double; p and dS are rounded to f32 because a device
// holds them in f32 registers where they are quantized, and amax_dp is taken on that f32 dS.
//
// Masks follow §2 (the causal diagonals of reference.h; its ref::visible decides): a hidden key has p = 0 and
// dS = 0. A query row that sees no key contributes nothing (its LSE is −inf, and exp(−inf − (−inf)) would be NaN):
// its dQ row is 0 and it adds nothing to dK, dV or any amax.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/fp8.h"
#include "reference.h"
#include "reference_fp8.h"

namespace attnlab_test::fp8ref {

using attnlab::core::Fp8Format;

// Deliberately wrong variants, so that the tests can show they would catch a quantization point out of place.
// Every real use keeps `none`.
enum class BackwardMutation : std::uint8_t {
  none,
  skip_p_quantization,  // Pᵀ·dO on the f32 p (dV then close to fp64: the tests' non-vacuity must see it)
  ds_in_e4m3,           // dS quantized in e4m3 whatever dO's format (with an e5m2 scale_dp: saturation)
  skip_descale_dp,      // dQ and dK not multiplied by descale_dp
  skip_descale_o,       // D = (Σ dÔ · Ô) · descale_do, without descale_o
};

// How one gradient leaves the computation: as f32 always (what a bf16/f16 output would be rounded from), and as
// FP8 codes of g · scale when a scale is given.
struct GradOutput {
  std::optional<float> scale;
  Fp8Format format = Fp8Format::e4m3;
};

// What a backward call receives besides the forward's own problem (q, k, v codes, their descales, the softmax
// scale, the masks and scale_s, all taken from the Problem; its scale_o and mutation are not used here).
struct BackwardInputs {
  std::vector<std::uint8_t> o;            // the forward's e4m3 output codes, dense (B, T, N, Hv)
  float descale_o = 1;
  std::vector<std::uint8_t> d_o;          // dO codes in do_format, dense (B, T, N, Hv)
  Fp8Format do_format = Fp8Format::e5m2;  // e5m2 under HYBRID; e4m3 allowed. dS is quantized in this format too
  float descale_do = 1;
  std::vector<float> lse;                 // the forward's Stats, dense (B, N, T), natural log
  std::optional<float> descale_s;         // P's descale; empty = 1 / Problem::scale_s in f32
  float scale_dp = 1;                     // dS's quantization scale
  std::optional<float> descale_dp;        // empty = 1 / scale_dp in f32
  GradOutput dq, dk, dv;
  BackwardMutation mutation = BackwardMutation::none;

  float descale_s_or(float scale_s) const { return descale_s ? *descale_s : 1.0f / scale_s; }
  float descale_dp_or_default() const { return descale_dp ? *descale_dp : 1.0f / scale_dp; }
};

struct Backward {
  std::vector<float> dq, dk, dv;                     // dense, shapes of q, k, v; before any output scale
  std::vector<std::uint8_t> dq_fp8, dk_fp8, dv_fp8;  // codes of g · scale in the output's format; empty without
  float amax_dp = 0, amax_dq = 0, amax_dk = 0, amax_dv = 0;
};

Backward backward(const Problem& p, const BackwardInputs& in);

// The backward's inputs decoded and descaled to doubles, for the fp64 reference on identical real-valued inputs:
//   ref::backward(d.problem, d.d_o, &d.o, &d.lse)
// takes D from this O and P from this LSE, as the FP8 backward does.
struct DecodedBackward {
  ref::Problem problem;               // fp8ref::decoded(p)
  std::vector<double> o, d_o, lse;    // Ô · descale_o, dÔ · descale_do, the f32 LSE as doubles
};

DecodedBackward decoded(const Problem& p, const BackwardInputs& in);

}  // namespace attnlab_test::fp8ref
