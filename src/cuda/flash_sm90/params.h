// What one sm_90a flash launch receives: the shared flash parameters (cuda/flash/flash_params.h: strides, mask,
// scale, LSE) and one TMA tensor map per tensor, built on the host for this call (tensor_maps.cpp). The kernel takes
// the struct as a __grid_constant__ parameter, so the maps are read from parameter space by the TMA unit.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/flash/flash_params.h"

namespace attnlab::cuda::sm90 {

// A packed variable-length batch (include/attnlab/serving.h): sequence b's query rows start at row cu_q[b] of Q
// and O, its keys at row cu_k[b] of K and V, each tensor mapped as one batch of all its rows; p.T and p.S are the
// maximum lengths (the grid's extent) and p.B the sequences. The offsets are read on the device and clamped to the
// tensors' rows. cu_q == nullptr: a padded batch, sequence b at batch index b.
struct PackedRows {
  const std::int32_t* cu_q = nullptr;
  const std::int32_t* cu_k = nullptr;
  std::int64_t cu_q_stride = 1, cu_k_stride = 1;
  int total_q = 0, total_k = 0;  // rows of Q (and O) and of K (and V)
};

struct KernelParams {
  flash::FlashParams p;
  PackedRows packed;
  // Attention sinks (gpt-oss): one logit per query head in the softmax's denominator (the epilogue folds it in),
  // or null.
  const float* sinks = nullptr;
  std::int64_t sinks_stride = 1;
  // s5's block counter (scheduler.cuh, DynamicWalk): 4 bytes in a 16-byte piece of the call's scratch, zeroed on
  // the stream before the launch, when the grid has fewer CTAs than blocks; null gives a grid of one CTA per block.
  std::int32_t* tile_counter = nullptr;
  // Packed query heads (query_packing.h): query heads per block and positions per head; p.N and p.group then
  // count packed heads. 1 and the version's block rows (traits.h, query_block_rows) without packing.
  int pack_heads = 1, pack_rows = 128;
  // 4-D maps over (head dim, sequence, heads, batches), boxes of one swizzled row's columns (64 of 128 bytes, or
  // 32 of 64 bytes at head dim 96: traits.h) × 128 rows for Q (pack_rows positions × pack_heads heads with packed
  // query heads), a key tile's rows for K and V and 64 rows for O (one consumer warpgroup's rows).
  CUtensorMap q, k, v, o;
};

}  // namespace attnlab::cuda::sm90
