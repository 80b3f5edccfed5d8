// What a split-KV block will read first, asked of L2 while the block waits for the kernel before it
// (griddepcontrol.wait; sm_90, split_kv_kernel.cuh). A decode step's blocks become resident as the previous step's
// split blocks end, and wait through their last blocks, the hand-over and the combine — about 3 µs at B = 1 with
// 32k keys, while DRAM idles (docs/perf-notes-serving.md, split-KV v7's stamps). Asking for the first key tiles
// then moves the start of the stream into that window.
//
// Before the wait nothing the previous kernel may write can be read for use: not the offsets, the lengths or a
// block table, nor K and V (append_kv may be writing them). A prefetch reads no value, and L2 is where every write
// lands, so a prefetched line still takes a later write; the block may therefore ask for lines, as long as only
// the lines' addresses, never the results, depend on what it guessed:
//   - packed keys: sequence b's keys are guessed to start at packed row b · ⌊total_k / B⌋ and to number
//     max_seqlen_k — exact for one sequence and for a batch of equal lengths (a decode batch over a contiguous
//     cache), elsewhere a cost of bandwidth for lines nobody reads; no read at all;
//   - paged keys: the block's run (from max_seqlen_k keys) is looked up in the block table with relaxed loads
//     (ld.relaxed.gpu: a value that may be stale, never a torn or undefined one), each page clamped to the cache.
//     The kernel reads the table again after the wait for its copies; a stale entry only sends a prefetch to
//     another page of the cache.
// Every prefetched row is inside k and v. The plan asks for the prefetch only where a call's blocks all fit on the
// GPU at once (split_kv_splits.h, split_kv_prefetch_tiles).
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
  // A key's row of one head (kRowBytes from a 16-byte aligned `address`) into L2: one bulk prefetch.
  __device__ __forceinline__ static void row(const void* address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(address), "n"(kRowBytes) : "memory");
#endif
  }
  // A block-table entry as it is now: a relaxed load, which another grid's stores may race with (it then returns
  // the old or the new value).
  __device__ __forceinline__ static int relaxed(const std::int32_t* address) {
    int value = -1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
#endif
    return value;
  }

  // Block (q_tile_index, split, kv_head, b) of the grid: its sequence's offsets or lengths, then the first
  // p.prefetch_tiles tiles of its run of keys where the guess above places them.
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
    if (p.B <= 0) return;
    const bool paged = p.block_table != nullptr;
    // Where sequence b's keys start (packed rows) and how many there may be, as guessed above.
    const std::int64_t k_begin = paged ? 0 : std::int64_t(b) * (p.total_k / p.B);
    const std::int64_t room = paged ? std::int64_t(p.pages_per_sequence) * p.page_size : p.total_k - k_begin;
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
      std::int64_t k_at = std::int64_t(key) * p.k_row, v_at = std::int64_t(key) * p.v_row;
      if (paged) {
        const int slot = p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;
        const int page = relaxed(p.block_table + b * p.table_b + slot * p.table_p);
        if (page < 0 || page >= p.pages) continue;
        const int in_page = key - slot * p.page_size;
        k_at = std::int64_t(page) * p.k_page + std::int64_t(in_page) * p.k_row;
        v_at = std::int64_t(page) * p.v_page + std::int64_t(in_page) * p.v_row;
      }
      row(k + k_at);
      row(v + v_at);
    }
  }
};

}  // namespace attnlab::cuda::serving
