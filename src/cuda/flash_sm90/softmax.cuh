// Online softmax on one consumer warpgroup's score tile (64 rows × kBlockN keys, f32, wgmma's accumulator layout),
// and the conversion of the probabilities into the register operand of P·V.
//
// Accumulator layout of a 64 × N wgmma tile, N / 2 registers per thread: warp w of the warpgroup holds rows
// 16w … 16w + 15; within a warp, for each 8-column block j, register 4j + e holds row lane / 4 (+ 8 for e ≥ 2)
// and column 8j + 2·(lane % 4) + (e & 1) (mma.sync's m16n8 layout, repeated along N). Each thread therefore owns
// two rows (h = 0, 1) and N / 4 of their columns; a row's four owners are lanes 4r … 4r + 3, reduced with two
// shuffles. Every function below takes its tile as an array of those kRegs = N / 2 registers.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/flash_sm90/ptx.cuh"

namespace attnlab::cuda::sm90 {

// The keys one owned row sees: [begin, end) (core/mask.h's visible_keys, narrowed to 32 bits: T, S < 2^30).
struct KeySpan {
  int begin = 0, end = 0;
};

struct OnlineSoftmax {
  float row_max[2];  // running max of scale · log2(e) · s, per owned row
  float row_sum[2];  // this thread's share of Σ exp2(s − max) (the quad's sum is taken at the end)

  __device__ void init() {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.0f;
  }

  // Scores in log2 units: s · scale · log2(e), or −inf where the row does not see the key (`visible` ranges per
  // owned row, key0 the tile's first key). kMask is false for tiles every row sees whole.
  template <bool kMask, int kRegs>
  __device__ static void scale_and_mask(float (&s)[kRegs], float scale_log2, const KeySpan (&visible)[2],
                                        int key0, int lane) {
#pragma unroll
    for (int j = 0; j < kRegs / 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float& x = s[4 * j + e];
        if constexpr (kMask) {
          const int col = key0 + 8 * j + 2 * (lane & 3) + (e & 1);
          const KeySpan& r = visible[e >> 1];
          x = (col >= r.begin && col < r.end) ? x * scale_log2 : -INFINITY;
        } else {
          x *= scale_log2;
        }
      }
  }

  // Softcapped scores in log2 units (version s1 with softcap c): c · log2(e) · tanh(s · scale / c), or −inf where
  // the row does not see the key. Every element takes the mask test; the tanh is two MUFU (ptx.cuh, tanh_fast).
  template <int kRegs>
  __device__ static void cap_and_mask(float (&s)[kRegs], float scale_over_cap, float cap_log2,
                                      const KeySpan (&visible)[2], int key0, int lane) {
#pragma unroll
    for (int j = 0; j < kRegs / 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float& x = s[4 * j + e];
        const int col = key0 + 8 * j + 2 * (lane & 3) + (e & 1);
        const KeySpan& r = visible[e >> 1];
        x = (col >= r.begin && col < r.end) ? cap_log2 * ptx::tanh_fast(x * scale_over_cap) : -INFINITY;
      }
  }

  // Version s2's masking: raw scores stay raw (the scale rides in fold_raw's FFMA); keys a row does not see become
  // −inf. Only for tiles not inside every row's range.
  template <int kRegs>
  __device__ static void mask_raw(float (&s)[kRegs], const KeySpan (&visible)[2], int key0, int lane) {
#pragma unroll
    for (int j = 0; j < kRegs / 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = key0 + 8 * j + 2 * (lane & 3) + (e & 1);
        const KeySpan& r = visible[e >> 1];
        if (col < r.begin || col >= r.end) s[4 * j + e] = -INFINITY;
      }
  }

  // Reductions over a row's kRegs / 2 owned scores in kChains independent chains, combined at the end (s27: 4; 1
  // is one chain through every score, s2 … s26's order).
  template <int kChains>
  __device__ static float combine_max(float (&part)[kChains]) {
#pragma unroll
    for (int w = kChains / 2; w > 0; w /= 2)
#pragma unroll
      for (int c = 0; c < w; ++c) part[c] = fmaxf(part[c], part[c + w]);
    return part[0];
  }
  template <int kChains>
  __device__ static float combine_sum(float (&part)[kChains]) {
#pragma unroll
    for (int w = kChains / 2; w > 0; w /= 2)
#pragma unroll
      for (int c = 0; c < w; ++c) part[c] += part[c + w];
    return part[0];
  }

  // A row's probabilities in place, exp2(s · scale_log2 − base) for owned row h, and their sum over the thread's
  // scores in kChains chains: one FFMA and one MUFU.EX2 each (fold_raw, fold_raw_lazy).
  template <int kChains, int kRegs>
  __device__ static float exponentiate_row(float (&s)[kRegs], float scale_log2, float base, int h) {
    float sums[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) sums[c] = 0.0f;
#pragma unroll
    for (int j = 0; j < kRegs / 4; ++j) {
      const float p0 = ptx::exp2_ftz(fmaf(s[4 * j + 2 * h], scale_log2, -base));
      const float p1 = ptx::exp2_ftz(fmaf(s[4 * j + 2 * h + 1], scale_log2, -base));
      s[4 * j + 2 * h] = p0, s[4 * j + 2 * h + 1] = p1;
      sums[j % kChains] += p0 + p1;
    }
    return combine_sum(sums);
  }

