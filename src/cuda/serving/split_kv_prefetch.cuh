// What a split-KV block will read first, asked of L2 while the block waits for the kernel before it
// (griddepcontrol.wait; sm_90, split_kv_kernel.cuh). A decode step's blocks become resident as the previous step's
// split blocks end, and wait through their last blocks, the hand-over and the combine — about 3 µs at B = 1 with
// 32k keys, while DRAM idles (docs/perf-notes-serving.md, split-KV v7's stamps). Asking for the first key tiles
// then moves the start of the stream into that window.
//
// Before the wait nothing the previous kernel may write can be read: not the offsets, the lengths or a block
// table, nor K and V (append_kv may be writing them). A prefetch reads no value, and L2 is where every write
// lands, so a prefetched line still takes a later write; the block may therefore ask for lines, but must guess
// where its keys are without reading the offsets. It guesses from the host's bounds: sequence b's keys start at
// packed row b · ⌊total_k / B⌋ and number max_k — exact for one sequence and for a batch of equal lengths (a
// decode batch over a contiguous cache), elsewhere a cost of bandwidth for lines nobody reads. Every guessed row is
// inside k and v, so no prefetch leaves the tensors. Paged caches are not prefetched (a key's page is in the
// block table); the plan asks for the prefetch only where a call's blocks all fit on the GPU at once
// (split_kv_splits.h, split_kv_prefetch_tiles).
#pragma once

#include <cstdint>

#include "cuda/flash/mask.cuh"
#include "cuda/serving/split_kv_load.cuh"
#include "cuda/serving/split_kv_params.h"

namespace attnlab::cuda::serving {

template <class Traits>
struct SplitKvPrefetch {
  using Element = typename Traits::Element;
  static constexpr int kBlockN = Traits::kBlockN;
  // One key's row under one head, K or V: a multiple of 16 bytes, 16-byte aligned (split_kv.cpp, row_refusal).
  static constexpr int kRowBytes = Traits::kHeadDim * int(sizeof(Element));
  static_assert(kRowBytes % 16 == 0, "bulk prefetches move multiples of 16 bytes");

  // The 128-byte line holding `address` into L2.
  __device__ __forceinline__ static void line(const void* address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(address));
#endif
  }
  // `bytes` from a 16-byte aligned `address` into L2 (the bulk copy engine, one instruction per row).
  __device__ __forceinline__ static void row(const void* address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(address), "n"(kRowBytes) : "memory");
#endif
  }

  // Block (q_tile_index, split, kv_head, b) of the grid: its sequence's offsets or lengths, then the first
  // p.prefetch_tiles tiles of its run of keys as the guess above places them.
  __device__ __forceinline__ static void before_wait(const SplitKvParams& p, int q_tile_index, int split,
                                                     int kv_head, int b, int thread) {
    if (thread == 0) {
      line(p.cu_q + b * p.cu_q_stride);
      line(p.cu_q + (b + 1) * p.cu_q_stride);
      if (p.cu_k != nullptr) {
        line(p.cu_k + b * p.cu_k_stride);
        line(p.cu_k + (b + 1) * p.cu_k_stride);
      } else {
        line(p.seqlens_k + b * p.seqlens_stride);
      }
    }
    if (p.block_table != nullptr || p.cu_k == nullptr || p.B <= 0) return;
    const std::int64_t k_begin = std::int64_t(b) * (p.total_k / p.B);
    const std::int64_t room = std::int64_t(p.total_k) - k_begin;  // rows from k_begin to the end of k and v
    const int kv_len = int(room < p.max_k ? room : p.max_k);
    const int rows = p.max_q * p.group;
    const int row0 = q_tile_index * Traits::kRows;
    if (kv_len <= 0 || row0 >= rows) return;
    const int last_row = min(row0 + Traits::kRows, rows) - 1;
    const flash::BlockKeys keys = flash::block_keys(p.mask, row0 / p.group, last_row / p.group, p.max_q, kv_len);
    const KeyRun run = KeyRun::of(keys, kBlockN, p.splits, split);
    const int key_end = min(keys.end, (run.begin + min(run.tiles, p.prefetch_tiles)) * kBlockN);
    const auto* k = static_cast<const Element*>(p.k) + k_begin * p.k_row + std::int64_t(kv_head) * p.k_head;
    const auto* v = static_cast<const Element*>(p.v) + k_begin * p.v_row + std::int64_t(kv_head) * p.v_head;
    for (int key = run.begin * kBlockN + thread; key < key_end; key += Traits::kThreads) {
      row(k + std::int64_t(key) * p.k_row);
      row(v + std::int64_t(key) * p.v_row);
    }
  }
};

}  // namespace attnlab::cuda::serving
