// What the split-KV kernel (split_kv_kernel.cuh) and its combine (split_kv_combine.cuh) read: a packed batch of
// queries, its keys packed or paged, and the split of every block's keys. Strides are in elements; lengths come
// from the device (cu_seqlens, seqlens) and are clamped to the tensors before use, so that no value makes the
// kernels read or write outside them (docs/serving.md, "Checks").
#pragma once

#include <cstdint>

#include "attnlab/attention.h"

namespace attnlab::cuda::serving {

struct SplitKvParams {
  // Queries (total_q, N, Hqk) and outputs (total_q, N, Hv); lse (N, total_q) f32 or null.
  const void* q = nullptr;
  std::int64_t q_row = 0, q_head = 0;
  void* o = nullptr;
  std::int64_t o_row = 0, o_head = 0;
  float* lse = nullptr;
  std::int64_t lse_head = 0, lse_row = 0;
  const std::int32_t* cu_q = nullptr;  // (B + 1)
  std::int64_t cu_q_stride = 1;
  int total_q = 0;

  // Keys and values. Packed: row r of k at k + r·k_row + head·k_head, sequences by cu_k. Paged: key j of
  // sequence b is row j % page_size of page block_table[b·table_b + (j / page_size)·table_p], at
  // k + page·k_page + row·k_row + head·k_head; seqlens_k[b] keys.
  const void* k = nullptr;
  const void* v = nullptr;
  std::int64_t k_row = 0, k_head = 0, v_row = 0, v_head = 0;
  std::int64_t k_page = 0, v_page = 0;
  const std::int32_t* cu_k = nullptr;  // packed keys: (B + 1); null when paged
  std::int64_t cu_k_stride = 1;
  int total_k = 0;                     // packed: rows of k and v
  const std::int32_t* block_table = nullptr;
  std::int64_t table_b = 0, table_p = 0;
  int page_size = 0, pages = 0, pages_per_sequence = 0;
  int page_shift = -1;  // log2(page_size) when it is a power of two, else −1
  const std::int32_t* seqlens_k = nullptr;
  std::int64_t seqlens_stride = 0;

  int B = 0, N = 0, K = 0, group = 0;  // group = N / K query heads per KV head
  int max_q = 0;                       // ≥ every q_len: the grid's query tiles
  float scale = 1.0f;                  // s = scale · q·k
  float softcap = 0.0f;                // 0 = none, else s = softcap · tanh(s / softcap)
  MaskOptions mask;
  const float* sinks = nullptr;        // (N) logits joining every row's softmax, or null
  std::int64_t sinks_stride = 0;

  // Split-KV: each block's key tiles are cut into `splits` equal runs. With one split the kernel writes o and lse
  // itself; with more it writes each split's normalized O and LSE (log2 units) to part_o
  // (splits, total_q, N, Hv) and part_lse (splits, total_q, N), and the combine kernel writes o and lse.
  int splits = 1;
  float* part_o = nullptr;
  float* part_lse = nullptr;

  // Phase stamps (split_kv_phase_stamps.cuh): written only by kernels instantiated with PhaseStamps, which the
  // diagnostic program tests/split_kv_phases.cu launches; the library leaves them null.
  std::uint64_t* phase_stamps = nullptr;
  std::int64_t combine_stamps_offset = 0;  // the combine's first record: the split kernel's block count
};

}  // namespace attnlab::cuda::serving
