// The combine of split-KV (flash-decoding): each split left a row's O normalized over its own keys and its LSE
// (log2 units); the row's O is their sum weighted by 2^(lse_s − M) over the total weight, the attention sink
// joining the total. One block per (query row, head): every warp derives the weights (the splits' LSEs, four per
// lane), warp w sums the splits w, w + 4, …, all its reads of a group of 32 splits issued before the first is
// used (the first group's beside the LSEs'), and the four sums meet in shared memory. Decode combines few rows of
// many splits, so what costs is the latency of each read, not their bytes (docs/perf-notes-serving.md, split-KV v3, v7).
// Rows past cu_seqlens_q[B] belong to no sequence and are not written.
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
// Splits a combine takes: split_kv.cpp caps its plans at this (four per lane).
constexpr int kMaxCombineSplits = 128;

// Stamps: as the split kernel's (split_kv_phase_stamps.cuh). At least 4 blocks per SM: without a minimum, ptxas
// fitted the kernel in 32 registers (full occupancy) by issuing the partial reads three at a time; with it, all of
// a warp's reads go out before the first is used (68–112 registers at head dims 64–256).
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
  constexpr int kPerLane = kMaxCombineSplits / 32;
  constexpr int kChunks = (kHeadDim / 4 + 31) / 32;  // float4 columns per lane: lane + 32·k (none past the row)
  constexpr int kSplitsPerWarp = 32 / kWarps;         // of each group of 32 splits
  __shared__ float4 sums[kWarps - 1][kHeadDim / 4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::int64_t q_row = blockIdx.x;
  const int head = blockIdx.y;
  if (q_row >= clamp_to(p.cu_q[p.B * p.cu_q_stride], 0, p.total_q)) {
    stamps.finish(-1);
    return;
  }

  const std::int64_t split_stride = std::int64_t(p.total_q) * p.N;
  const float* lse = p.part_lse + q_row * p.N + head;
  float w[kPerLane];  // lane j: splits j, j + 32, j + 64, j + 96
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int split = c * 32 + lane;
    w[c] = split < p.splits ? lse[split * split_stride] : -INFINITY;
  }
  // This warp's splits of group c (c·32 + warp + 4·t), every read issued before any is used: eight (sixteen at
  // head dim 256) in flight per lane, so that decode's usual ≤ 32 splits cost two round trips to L2 (the LSEs,
  // then these: ptxas issues them once the LSEs are in) instead of one per split. The reads are unconditional, so
  // that they form one run the compiler keeps together (behind branches it issued them two at a time): a split
  // past p.splits reads the last split's row again and gets weight 0 below, which adds exactly 0 to a finite sum;
  // a lane past the row (head dim 64) reads a column of it and never stores.
  const float* part = p.part_o + (q_row * p.N + head) * kHeadDim;
  const std::int64_t part_split = split_stride * kHeadDim;  // floats from one split's row to the next's
  float4 x[kSplitsPerWarp][kChunks];
  auto load_group = [&](int c) {
#pragma unroll
    for (int t = 0; t < kSplitsPerWarp; ++t) {
      const int split = min(c * 32 + warp + kWarps * t, p.splits - 1);
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int col = (4 * (lane + 32 * k)) % kHeadDim;
        x[t][k] = *reinterpret_cast<const float4*>(part + split * part_split + col);
      }
    }
  };
  load_group(0);

  float m = fmaxf(fmaxf(w[0], w[1]), fmaxf(w[2], w[3]));
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  const float shift = m == -INFINITY ? 0.0f : m;
  float l = 0.0f;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    w[c] = flash::ptx::exp2_fast(w[c] - shift);  // 0 for a split past p.splits (its LSE −∞)
    l += w[c];
  }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) l += __shfl_xor_sync(0xffffffffu, l, d);

  float4 acc[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    if (c > 0) {
      if (c * 32 >= p.splits) break;  // uniform over the block
      load_group(c);
    }
#pragma unroll
    for (int t = 0; t < kSplitsPerWarp; ++t) {
      // Every lane takes part in the shuffle; a split past p.splits has weight 0.
      const float weight = __shfl_sync(0xffffffffu, w[c], warp + kWarps * t);
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        acc[k].x += weight * x[t][k].x, acc[k].y += weight * x[t][k].y;
        acc[k].z += weight * x[t][k].z, acc[k].w += weight * x[t][k].w;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    if (warp > 0 && 4 * (lane + 32 * k) < kHeadDim) sums[warp - 1][lane + 32 * k] = acc[k];
  __syncthreads();
  if (warp > 0) return;  // thread 0, which stamps, is in warp 0

  // Σ_s 2^(lse_s − shift) · O_s is the row's O times l; the sink then joins l.
  const FinishedRow f = FinishedRow::of(shift, l, sink_of(p, head));
  auto* o = static_cast<Element*>(p.o) + q_row * p.o_row + head * p.o_head;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int col = 4 * (lane + 32 * k);
    if (col >= kHeadDim) continue;
    float4 x = acc[k];
#pragma unroll
    for (int other = 0; other < kWarps - 1; ++other) {
      const float4 y = sums[other][lane + 32 * k];
      x.x += y.x, x.y += y.y, x.z += y.z, x.w += y.w;
    }
    *reinterpret_cast<uint2*>(o + col) = make_uint2(flash::ptx::pack2<Element>(x.x * f.o_factor, x.y * f.o_factor),
                                                    flash::ptx::pack2<Element>(x.z * f.o_factor, x.w * f.o_factor));
  }
  if (lane == 0 && p.lse != nullptr) p.lse[head * p.lse_head + q_row * p.lse_row] = f.lse;
  stamps.mark(Phase::stored);
  stamps.finish(p.splits);
}

}  // namespace attnlab::cuda::serving
