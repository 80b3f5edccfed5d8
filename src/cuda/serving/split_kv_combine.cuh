// The combine of split-KV (flash-decoding): each split left a row's O normalized over its own keys and its LSE
// (log2 units); the row's O is their sum weighted by 2^(lse_s − M) over the total weight, the attention sink
// joining the total as a split of weight 2^sink and no values. One block per (query row, head): warp w takes the
// splits w, w + 4, … of each group of 32, reads their LSEs (every lane the same, broadcast) and its columns of
// their partial rows, all of a group's reads issued before the first is used, and keeps its own running maximum
// and sum; the four warps' sums meet in shared memory, rescaled to the largest maximum. Decode combines few rows
// of many splits, so what costs is the latency of each read, not their bytes: no value read decides where another
// read goes or whether it is made, so that the first group costs one round trip to L2 (docs/perf-notes-serving.md,
// split-KV v3, v7, v11). Rows past cu_seqlens_q[B] belong to no sequence and are not written.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/flash/ptx.cuh"
#include "cuda/serving/split_kv_epilogue.cuh"
#include "cuda/serving/split_kv_load.cuh"
#include "cuda/serving/split_kv_params.h"
#include "cuda/serving/split_kv_phase_stamps.cuh"

namespace attnlab::cuda::serving {

constexpr int kCombineThreads = 128;
// Splits a combine takes: split_kv.cpp caps its plans at this (the loop below has no limit of its own).
constexpr int kMaxCombineSplits = 128;

// Reads the compiler issues where they stand: plain loads were sunk below the row check into the branch that uses
// them, and from there scheduled after the LSEs' reduction, a second round trip.
__device__ __forceinline__ float load_issued_here(const float* address) {
  float v;
  asm volatile("ld.global.f32 %0, [%1];\n" : "=f"(v) : "l"(address));
  return v;
}
__device__ __forceinline__ float4 load_issued_here(const float4* address) {
  float4 v;
  asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(address));
  return v;
}

