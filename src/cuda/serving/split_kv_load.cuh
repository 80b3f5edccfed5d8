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

// Sequence b of the batch as the kernel sees it.
struct Sequence {
  int q_begin = 0, q_len = 0;  // its rows of the packed queries
  int k_begin = 0, kv_len = 0;  // its keys: packed rows k_begin …, or the first kv_len keys of its pages

  __device__ __forceinline__ static Sequence read(const SplitKvParams& p, int b) {
    Sequence s;
    s.q_begin = clamp_to(p.cu_q[b * p.cu_q_stride], 0, p.total_q);
    s.q_len = clamp_to(p.cu_q[(b + 1) * p.cu_q_stride], s.q_begin, p.total_q) - s.q_begin;
    if (p.cu_k != nullptr) {
      s.k_begin = clamp_to(p.cu_k[b * p.cu_k_stride], 0, p.total_k);
      s.kv_len = clamp_to(p.cu_k[(b + 1) * p.cu_k_stride], s.k_begin, p.total_k) - s.k_begin;
    } else {
      s.kv_len = clamp_to(p.seqlens_k[b * p.seqlens_stride], 0, p.pages_per_sequence * p.page_size);
    }
    return s;
  }
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

  // The page holding key `key` of sequence b, or −1 for a key at or past key_end or a page the cache lacks.
  __device__ __forceinline__ static int page_of(const SplitKvParams& p, int b, int key, int key_end) {
    if (key >= key_end) return -1;
    const int slot = p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;
    const int page = p.block_table[b * p.table_b + slot * p.table_p];
    return page >= 0 && page < p.pages ? page : -1;
  }

  // Keys [key0, key0 + 64) of sequence b into k_tile and v_tile; keys at or past key_end read as zeros. Paged:
  // `pages` holds the tile's pages (looked up ahead by the kernel), or is null and each row looks its page up.
  __device__ __forceinline__ static void key_tile(const SplitKvParams& p, std::uint32_t k_tile, std::uint32_t v_tile,
                                                  const Sequence& s, int b, int kv_head, int key0, int key_end,
                                                  const int* pages, int thread) {
    const auto* k = static_cast<const Element*>(p.k);
    const auto* v = static_cast<const Element*>(p.v);
    const int row0 = thread / kChunks, chunk = thread % kChunks;
    const std::int64_t k_base = std::int64_t(kv_head) * p.k_head + chunk * kChunkElements;
    const std::int64_t v_base = std::int64_t(kv_head) * p.v_head + chunk * kChunkElements;
#pragma unroll
    for (int i = 0; i < Traits::kBlockN / kRowStep; ++i) {
      const int row = row0 + i * kRowStep;
      const int key = key0 + row;
      bool valid;
      std::int64_t k_at, v_at;
      if (p.block_table != nullptr) {
        const int page = pages != nullptr ? pages[row] : page_of(p, b, key, key_end);
        valid = page >= 0;
        const int in_page = p.page_shift >= 0 ? key & (p.page_size - 1) : key % p.page_size;
        k_at = std::int64_t(page) * p.k_page + std::int64_t(in_page) * p.k_row;
        v_at = std::int64_t(page) * p.v_page + std::int64_t(in_page) * p.v_row;
      } else {
        valid = key < key_end;
        k_at = std::int64_t(s.k_begin + key) * p.k_row;
        v_at = std::int64_t(s.k_begin + key) * p.v_row;
      }
      const std::uint32_t at = KVTile::offset(row, chunk);
      flash::ptx::cp_async_16(k_tile + at, valid ? k + k_base + k_at : k, valid);
      flash::ptx::cp_async_16(v_tile + at, valid ? v + v_base + v_at : v, valid);
    }
  }
};

}  // namespace attnlab::cuda::serving
