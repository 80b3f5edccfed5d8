// An independent brute-force reference for docs/design.md §2, on dense row-major host arrays of doubles.
//
//   s[i][j] = scale · <q_i, k_j>;  s = c · tanh(s / c) when softcap c > 0;  s += bias;  hidden keys → −inf
//   o_i = Σ_j softmax_j(s_i) v_j,  lse_i = log Σ_j exp(s_ij);  a row that sees no key: o_i = 0, lse_i = −inf.
//
// Two flavours:
//   * forward / backward: everything in fp64 (the "ref64" of the accuracy criterion);
//   * forward_in_dtype / backward_in_dtype: the "ref_same_dtype" of the criterion, i.e. the naive computation done
//     in the inputs' dtype the way a mixed-precision implementation does it: products accumulate in f32, the
//     softmax runs in f32, and every tensor that feeds a second matmul or leaves the computation is rounded to the
//     dtype: P before P·V (and before Pᵀ·dO), dS before dS·K and dSᵀ·Q, and the outputs O, dQ, dK, dV. D = rowsum(dO∘O)
//     uses the O the backward call is given (rounded to the dtype), as every backward does: computing it from an O of
//     its own would compare two independent roundings of O, and with few rows the larger one wins at random.
//     Scores S, dP and the LSE stay f32 (the LSE output is f32 by API).
//     Keeping S in f32 makes this stricter than FlashAttention's own test reference (which rounds S to the dtype):
//     the CPU paths compute S in f32, so they must meet the tighter bound. For f32 inputs it is the same naive
//     computation in f32. A path passes when it is at most twice as far from fp64 as this computation, + 1e-5.
#pragma once

#include <cstdint>
#include <vector>

#include "attnlab/attention.h"

namespace attnlab_test::ref {

struct Problem {
  std::int64_t B = 1, T = 1, S = 1, N = 1, K = 1, Hqk = 1, Hv = 1;
  double scale = 1.0;
  double softcap = 0.0;  // 0 = off
  bool causal = false;
  bool bottom_right = false;  // diagonal j = i + kv_len − q_len instead of j = i
  std::int64_t window_left = -1, window_right = -1;  // −1 = unbounded
  std::vector<std::int64_t> q_lens, kv_lens;  // per batch; empty = T / S
  std::vector<double> q, k, v;                // dense (B,T,N,Hqk), (B,S,K,Hqk), (B,S,K,Hv)
  std::vector<double> bias;                   // dense (bias_B, bias_N, T, S); empty = none
  std::int64_t bias_B = 1, bias_N = 1;
  std::vector<std::uint8_t> mask;             // dense (mask_B, mask_N, T, S), non-zero = visible; empty = none
  std::int64_t mask_B = 1, mask_N = 1;

  std::int64_t q_len(std::int64_t b) const { return q_lens.empty() ? T : q_lens[std::size_t(b)]; }
  std::int64_t kv_len(std::int64_t b) const { return kv_lens.empty() ? S : kv_lens[std::size_t(b)]; }
  std::int64_t kv_head(std::int64_t n) const { return n / (N / K); }
  double qv(std::int64_t b, std::int64_t i, std::int64_t n, std::int64_t h) const {
    return q[std::size_t(((b * T + i) * N + n) * Hqk + h)];
  }
  double kv(std::int64_t b, std::int64_t j, std::int64_t kh, std::int64_t h) const {
    return k[std::size_t(((b * S + j) * K + kh) * Hqk + h)];
  }
  double vv(std::int64_t b, std::int64_t j, std::int64_t kh, std::int64_t h) const {
    return v[std::size_t(((b * S + j) * K + kh) * Hv + h)];
  }
};

// Whether the masks (causal, window, sequence lengths, boolean mask) let query i of (b, n) see key j. The bias is
// not a mask here; a −inf bias hides a key through the scores.
bool visible(const Problem& p, std::int64_t b, std::int64_t n, std::int64_t i, std::int64_t j);

struct Forward {
  std::vector<double> o;    // dense (B, T, N, Hv)
  std::vector<double> lse;  // dense (B, N, T)
};

struct Backward {
  std::vector<double> dq, dk, dv;  // dense, shapes of q, k, v
};

Forward forward(const Problem& p);
Forward forward_in_dtype(const Problem& p, attnlab::DType dtype);
// Gradients of loss = Σ O ∘ d_o, d_o dense (B, T, N, Hv). With `o` and `lse` given (the forward outputs a backward
// call receives, dense (B, T, N, Hv) and (B, N, T)), D = rowsum(dO ∘ O) uses that O and P = exp(s − LSE) that LSE:
// the exact gradient computed from the call's own inputs. Its difference to the exact gradient is inherent to
// every backward that takes O and LSE (rounded to the dtype and to f32) as inputs.
Backward backward(const Problem& p, const std::vector<double>& d_o, const std::vector<double>* o = nullptr,
                  const std::vector<double>* lse = nullptr);
// `o`: the forward output given to the backward call, dense (B, T, N, Hv); nullptr = this reference's own.
Backward backward_in_dtype(const Problem& p, const std::vector<double>& d_o, attnlab::DType dtype,
                           const std::vector<double>* o = nullptr);

}  // namespace attnlab_test::ref
