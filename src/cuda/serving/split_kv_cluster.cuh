// The end of a split-KV block whose call merges its splits inside a thread-block cluster instead of the combine
// kernel (sm_90; the rule is split_kv_splits.h's split_kv_cluster_merge). The `splits` blocks of one query tile
// form one cluster: the grid's x index is q_tile · splits + split and the cluster's x extent is `splits`.
//
// Each block leaves its split's result — O normalized over the split's keys and the LSE in log2 units, what it
// would write to the workspace for the combine kernel — in its own shared memory, after the merge buffer. After a
// cluster barrier every block takes a share of the tile's (row, 4-column) items and merges each from all the
// cluster's blocks through distributed shared memory, as the combine kernel does from the workspace
// (split_kv_combine.cuh), and writes the finished O and LSE. A second barrier keeps
// each block's shared memory alive until the others have read it. No workspace, no second kernel and no hand-over
// between kernels: where each split is a single key tile those are most of a decode call's time
// (docs/perf-notes-serving.md, split-KV v8).
//
// Raw PTX for the cluster (its rank, the barrier, the peers' shared memory), as flash/ptx.cuh does for the rest.
// Both barriers release (a GPU-scope memory barrier, MEMBAR.ALL.GPU in the SASS): the first publishes this block's
// result to the cluster; the second orders this block's reads of its peers before any peer may leave — a relaxed
// arrival would rely on every read's value having been consumed, which the compiler decides. At the second the
// memory barrier waits for the block's stores of O, which the grid's end waits for in any case.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/flash/ptx.cuh"
#include "cuda/serving/split_kv_epilogue.cuh"
#include "cuda/serving/split_kv_load.cuh"
#include "cuda/serving/split_kv_params.h"
#include "cuda/serving/split_kv_splits.h"

namespace attnlab::cuda::serving {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
namespace cluster {

__device__ __forceinline__ unsigned rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned blocks() {
  unsigned n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
  return n;
}
// Every thread of the cluster's blocks; this block's memory accesses before it are ordered before the other
// blocks' accesses after it.
__device__ __forceinline__ void sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// The address of this block's shared-memory byte `address` in block `peer`'s shared memory.
__device__ __forceinline__ std::uint32_t map(std::uint32_t address, unsigned peer) {
  std::uint32_t mapped;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(mapped) : "r"(address), "r"(peer));
  return mapped;
}
// Loads from a peer's shared memory.
__device__ __forceinline__ float load(std::uint32_t address) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(address) : "memory");
  return v;
}
__device__ __forceinline__ float4 load4(std::uint32_t address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(address)
               : "memory");
  return v;
}

}  // namespace cluster
#endif

template <class Traits>
struct SplitKvClusterMerge {
  using Epilogue = SplitKvEpilogue<Traits>;
  static constexpr int kHeadDim = Traits::kHeadDim, kColChunks = kHeadDim / 4;
  static constexpr int kMaxSplits = kSplitKvMaxClusterSplits;
  // The split's result: O (kRows × kHeadDim f32), then its LSE (kRows f32), after the merge buffer in the stages'
  // memory. It fits at head dims 64 and 128 for every row count; the plan merges in clusters only up to 128
  // (split_kv.cpp), so no cluster kernel is built at 256 (where 64 rows would not fit).
  static constexpr int kResultBytes = Traits::kRows * (kHeadDim + 1) * 4;
  static constexpr bool kFits = kHeadDim <= 128 && Traits::kMergeBytes + kResultBytes <= Traits::kStagesBytes;

  // After the barrier behind Epilogue::stage(); every thread of every block of the cluster calls it.
  __device__ __forceinline__ static void run(const SplitKvParams& p, float* merge, const Sequence& s, int kv_head,
                                             int row0, int thread) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    static_assert(kFits, "the split's result must fit beside the merge buffer");
    const int rank = int(cluster::rank()), blocks = int(cluster::blocks());
    float* result_o = merge + Traits::kMergeBytes / 4;
    float* result_lse = result_o + Traits::kRows * kHeadDim;
    const int valid_rows = min(Traits::kRows, s.q_len * p.group - row0);
    Epilogue::merged_chunks(merge, valid_rows, thread, [&](int r, int col, float m, float l, const float4& acc) {
      *reinterpret_cast<float4*>(result_o + r * kHeadDim + col) = Epilogue::split_o(l, acc);
      if (col == 0) result_lse[r] = Epilogue::split_lse(m, l);
    });
    cluster::sync();  // every block's result written, and visible to the cluster

    // Item id = thread · blocks + rank: the items spread over the blocks, so that no SM reads the cluster alone.
    // The reads are unconditional (a rank past the cluster's blocks reads the last one's result again and gets
    // weight 0), so that they go out together: in the SASS (sm_90a) the 16 LSE reads, then, once the weights are
    // known, the 16 reads of O — two round trips to the peers' shared memory, each a fraction of one to L2.
    const std::uint32_t own_o = flash::ptx::smem_address(result_o), own_lse = flash::ptx::smem_address(result_lse);
    for (int id = thread * blocks + rank; id < valid_rows * kColChunks; id += Traits::kThreads * blocks) {
      const int r = id / kColChunks, col = (id % kColChunks) * 4;
      float lse[kMaxSplits];
      float4 x[kMaxSplits];
#pragma unroll
      for (int t = 0; t < kMaxSplits; ++t)
        lse[t] = cluster::load(cluster::map(own_lse + 4 * r, unsigned(min(t, blocks - 1))));
#pragma unroll
      for (int t = 0; t < kMaxSplits; ++t)
        x[t] = cluster::load4(cluster::map(own_o + 4 * (r * kHeadDim + col), unsigned(min(t, blocks - 1))));
      float m = -INFINITY;
#pragma unroll
      for (int t = 0; t < kMaxSplits; ++t)
        if (t < blocks) m = fmaxf(m, lse[t]);
      const float shift = m == -INFINITY ? 0.0f : m;
      float l = 0.0f;
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int t = 0; t < kMaxSplits; ++t) {
        const float w = t < blocks ? flash::ptx::exp2_fast(lse[t] - shift) : 0.0f;  // 0 for a split without keys
        l += w;
        acc.x += w * x[t].x, acc.y += w * x[t].y, acc.z += w * x[t].z, acc.w += w * x[t].w;
      }
      // Σ_s 2^(lse_s − shift) · O_s is the row's O times l, as in the combine; the sink then joins l.
      const int pair = row0 + r;
      const FinishedRow f = FinishedRow::of(shift, l, sink_of(p, kv_head * p.group + pair % p.group));
      Epilogue::write_finished(p, s, kv_head, pair, col, f, acc);
    }
    cluster::sync();  // no block leaves while another may still read its shared memory
#else
    __trap();  // the host launches clusters only where the kernel has sm_90 code (split_kv_launch.cuh)
#endif
  }
};

}  // namespace attnlab::cuda::serving