// Stamps: as the split kernel's (split_kv_phase_stamps.cuh). At least 4 blocks per SM: without a minimum, ptxas
// fitted the kernel in 32 registers (full occupancy) by issuing the partial reads three at a time; with it, all of
// a warp's reads go out before the first is used (78–108 registers at head dims 64–256).
template <class Element, int kHeadDim, class Stamps = NoPhaseStamps>
__global__ void __launch_bounds__(kCombineThreads, 4) split_kv_combine_kernel(const __grid_constant__ SplitKvParams p) {
  const Stamps stamps(p, p.combine_stamps_offset);
  stamps.mark(Phase::entry);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched ahead of the split kernel's end (split_kv_launch.cuh): wait until its writes are visible. The kernel
  // after it may be launched now (the next decode step's split kernel waits on the device in turn).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  stamps.mark(Phase::waited);
  constexpr int kWarps = kCombineThreads / 32;
  constexpr int kChunks = (kHeadDim / 4 + 31) / 32;  // float4 columns per lane: lane + 32·k (none past the row)
  constexpr int kSplitsPerWarp = 32 / kWarps;         // of each group of 32 splits
  __shared__ float4 sums[kWarps - 1][kHeadDim / 4];
  __shared__ float maxima[kWarps], totals[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::int64_t q_row = blockIdx.x;
  const int head = blockIdx.y;

  // The first group's reads, with the batch's row count and the sink, before any value is used. Every address is
  // clamped instead of tested, so that the reads form one run the compiler keeps together (behind branches it had
  // issued them two at a time, and sunk them below the row check): a split past p.splits reads the last split's
  // row again and gets weight 0 (its LSE taken as −∞), which adds exactly 0 to a finite sum; a lane past the row
  // (head dim 64) reads a column of it and never stores; a row past cu_q[B] reads inside the workspace (the grid
  // has total_q rows) and stores nothing.
  const int rows_end = load_kept_in_l2(p.cu_q + p.B * p.cu_q_stride);
  const float sink = sink_of(p, head);
  const std::int64_t split_stride = std::int64_t(p.total_q) * p.N;
  const float* lse = p.part_lse + q_row * p.N + head;
  const float* part = p.part_o + (q_row * p.N + head) * kHeadDim;
  const std::int64_t part_split = split_stride * kHeadDim;  // floats from one split's row to the next's
  float group_lse[kSplitsPerWarp];
  float4 x[kSplitsPerWarp][kChunks];
  auto load_group = [&](int c) {
#pragma unroll
    for (int t = 0; t < kSplitsPerWarp; ++t) {
      const int split = min(c * 32 + warp + kWarps * t, p.splits - 1);
      group_lse[t] = load_issued_here(lse + split * split_stride);
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int col = (4 * (lane + 32 * k)) % kHeadDim;
        x[t][k] = load_issued_here(reinterpret_cast<const float4*>(part + split * part_split + col));
      }
    }
  };
  load_group(0);

  // This warp's running maximum m and sum l of 2^(lse − m) over its splits so far, acc the same sum of O's rows.
  // The sink starts warp 0's: a split of LSE `sink` whose values are 0.
  const float sink2 = warp == 0 ? sink * kLog2e : -INFINITY;
  float m = sink2, l = sink2 == -INFINITY ? 0.0f : 1.0f;
  float4 acc[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int c = 0; c * 32 < p.splits; ++c) {  // uniform over the block
    if (c > 0) load_group(c);
    float group_max = m;
#pragma unroll
    for (int t = 0; t < kSplitsPerWarp; ++t) {
      if (c * 32 + warp + kWarps * t >= p.splits) group_lse[t] = -INFINITY;
      group_max = fmaxf(group_max, group_lse[t]);
    }
    const float shift = group_max == -INFINITY ? 0.0f : group_max;
    const float rescale = flash::ptx::exp2_fast(m - shift);  // 0 while m is −∞
    l *= rescale;
#pragma unroll
    for (int k = 0; k < kChunks; ++k)
      acc[k].x *= rescale, acc[k].y *= rescale, acc[k].z *= rescale, acc[k].w *= rescale;
#pragma unroll
    for (int t = 0; t < kSplitsPerWarp; ++t) {
      const float weight = flash::ptx::exp2_fast(group_lse[t] - shift);  // 0 for a split past p.splits
      l += weight;
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        acc[k].x += weight * x[t][k].x, acc[k].y += weight * x[t][k].y;
        acc[k].z += weight * x[t][k].z, acc[k].w += weight * x[t][k].w;
      }
    }
    m = group_max;
  }
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    if (warp > 0 && 4 * (lane + 32 * k) < kHeadDim) sums[warp - 1][lane + 32 * k] = acc[k];
  if (lane == 0) maxima[warp] = m, totals[warp] = l;
  __syncthreads();
  if (warp > 0) return;  // thread 0, which stamps, is in warp 0
  if (q_row >= clamp_to(rows_end, 0, p.total_q)) {
    stamps.finish(-1);
    return;
  }

  // The warps' sums rescaled to the largest maximum: Σ 2^(lse_s − top) · O_s is the row's O times the total.
  float top = maxima[0];
#pragma unroll
  for (int other = 1; other < kWarps; ++other) top = fmaxf(top, maxima[other]);
  const float shift = top == -INFINITY ? 0.0f : top;
  float factor[kWarps], total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    factor[w] = flash::ptx::exp2_fast(maxima[w] - shift);  // 0 for a warp that saw nothing
    total += totals[w] * factor[w];
  }
  const FinishedRow f = FinishedRow::of(shift, total, -INFINITY);  // the sink is in the total already
  auto* o = static_cast<Element*>(p.o) + q_row * p.o_row + head * p.o_head;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int col = 4 * (lane + 32 * k);
    if (col >= kHeadDim) continue;
    float4 x = acc[k];
    x.x *= factor[0], x.y *= factor[0], x.z *= factor[0], x.w *= factor[0];
#pragma unroll
    for (int other = 1; other < kWarps; ++other) {
      const float4 y = sums[other - 1][lane + 32 * k];
      x.x += y.x * factor[other], x.y += y.y * factor[other];
      x.z += y.z * factor[other], x.w += y.w * factor[other];
    }
    *reinterpret_cast<uint2*>(o + col) = make_uint2(flash::ptx::pack2<Element>(x.x * f.o_factor, x.y * f.o_factor),
                                                    flash::ptx::pack2<Element>(x.z * f.o_factor, x.w * f.o_factor));
  }
  if (lane == 0 && p.lse != nullptr) p.lse[head * p.lse_head + q_row * p.lse_row] = f.lse;
  stamps.mark(Phase::stored);
  stamps.finish(p.splits);
}

}  // namespace attnlab::cuda::serving
