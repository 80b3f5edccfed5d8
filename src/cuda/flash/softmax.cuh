// The online softmax, in registers. Each thread holds, for each of its 2·kMFrags query rows, the running maximum m
// (log2 units) and its part of the running sum l; the four threads of a quad share a row, so row maxima are
// combined with two shuffles per step while the sums stay per thread until the end (one reduction per row).
//
// Per key tile:  m' = max(m, max_j s_j);  p_j = exp2(s_j − m');  l' = l·exp2(m − m') + Σ p_j;  O' = O·exp2(m − m')
// A row that has seen no key yet keeps m = −inf; it uses 0 as its shift so that exp2(−inf − 0) = 0, never NaN.
#pragma once

#include <cmath>

#include "cuda/flash/ptx.cuh"

namespace attnlab::cuda::flash {

// kSkipUnmovedRescale: O's rescale behind a warp-uniform branch (step), for kernels short of registers.
template <int kMFrags, int kNFrags, int kOFrags, bool kSkipUnmovedRescale = false>
struct OnlineSoftmax {
  float row_max[kMFrags][2];
  float row_sum[kMFrags][2];  // this thread's columns only; reduced across the quad in finish()

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[mf][h] = -INFINITY;
        row_sum[mf][h] = 0.0f;
      }
  }

  // Scores s become probabilities p in place; O is rescaled. s · to_log2 is the score in log2 units: a tile the
  // mask rule already converted passes 1, an untouched tile of raw q·k passes scale · log2 e, so the conversion
  // rides in the exponent's FFMA.
  __device__ __forceinline__ void step(float (&s)[kMFrags][kNFrags][4], float (&o)[kMFrags][kOFrags][4],
                                       float to_log2) {
    float rescale[kMFrags][2];
    bool moved = false;  // some row of this thread has a new maximum
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // h = 0: row g (c0, c1); h = 1: row g + 8 (c2, c3)
        float tile_max = -INFINITY;
#pragma unroll
        for (int nf = 0; nf < kNFrags; ++nf) tile_max = fmaxf(tile_max, fmaxf(s[mf][nf][2 * h], s[mf][nf][2 * h + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float new_max = fmaxf(row_max[mf][h], tile_max * to_log2);
        const float shift = new_max == -INFINITY ? 0.0f : new_max;
        rescale[mf][h] = ptx::exp2_fast(row_max[mf][h] - shift);
        moved |= new_max != row_max[mf][h];
        row_max[mf][h] = new_max;
        float sum = 0.0f;
#pragma unroll
        for (int nf = 0; nf < kNFrags; ++nf)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[mf][nf][2 * h + e];
            x = ptx::exp2_fast(fmaf(x, to_log2, -shift));
            sum += x;
          }
        row_sum[mf][h] = row_sum[mf][h] * rescale[mf][h] + sum;
        if constexpr (!kSkipUnmovedRescale) rescale_o(o, mf, h, rescale[mf][h]);
      }
    // With kSkipUnmovedRescale, O's rescale (kOFrags · 4 multiplies per row pair) is skipped when no row of the
    // warp has a new maximum: the factor is then exactly 1, or 0 for a row still at −inf whose O is still 0 (a
    // warp-uniform branch, so the result is bit-identical).
    // Measured (docs/perf-notes-flash-sm80.md, v6b, v7): no faster in the mbarrier kernels, 1–4 % slower at Hqk 64. It is
    // there for registers: with the rescale behind the branch, ptxas fits FA2's 4-warp shape at Hqk 128 in 255
    // registers without spills (v6e).
    if constexpr (kSkipUnmovedRescale) {
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
          for (int h = 0; h < 2; ++h) rescale_o(o, mf, h, rescale[mf][h]);
      }
    }
  }

  // O's columns of row half h (0: c0, c1; 1: c2, c3) of fragment row mf, times the rescale factor.
  __device__ __forceinline__ static void rescale_o(float (&o)[kMFrags][kOFrags][4], int mf, int h, float factor) {
#pragma unroll
    for (int of = 0; of < kOFrags; ++of) {
      o[mf][of][2 * h] *= factor;
      o[mf][of][2 * h + 1] *= factor;
    }
  }

  // The whole row's sum (every thread of the quad gets it).
  __device__ __forceinline__ float total(int mf, int h) const {
    float l = row_sum[mf][h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    return l;
  }
};

}  // namespace attnlab::cuda::flash