  // fold() on raw scores (version s2): the row maximum is taken over raw q·k and scaled once per row, each
  // probability is one FFMA and one MUFU.EX2. Needs scale_log2 > 0, where max(s · c) = c · max(s) (the path runs
  // s1 for other scales). row_max stays in log2 units, as the epilogue's LSE expects.
  template <int kChains = 1, int kRegs>
  __device__ void fold_raw(float (&s)[kRegs], float scale_log2, float (&correction)[2]) {
    static_assert(kChains >= 1 && (kChains & (kChains - 1)) == 0 && kRegs / 4 % kChains == 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float part[kChains];
#pragma unroll
      for (int c = 0; c < kChains; ++c) part[c] = -INFINITY;
#pragma unroll
      for (int j = 0; j < kRegs / 4; ++j)
        part[j % kChains] = fmaxf(part[j % kChains], fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      float mx = combine_max(part);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float new_max = fmaxf(row_max[h], mx * scale_log2);  // −inf · c = −inf for c > 0
      const float base = new_max == -INFINITY ? 0.0f : new_max;
      correction[h] = ptx::exp2_ftz(row_max[h] - base);
      row_max[h] = new_max;
      row_sum[h] = row_sum[h] * correction[h] + exponentiate_row<kChains>(s, scale_log2, base, h);
    }
  }

  // s26's fold: probabilities against the row maxima as they stand (no maximum taken, O not rescaled), their sums
  // added. Returns whether each of this thread's probabilities is at most 2^8 (its share of a row sums to at most
  // 2^8; false for NaN too); the caller computes the tile again where one is not (mainloop.cuh). Needs finite
  // row maxima. A maximum that lags its row's true one by up to 8 in log2 units changes no result: O, the sum and
  // the LSE are all taken against the same reference, and probabilities up to 2^8 keep a 16-bit P's relative
  // precision (FlashAttention-4 lets its reference lag by the same 2^8, deciding per tile from the tile's maxima).
  template <int kChains = 1, int kRegs>
  __device__ bool fold_raw_lazy(float (&s)[kRegs], float scale_log2) {
    bool bounded = true;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sum = exponentiate_row<kChains>(s, scale_log2, row_max[h], h);
      bounded = bounded && sum <= 256.0f;
      row_sum[h] += sum;
    }
    return bounded;
  }

  // Folds a scaled, masked tile into the running max and sum and turns it into probabilities in place; returns
  // per owned row the factor exp2(old max − new max) by which the output accumulator must be rescaled.
  template <int kRegs>
  __device__ void fold(float (&s)[kRegs], float (&correction)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[h];
#pragma unroll
      for (int j = 0; j < kRegs / 4; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // A row that has seen no key yet keeps max −inf; exp2(−inf − 0) = 0 keeps its probabilities at 0.
      const float base = mx == -INFINITY ? 0.0f : mx;
      correction[h] = exp2f(row_max[h] - base);
      row_max[h] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kRegs / 4; ++j) {
        const float p0 = exp2f(s[4 * j + 2 * h] - base), p1 = exp2f(s[4 * j + 2 * h + 1] - base);
        s[4 * j + 2 * h] = p0, s[4 * j + 2 * h + 1] = p1;
        sum += p0 + p1;
      }
      row_sum[h] = row_sum[h] * correction[h] + sum;
    }
  }

  // The output accumulator (same layout, Hv columns) times each owned row's correction.
  template <int kRegs>
  __device__ static void rescale(float (&o)[kRegs], const float (&correction)[2]) {
#pragma unroll
    for (int j = 0; j < kRegs / 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[4 * j + e] *= correction[e >> 1];
  }

  // fold() and rescale() together, for a loop whose P·V of the previous tile has completed.
  template <int kSRegs, int kORegs>
  __device__ void update(float (&s)[kSRegs], float (&o)[kORegs]) {
    float correction[2];
    fold(s, correction);
    rescale(o, correction);
  }

  // The quad's total of each owned row (all four lanes get it).
  __device__ float total(int h) const {
    float l = row_sum[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    return l;
  }
};

// P as wgmma's register A operand: for key step k (16 keys), register 4k + i holds two 16-bit probabilities, in the
// order (row r, keys 2q, 2q+1), (row r + 8, same keys), (row r, keys 8 + 2q, …), (row r + 8, …). These are exactly
// the accumulator's registers 8k … 8k + 7 taken in pairs, so the conversion moves nothing between threads.
template <class Element, int kRegs>
__device__ __forceinline__ void probabilities_to_operand(const float (&p)[kRegs], std::uint32_t (&a)[kRegs / 2]) {
#pragma unroll
  for (int i = 0; i < kRegs / 2; ++i) a[i] = ptx::pack2<Element>(p[2 * i], p[2 * i + 1]);
}

}  // namespace attnlab::cuda::sm90
