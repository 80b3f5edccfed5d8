// The small kernels around a cuDNN graph of a packed or paged batch (cudnn_varlen.cpp). cuDNN reads a ragged
// tensor's batches at element offsets, its lengths from (B) int32 tensors and a paged cache through int32 page
// tables; attnlab's calls carry cumulative row offsets, cache lengths and a block table, all on the device, which
// the caller keeps in range only by contract (docs/serving.md, "Checks"). So before the graph one kernel derives
// what cuDNN reads from them, every value clamped into the tensors so that no input makes cuDNN read or write
// outside them; after it, another writes what cuDNN leaves undefined: rows that see no key (O = 0, LSE = −inf,
// docs/design.md §2) and the caller's (N, total_q) LSE from cuDNN's (B, N, T) statistics.
//
// Decode (at most one query a sequence) runs on cuDNN's decode kernels only with a padded Q and non-ragged keys:
// there the first kernel also gathers each sequence's query row into a (B, N, Hqk) buffer (and, for packed keys,
// writes a page table of one-row pages), and the second scatters the graph's (B, N, Hv) output back to the
// sequences' rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attnlab/attention.h"

namespace attnlab::cuda::cudnn {

// What prepare_serving_inputs() writes, in one int32 block of serving_ints(B, table entries) words.
struct ServingInts {
  std::int32_t* seq_len_q = nullptr;   // (B): clamped to [0, T] and to q's rows
  std::int32_t* seq_len_kv = nullptr;  // (B): clamped to [0, S], to k's rows or to the pages a sequence has
  std::int32_t* q_offsets = nullptr;   // (B + 1): row offsets · q's row stride
  std::int32_t* o_offsets = nullptr;   // (B + 1): row offsets · o's row stride
  std::int32_t* k_offsets = nullptr;   // (B + 1), packed keys only (ragged)
  std::int32_t* v_offsets = nullptr;   // (B + 1), packed keys only (ragged)
  std::int32_t* page_table = nullptr;  // (B, pages per sequence) when read as pages: entries clamped to [0, pages)
};
std::size_t serving_int_words(std::int64_t B, std::int64_t table_entries);
ServingInts carve_serving_ints(std::int32_t* base, std::int64_t B, std::int64_t table_entries);

struct ServingInputs {
  std::int64_t B = 0, T = 0, S = 0;  // the graph's maximum lengths
  const std::int32_t* cu_q = nullptr;
  std::int64_t cu_q_stride = 1, total_q = 0, q_row = 0, o_row = 0;
  // Packed keys: cu_k over total_k rows. Paged: seqlens and the first pages_per_sequence columns of the block
  // table, copied as (B, pages_per_sequence). Packed keys read as pages of one row (decode; out.page_table set, no
  // block table): entry (b, j) is row cu_k[b] + j.
  const std::int32_t* cu_k = nullptr;
  std::int64_t cu_k_stride = 1, total_k = 0, k_row = 0, v_row = 0;
  const std::int32_t* seqlens = nullptr;
  std::int64_t seqlens_stride = 1;
  const std::int32_t* block_table = nullptr;
  std::int64_t table_b = 0, table_p = 0, pages = 0, page_size = 0, pages_per_sequence = 0;
  ServingInts out;
  // Decode: q (total_q, N, Hqk) of 2-byte elements, its rows (rows of 16-byte pieces) gathered into q_gathered.
  const void* q = nullptr;
  std::int64_t q_head = 0, N = 0, Hqk = 0;
  void* q_gathered = nullptr;
};
void prepare_serving_inputs(const ServingInputs& args, cudaStream_t stream);

// After the graph, per (sequence b, row i < seq_len_q[b], head n): a row whose mask leaves no key gets O = 0 and
// LSE = −inf; other rows copy cuDNN's Stats into lse when it is asked for.
struct ServingFinish {
  std::int64_t B = 0, N = 0, T = 0, Hv = 0;
  MaskOptions mask;
  const std::int32_t* cu_q = nullptr;  // the call's offsets, clamped as prepare_serving_inputs() did
  std::int64_t cu_q_stride = 1, total_q = 0;
  const std::int32_t* seq_len_q = nullptr;
  const std::int32_t* seq_len_kv = nullptr;
  void* o = nullptr;  // (total_q, N, Hv) of 2-byte elements
  std::int64_t o_row = 0, o_head = 0;
  const void* o_gathered = nullptr;  // decode: the graph's (B, N, Hv) output, scattered to o's rows
  const float* stats = nullptr;  // (B, N, T), or null when no LSE is asked for
  float* lse = nullptr;          // (N, total_q)
  std::int64_t lse_head = 0, lse_row = 0;
};
void finish_serving_outputs(const ServingFinish& args, cudaStream_t stream);

}  // namespace attnlab::cuda::cudnn
