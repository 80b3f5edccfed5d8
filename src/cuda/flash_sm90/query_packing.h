// Packed query heads (GQA/MQA at small T): a block of the sm_90a kernel takes the g query heads that share one KV
// head, ⌊M / g⌋ query positions of each, instead of M positions of one head (M: the version's block rows, 128 or
// 192: traits.h, query_block_rows), so that a short query sequence fills the block's rows and the g heads share one
// load of every K/V tile (FlashAttention-3's PackGQA). Q arrives by the same 4-D tensor map with a box of (one
// column slice, ⌊M / g⌋ positions, g heads, 1): the tile's rows are
// head-major, row r being head first + r / rows at position m0 + r % rows. The kernel takes each row's position (its
// mask) and head (LSE, sinks, where O goes) from its index; O leaves through the threads (epilogue.cuh).
#pragma once

#include "core/problem.h"
#include "cuda/flash_sm90/params.h"

namespace attnlab::cuda::sm90 {

struct QueryPacking {
  int heads;  // query heads per block: 1, or the call's group (N / K)
  int rows;   // query positions per head and block (the block's rows / heads)
};

// No packing: one head's `block_rows` positions per block.
constexpr QueryPacking unpacked(int block_rows) { return {1, block_rows}; }

// The packing a padded call runs: every query head of a KV head when there are several (N / K ≥ 2, at most the
// block's rows) and the query sequence is short (T ≤ 64, where a block of one head would leave half its rows or
// more empty); none otherwise. (A packed variable-length batch is never packed this way: its rows are sequences,
// not positions, and varlen.cpp runs it unpacked.) Measured on the H200 (docs/perf-notes-flash-sm90.md) it was
// never slower than unpacked, also where the packed blocks are fewer than the SMs (8–64 blocks on 132).
// Tuning::flash_pack_query_heads = 0 turns it off, for measurements.
QueryPacking query_packing(const core::Problem& p, int version);

// Blocks of the call's grid under that packing: ⌈T / rows⌉ · (N / heads) · B.
long long block_count(const core::Problem& p, const QueryPacking& q);

// Writes the packing into the kernel's parameters: its fields, and the block list over (position block, KV head,
// batch) — FlashParams' heads N / heads and group N / K / heads, one (batch, head) pair per L2 section.
void apply_query_packing(const QueryPacking& q, KernelParams& params);

}  // namespace attnlab::cuda::sm90
