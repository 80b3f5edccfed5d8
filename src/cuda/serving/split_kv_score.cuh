// The per-element part of a split-KV step: softcap on raw scores, and the mask on the tiles that need it (a warp's
// keys not inside every one of its rows' visible range, core/mask.h's rule). Kept small on purpose: decode blocks
// walk few tiles, so the kernel's code is fetched cold more than it is reused (docs/perf-notes-serving.md, split-KV v3).
#pragma once

#include <cmath>

#include "cuda/flash/ptx.cuh"

namespace attnlab::cuda::serving {

// tanh(x) = 1 − 2 / (e^(2x) + 1): one MUFU.EX2 and one MUFU.RCP instead of tanhf's polynomial (the flash-sm90
// family's choice, measured there against docs/design.md §2's criterion); large |x| saturates to ±1.
__device__ __forceinline__ float tanh_fast(float x) {
  const float e = flash::ptx::exp2_fast(x * 2.8853900817779268f);  // e^(2x): 2 · log2(e) · x
  return 1.0f - __fdividef(2.0f, e + 1.0f);
}

template <int kNFrags>
struct SplitKvScores {
  // s = softcap · tanh(scale · s / softcap).
  __device__ __forceinline__ static void softcap(float (&s)[1][kNFrags][4], float scale, float cap) {
    const float to_tanh = scale / cap;
#pragma unroll
    for (int nf = 0; nf < kNFrags; ++nf)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nf][e] = cap * tanh_fast(s[0][nf][e] * to_tanh);
  }

  // −inf where this thread's row h = e / 2 (g or g + 8) does not see the key; key0 is the warp's first key.
  __device__ __forceinline__ static void mask(float (&s)[1][kNFrags][4], int key0, const int (&begin)[2],
                                              const int (&end)[2], int lane) {
#pragma unroll
    for (int nf = 0; nf < kNFrags; ++nf)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1, key = key0 + nf * 8 + 2 * (lane & 3) + (e & 1);
        if (key < begin[h] || key >= end[h]) s[0][nf][e] = -INFINITY;
      }
  }
};

}  // namespace attnlab::cuda::serving
