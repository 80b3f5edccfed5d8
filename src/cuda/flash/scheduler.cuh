// Which work a thread block does. The grid is (query blocks, heads, batches), and the GPU starts blocks in the
// order of their linear index (x fastest). Blocks run longest first (LPT) within sections of (batch, head) pairs:
//   section s covers pairs [s·G, (s + 1)·G); inside it the last query block of every pair comes first, then the
//   one before it, and so on.
// G comes from the host (flash_path.cpp). With G = 1 (no band, or short sequences) a head's query blocks run side
// by side, last first, sharing its K and V in L2; under a causal or window mask, where query blocks differ in
// length, longer sequences take G > 1 pairs whose K and V fit in L2, so that the short blocks of every head fill
// the tail instead of one long block running alone at the end. One mapping for every case, without a branch: a
// second one cost registers that the kernels with score modifiers do not have.
#pragma once

#include <cstdint>

#include "cuda/flash/flash_params.h"

namespace attnlab::cuda::flash {

struct BlockCoord {
  int m_block, head, batch;
};

// Work item `linear` of m_blocks · N · B in that order (a persistent kernel walks them itself: flash_sm90).
__device__ __forceinline__ BlockCoord coord_of(const FlashParams& p, unsigned linear, unsigned m_blocks) {
  const unsigned group = unsigned(p.section_heads);  // m_blocks · N · B < 2^31 (the paths' rules)
  const unsigned section = linear / (group * m_blocks), within = linear - section * group * m_blocks;
  const unsigned pair = section * group + within % group;  // batch · N + head
  return {int(m_blocks - 1 - within / group), int(pair % unsigned(p.N)), int(pair / unsigned(p.N))};
}

__device__ __forceinline__ BlockCoord block_coord(const FlashParams& p) {
  const unsigned m_blocks = gridDim.x;
  return coord_of(p, blockIdx.x + m_blocks * (blockIdx.y + gridDim.y * blockIdx.z), m_blocks);
}

// A per-batch length from the device, clamped to [0, full] so that a bad value cannot send a load out of bounds.
__device__ __forceinline__ int sequence_length(const std::int32_t* lengths, int batch, int full) {
  if (lengths == nullptr) return full;
  const int len = lengths[batch];
  return len < 0 ? 0 : (len > full ? full : len);
}

}  // namespace attnlab::cuda::flash
