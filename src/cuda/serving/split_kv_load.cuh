// The load stage of the split-KV kernel: one sequence's lengths read from the device and clamped to the tensors,
// and the cp.async copies of its query rows and key/value tiles into swizzled shared tiles (flash::SmemTile).
// Keys are packed rows or pages of a cache; every address is computed per key row, so a tile may span pages of
// any size and order. A row outside the sequence, or on a page the cache does not have, reads as zeros: a zero
// key is masked anyway, and a zero value keeps a zero probability from meeting NaN.
#pragma once

#include <cstdint>

#include "cuda/flash/ptx.cuh"
#include "cuda/serving/split_kv_params.h"

namespace attnlab::cuda::serving {

__device__ __forceinline__ int clamp_to(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

// A length or offset read with L2's evict-last priority: every call reads them first, right after its wait, and a
// decode step's stream of K and V (which do not fit in L2 at long contexts) would otherwise have evicted them since
// the last call, so that the read waits on DRAM (docs/perf-notes-serving.md, split-KV v11). B + 1 values a call:
// what they keep out of L2 is nothing.
__device__ __forceinline__ int load_kept_in_l2(const std::int32_t* address) {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  int v;
  asm volatile("ld.global.L2::cache_hint.b32 %0, [%1], %2;\n" : "=r"(v) : "l"(address), "l"(policy));
  return v;
}

// Sequence b of the batch as the kernel sees it.
struct Sequence {
  int q_begin = 0, q_len = 0;  // its rows of the packed queries
  int k_begin = 0, kv_len = 0;  // its keys: packed rows k_begin …, or the first kv_len keys of its pages

  // Every read is issued before any value is used (the query offsets had been clamped before the branch to the key
  // offsets, two rounds of reads, though the second cost nothing measurable), and kept in L2 (load_kept_in_l2),
  // which is what shortened a decode step's wait for them (docs/perf-notes-serving.md, split-KV v11). Packed or
  // paged, the key lengths come through one pointer, so that their reads are not behind a branch.
  __device__ __forceinline__ static Sequence read(const SplitKvParams& p, int b) {
    const bool packed = p.cu_k != nullptr;
    const std::int32_t* keys = packed ? p.cu_k + b * p.cu_k_stride : p.seqlens_k + b * p.seqlens_stride;
    const int q0 = load_kept_in_l2(p.cu_q + b * p.cu_q_stride);
    const int q1 = load_kept_in_l2(p.cu_q + (b + 1) * p.cu_q_stride);
    const int k0 = load_kept_in_l2(keys), k1 = load_kept_in_l2(packed ? keys + p.cu_k_stride : keys);
    Sequence s;
    s.q_begin = clamp_to(q0, 0, p.total_q);
    s.q_len = clamp_to(q1, s.q_begin, p.total_q) - s.q_begin;
    if (packed) {
      s.k_begin = clamp_to(k0, 0, p.total_k);
      s.kv_len = clamp_to(k1, s.k_begin, p.total_k) - s.k_begin;
    } else {
      s.kv_len = clamp_to(k0, 0, p.pages_per_sequence * p.page_size);  // (k1 read k0 again)
    }
    return s;
  }
};

// A key's K and V rows as element offsets into k and v.
struct KeyRow {
  std::int64_t k, v;
};

template <class Traits>
struct SplitKvLoad {
  using Element = typename Traits::Element;
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  static constexpr int kChunks = KVTile::kChunks, kChunkElements = KVTile::kChunkElements;
  static_assert(Traits::kThreads % kChunks == 0, "whole rows per pass");
  static constexpr int kRowStep = Traits::kThreads / kChunks;

  // Block rows [row0, row0 + kRows) of sequence s under KV head kv_head: row r is query head
  // kv_head·group + (row0 + r) % group of token (row0 + r) / group; rows past q_len·group read as zeros.
  __device__ __forceinline__ static void query_rows(const SplitKvParams& p, std::uint32_t tile, const Sequence& s,
                                                    int kv_head, int row0, int thread) {
    const auto* q = static_cast<const Element*>(p.q);
    const int rows = s.q_len * p.group;
    for (int id = thread; id < Traits::kRows * kChunks; id += Traits::kThreads) {
      const int r = id / kChunks, chunk = id % kChunks;
      const int pair = row0 + r;
      const bool valid = pair < rows;
      const int token = pair / p.group, head = kv_head * p.group + pair % p.group;
      const Element* src = q + std::int64_t(s.q_begin + token) * p.q_row + std::int64_t(head) * p.q_head +
                           chunk * kChunkElements;
      flash::ptx::cp_async_16(tile + QTile::offset(r, chunk), valid ? src : q, valid);
    }
  }

  // Where key `key` of sequence b lives: element offsets of its K and V rows (head 0, column 0), or k = −1 for a
  // key at or past key_end or on a page the cache does not have.
  __device__ __forceinline__ static KeyRow key_row(const SplitKvParams& p, const Sequence& s, int b, int key,
                                                   int key_end) {
    if (key >= key_end) return {-1, -1};
    if (p.block_table == nullptr)
      return {std::int64_t(s.k_begin + key) * p.k_row, std::int64_t(s.k_begin + key) * p.v_row};
    const int slot = p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;
    // A plain read: a block table may be large, and keeping it in L2 measured no gain (split-KV v11).
    const int page = p.block_table[b * p.table_b + slot * p.table_p];
    if (page < 0 || page >= p.pages) return {-1, -1};
    const int in_page = key - slot * p.page_size;
    return {std::int64_t(page) * p.k_page + std::int64_t(in_page) * p.k_row,
            std::int64_t(page) * p.v_page + std::int64_t(in_page) * p.v_row};
  }

  // How key_tile finds a key's rows: from the kernel's lookup ahead (paged), or by a multiply (packed keys).
  enum class RowSource { looked_up, packed };

  // Keys [key0, key0 + 64) of sequence b into k_tile and v_tile; keys at or past key_end read as zeros. `rows`:
  // the tile's key rows for RowSource::looked_up. Thread t copies chunk t % kChunks of rows t / kChunks + i·kRowStep;
  // packed rows are one pointer stepped kRowStep rows at a time, so that a copy costs a few integer instructions
  // (the main loop is otherwise short of issue slots: docs/perf-notes-serving.md, split-KV v3).
  template <RowSource kSource>
  __device__ __forceinline__ static void key_tile(const SplitKvParams& p, std::uint32_t k_tile, std::uint32_t v_tile,
                                                  const Sequence& s, int b, int kv_head, int key0, int key_end,
                                                  const KeyRow* rows, int thread) {
    const int row0 = thread / kChunks, chunk = thread % kChunks;
    const auto* k = static_cast<const Element*>(p.k) + std::int64_t(kv_head) * p.k_head + chunk * kChunkElements;
    const auto* v = static_cast<const Element*>(p.v) + std::int64_t(kv_head) * p.v_head + chunk * kChunkElements;
    const int valid_rows = key_end - key0;  // rows ≥ this read as zeros
    const std::uint32_t k_dst = k_tile + KVTile::offset(row0, chunk), v_dst = v_tile + KVTile::offset(row0, chunk);
    // The swizzle repeats every 8 rows: with a step of 8 rows or more the destinations are one base plus constants.
    auto dst_offset = [&](int i) {
      return kRowStep % 8 == 0 ? std::uint32_t(i * kRowStep * KVTile::kRowBytes)
                               : KVTile::offset(row0 + i * kRowStep, chunk) - KVTile::offset(row0, chunk);
    };
    if constexpr (kSource == RowSource::packed) {
      const std::int64_t first = std::int64_t(s.k_begin) + key0 + row0;
      const Element* k_row = k + first * p.k_row;
      const Element* v_row = v + first * p.v_row;
      const std::int64_t k_step = kRowStep * p.k_row, v_step = kRowStep * p.v_row;
#pragma unroll
      for (int i = 0; i < Traits::kBlockN / kRowStep; ++i, k_row += k_step, v_row += v_step) {
        const bool valid = row0 + i * kRowStep < valid_rows;
        flash::ptx::cp_async_16(k_dst + dst_offset(i), valid ? k_row : k, valid);
        flash::ptx::cp_async_16(v_dst + dst_offset(i), valid ? v_row : v, valid);
      }
    } else {
#pragma unroll
      for (int i = 0; i < Traits::kBlockN / kRowStep; ++i) {
        const int row = row0 + i * kRowStep;
        const KeyRow at = rows[row];
        const bool valid = at.k >= 0;
        flash::ptx::cp_async_16(k_dst + dst_offset(i), valid ? k + at.k : k, valid);
        flash::ptx::cp_async_16(v_dst + dst_offset(i), valid ? v + at.v : v, valid);
      }
    }
  }
};

}  // namespace attnlab::cuda::serving
