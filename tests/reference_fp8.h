// A brute-force reference of FP8 attention's forward (docs/design.md §7), the thing GPU FP8 paths are compared
// against. Its point is the quantization points, each one where §7 puts it; everything between them is fp64:
//
//   s_ij  = (Σ_h q̂_ih · k̂_jh) · d_q · d_k · scale        q̂, k̂, v̂: the decoded e4m3 codes, summed in double
//   p_ij  = float(softmax_j(s_ij))                        computed in double, held in f32 as a device holds it
//   amax_s = max |p| over every visible (i, j)            before quantization
//   p̂_ij = e4m3(p_ij · scale_s)                          the product in f32, then saturating RNE (core/fp8.h)
//   o_ih  = float((Σ_j p̂_ij · v̂_jh) · (1 / scale_s) · d_v)
//   amax_o = max |o|;  O in e4m3 (when scale_o is given) = e4m3(o · scale_o), the product in f32
//   lse_i = float(log Σ_j exp(s_ij)), natural log of the unquantized scores
//
// A query row that sees no key: o = 0, lse = −inf, and it adds nothing to amax_s or amax_o. Masks follow §2 (the
// causal diagonals of reference.h; its ref::visible decides).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "reference.h"

namespace attnlab_test::fp8ref {

// Deliberately wrong variants, so that the tests can show they would catch a quantization point out of place.
// Every real use keeps `none`.
enum class Mutation : std::uint8_t {
  none,
  skip_p_quantization,  // P·V on the f32 p (the result is then close to fp64: the tests' non-vacuity must see it)
  scale_s_twice,        // p quantized as e4m3(p · scale_s²), descaled once
  skip_descale_s,       // o not multiplied by 1 / scale_s
};

struct Problem {
  std::int64_t B = 1, T = 1, S = 1, N = 1, K = 1, Hqk = 1, Hv = 1;
  std::vector<std::uint8_t> q, k, v;  // e4m3 codes, dense (B,T,N,Hqk), (B,S,K,Hqk), (B,S,K,Hv)
  float d_q = 1, d_k = 1, d_v = 1;    // per-tensor descales: real value = decoded code · descale
  std::optional<double> scale;        // empty = 1 / sqrt(Hqk)
  bool causal = false;
  bool bottom_right = false;          // diagonal j = i + S − T instead of j = i
  float scale_s = 1;                  // P's quantization scale
  std::optional<float> scale_o;       // when given, O is also returned as e4m3 codes of o · scale_o
  Mutation mutation = Mutation::none;

  double softmax_scale() const;
};

struct Forward {
  std::vector<float> o;             // dense (B, T, N, Hv): what a bf16/f16 output would be rounded from
  std::vector<std::uint8_t> o_fp8;  // dense (B, T, N, Hv) e4m3 codes; empty without scale_o
  std::vector<float> lse;           // dense (B, N, T), natural log
  float amax_s = 0, amax_o = 0;
};

Forward forward(const Problem& p);

// The same problem with q, k, v decoded and descaled to doubles (q̂ · d_q, …) and the same scale and masks: the
// input of the fp64 reference ref::forward, for comparisons on identical real-valued inputs.
ref::Problem decoded(const Problem& p);

}  // namespace attnlab_test::fp8ref
