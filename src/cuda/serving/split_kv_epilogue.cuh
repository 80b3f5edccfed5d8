// The end of a split-KV block. Each warp leaves its rows' softmax state (m in log2 units, l, unnormalized O) in
// shared memory; the block then merges the key groups of every row (the warps that took different keys of the
// same rows) and writes either the finished row — O = acc / l rounded to the output dtype and LSE, with the
// row's attention sink joining the denominator — or, when the keys were split across blocks, the split's
// normalized O and LSE (log2 units) for the combine kernel (split_kv_combine.cuh).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/flash/ptx.cuh"
#include "cuda/serving/split_kv_load.cuh"
#include "cuda/serving/split_kv_params.h"

namespace attnlab::cuda::serving {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A row's finished softmax, given its merged state (m, l, and O's accumulator scaled to m) and its sink logit
// (natural units; −inf when there is none): the factor O's accumulator takes, and the LSE.
struct FinishedRow {
  float o_factor;  // 0 for a row that saw no key and has no sink
  float lse;       // natural log; −inf for such a row

  __device__ __forceinline__ static FinishedRow of(float m, float l, float sink) {
    const float sink2 = sink * kLog2e;
    const float top = fmaxf(m, sink2);
    const float shift = top == -INFINITY ? 0.0f : top;
    const float scaled = flash::ptx::exp2_fast(m - shift);
    const float total = l * scaled + flash::ptx::exp2_fast(sink2 - shift);
    if (!(total > 0.0f)) return {0.0f, -INFINITY};
    return {scaled / total, (shift + __log2f(total)) * kLn2};
  }
};

__device__ __forceinline__ float sink_of(const SplitKvParams& p, int head) {
  return p.sinks != nullptr ? p.sinks[head * p.sinks_stride] : -INFINITY;
}

template <class Traits>
struct SplitKvEpilogue {
  using Element = typename Traits::Element;
  static constexpr int kStride = Traits::kMergeStride, kHeadDim = Traits::kHeadDim;

  // This warp's 16 rows: O's fragments and the per-row m and l (whole-row sums: every thread of a quad has them).
  template <class OutFrags>
  __device__ __forceinline__ static void stage(float* merge, const OutFrags& o, const float (&m)[2],
                                               const float (&l)[2], int warp, int lane) {
    float* rows = merge + warp * 16 * kStride;
    float* ml = merge + Traits::kWarps * 16 * kStride + warp * 32;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = g + 8 * h;
#pragma unroll
      for (int of = 0; of < Traits::kOFrags; ++of)
        *reinterpret_cast<float2*>(rows + r * kStride + of * 8 + 2 * t) = make_float2(o[0][of][2 * h], o[0][of][2 * h + 1]);
      if (t == 0) {
        ml[2 * r] = m[h];
        ml[2 * r + 1] = l[h];
      }
    }
  }

  // The block's merged state of every valid row and 4-column chunk, after a barrier behind stage(): calls
  // fn(r, col, m, l, acc) for items thread, thread + kThreads, … of valid_rows · kHeadDim / 4: the row's maximum m
  // (log2 units; −inf for a row that saw no key, whose l and acc are 0), its total l and its 4 columns of O's
  // accumulator, both scaled to that maximum.
  template <class Fn>
  __device__ __forceinline__ static void merged_chunks(const float* merge, int valid_rows, int thread, Fn&& fn) {
    constexpr int kColChunks = kHeadDim / 4;
    const float* ml = merge + Traits::kWarps * 16 * kStride;
    for (int id = thread; id < valid_rows * kColChunks; id += Traits::kThreads) {
      const int r = id / kColChunks, col = (id % kColChunks) * 4;
      const int row_warp = r / 16, rr = r % 16;
      float m = -INFINITY;
#pragma unroll
      for (int kg = 0; kg < Traits::kKeyGroups; ++kg) m = fmaxf(m, ml[(row_warp + kg * Traits::kRowWarps) * 32 + 2 * rr]);
      const float shift = m == -INFINITY ? 0.0f : m;
      float l = 0.0f;
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int kg = 0; kg < Traits::kKeyGroups; ++kg) {
        const int w = row_warp + kg * Traits::kRowWarps;
        const float weight = flash::ptx::exp2_fast(ml[w * 32 + 2 * rr] - shift);
        l += weight * ml[w * 32 + 2 * rr + 1];
        const float4 x = *reinterpret_cast<const float4*>(merge + (w * 16 + rr) * kStride + col);
        acc.x += weight * x.x, acc.y += weight * x.y, acc.z += weight * x.z, acc.w += weight * x.w;
      }
      fn(r, col, m, l, acc);
    }
  }

  // A split's result as the combine reads it: O normalized over the split's own keys, and its LSE in log2 units
  // (−inf, with O = 0, for a split that saw no key of the row).
  __device__ __forceinline__ static float4 split_o(float l, const float4& acc) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    return make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
  }
  __device__ __forceinline__ static float split_lse(float m, float l) { return l > 0.0f ? m + __log2f(l) : -INFINITY; }

  // A finished row's 4 columns of O (and, from column 0, its LSE) for (token, query head) pair `pair` of sequence s.
  __device__ __forceinline__ static void write_finished(const SplitKvParams& p, const Sequence& s, int kv_head,
                                                        int pair, int col, const FinishedRow& f, const float4& acc) {
    const int head = kv_head * p.group + pair % p.group;
    const std::int64_t q_row = s.q_begin + pair / p.group;
    const uint2 packed = make_uint2(flash::ptx::pack2<Element>(acc.x * f.o_factor, acc.y * f.o_factor),
                                    flash::ptx::pack2<Element>(acc.z * f.o_factor, acc.w * f.o_factor));
    *reinterpret_cast<uint2*>(static_cast<Element*>(p.o) + q_row * p.o_row + head * p.o_head + col) = packed;
    if (col == 0 && p.lse != nullptr) p.lse[head * p.lse_head + q_row * p.lse_row] = f.lse;
  }

  // Every valid row of the block, after a barrier behind stage(): rows row0 … of sequence s under kv_head, finished
  // (one split) or as the split's partial result for the combine kernel.
  __device__ __forceinline__ static void store(const SplitKvParams& p, const float* merge, const Sequence& s,
                                               int kv_head, int row0, int split, int thread) {
    const int valid_rows = min(Traits::kRows, s.q_len * p.group - row0);
    merged_chunks(merge, valid_rows, thread, [&](int r, int col, float m, float l, const float4& acc) {
      const int pair = row0 + r;
      if (p.splits == 1) {
        const FinishedRow f = FinishedRow::of(m, l, sink_of(p, kv_head * p.group + pair % p.group));
        write_finished(p, s, kv_head, pair, col, f, acc);
      } else {
        const int head = kv_head * p.group + pair % p.group;
        const std::int64_t q_row = s.q_begin + pair / p.group;
        const std::int64_t at = (std::int64_t(split) * p.total_q + q_row) * p.N + head;
        *reinterpret_cast<float4*>(p.part_o + at * kHeadDim + col) = split_o(l, acc);
        if (col == 0) p.part_lse[at] = split_lse(m, l);
      }
    });
  }
};

}  // namespace attnlab::cuda::serving
