// The splits of a split-KV call merged by the last of their blocks to finish, instead of by the combine kernel
// (split_kv_combine.cuh): each block writes its split's partial result as for the combine, then counts itself in
// on its query tile's counter; the block that brings the count to `splits` reads every split's partial result
// and writes the rows' O and LSE, and sets the counter back to zero. One kernel per decode step instead of two:
// no hand-over between grids, no second launch (docs/perf-notes-serving.md, split-KV v10).
//
// The counters (SplitKvParams::merge_counters) belong to the context (cuda/common/zeroed_counters.h): zero when
// made, and zero again after every call, because every query tile's last block resets its own. Calls that use
// them are ordered on the context's stream like its workspace, so two calls never count on one counter at once.
//
// Memory order, as cooperative groups' grid barrier has it: every thread's partial stores, a block barrier, then
// thread 0's fence and atomic add (release); the last block's thread 0 fences after its add (acquire), a block
// barrier, and the block reads the partial results through L2 (ld.global.cg): no line of them can be in its L1.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/flash/ptx.cuh"
#include "cuda/serving/split_kv_epilogue.cuh"
#include "cuda/serving/split_kv_load.cuh"
#include "cuda/serving/split_kv_params.h"

namespace attnlab::cuda::serving {

// Splits one merge takes: as the combine kernel's (kMaxCombineSplits; the plan caps every call at it).
constexpr int kLastBlockMergeMaxSplits = 128;

template <class Traits>
struct SplitKvLastBlockMerge {
  static constexpr int kHeadDim = Traits::kHeadDim, kThreads = Traits::kThreads, kWarps = Traits::kWarps;
  static constexpr int kColChunks = kHeadDim / 4;  // float4 columns of a row
  static constexpr int kMaxSplits = kLastBlockMergeMaxSplits;
  // Partial rows read together per thread and item: two round trips to L2 for decode's usual 32 splits.
  static constexpr int kGroup = 16;
  // Shared memory the merge uses (where the stages were): each row's weights per split, then its shift and total.
  static constexpr int kSmemBytes = Traits::kRows * (kMaxSplits + 2) * 4;
  static_assert(kSmemBytes <= Traits::kStagesBytes, "the merge's weights fit where the stages were");

  // After the split's partial result is stored, by every thread of the block: whether this block is the last of
  // its query tile's splits to arrive (block-uniform). The last one leaves the counter at zero.
  __device__ __forceinline__ static bool arrive(int* counter, int splits, int thread) {
    __shared__ int last;
    __syncthreads();  // every thread's partial stores come before thread 0's release
    if (thread == 0) {
      __threadfence();
      const int before = atomicAdd(counter, 1);
      const bool is_last = before == splits - 1;
      if (is_last) {
        *reinterpret_cast<volatile int*>(counter) = 0;  // no other block of this call touches it again
        __threadfence();  // acquire: the other splits' partial results, for the whole block after the barrier
      }
      last = is_last;
    }
    __syncthreads();
    return last != 0;
  }

  // The last block: rows row0 … of sequence s under kv_head, every split's partial result (O normalized over its
  // keys, LSE in log2 units) merged as the combine kernel merges them, the sink joining, O and LSE written.
  // `smem`: kSmemBytes that no thread reads any more.
  __device__ __forceinline__ static void run(const SplitKvParams& p, float* smem, const Sequence& s, int kv_head,
                                             int row0, int thread) {
    const int valid_rows = min(Traits::kRows, s.q_len * p.group - row0);
    const int lane = thread & 31, warp = thread >> 5;
    const int items = valid_rows * kColChunks;  // (row, 4-column chunk) pairs; this thread's: thread + k·kThreads
    float* weights = smem;                            // [kRows][kMaxSplits]
    float* shift_of = smem + Traits::kRows * kMaxSplits;  // [kRows]
    float* total_of = shift_of + Traits::kRows;           // [kRows]
    auto entry = [&](int pair, int split) {  // the partial results' index of (split, pair)
      const int head = kv_head * p.group + pair % p.group;
      const std::int64_t q_row = s.q_begin + pair / p.group;
      return (std::int64_t(split) * p.total_q + q_row) * p.N + head;
    };
    // kGroup splits' 4 columns of item `item`, all reads issued before any is used; a split past p.splits rereads
    // the last one (its weight is 0).
    float4 x[kGroup];
    auto load_group = [&](int item, int group) {
      const int pair = row0 + item / kColChunks, col = 4 * (item % kColChunks);
#pragma unroll
      for (int t = 0; t < kGroup; ++t) {
        const int split = min(group * kGroup + t, p.splits - 1);
        x[t] = __ldcg(reinterpret_cast<const float4*>(p.part_o + entry(pair, split) * kHeadDim + col));
      }
    };
    // This thread's first item's first group goes out with the LSEs' reads.
    if (thread < items) load_group(thread, 0);

    // Each warp's rows: the splits' weights 2^(lse − shift) (lanes j, j + 32, …), their total, into shared memory.
    for (int r = warp; r < valid_rows; r += kWarps) {
      float w[kMaxSplits / 32];
#pragma unroll
      for (int c = 0; c < kMaxSplits / 32; ++c) {
        const int split = c * 32 + lane;
        w[c] = split < p.splits ? __ldcg(p.part_lse + entry(row0 + r, split)) : -INFINITY;
      }
      float m = -INFINITY;
#pragma unroll
      for (int c = 0; c < kMaxSplits / 32; ++c) m = fmaxf(m, w[c]);
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
      const float shift = m == -INFINITY ? 0.0f : m;
      float l = 0.0f;
#pragma unroll
      for (int c = 0; c < kMaxSplits / 32; ++c) {
        w[c] = flash::ptx::exp2_fast(w[c] - shift);  // 0 past p.splits and for a split that saw no key
        l += w[c];
        weights[r * kMaxSplits + c * 32 + lane] = w[c];
      }
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) l += __shfl_xor_sync(0xffffffffu, l, d);
      if (lane == 0) shift_of[r] = shift, total_of[r] = l;
    }
    __syncthreads();

    const int groups = (p.splits + kGroup - 1) / kGroup;
    for (int item = thread; item < items; item += kThreads) {
      const int r = item / kColChunks, col = 4 * (item % kColChunks);
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int g = 0; g < groups; ++g) {
        if (g > 0 || item != thread) load_group(item, g);
#pragma unroll
        for (int t = 0; t < kGroup; ++t) {
          const int split = g * kGroup + t;
          const float weight = split < p.splits ? weights[r * kMaxSplits + split] : 0.0f;
          acc.x += weight * x[t].x, acc.y += weight * x[t].y, acc.z += weight * x[t].z, acc.w += weight * x[t].w;
        }
      }
      // Σ_s 2^(lse_s − shift) · O_s is the row's O times its total; the sink then joins the total.
      const int pair = row0 + r;
      const FinishedRow f = FinishedRow::of(shift_of[r], total_of[r], sink_of(p, kv_head * p.group + pair % p.group));
      SplitKvEpilogue<Traits>::write_finished(p, s, kv_head, pair, col, f, acc);
    }
  }
};

}  // namespace attnlab::cuda::serving
