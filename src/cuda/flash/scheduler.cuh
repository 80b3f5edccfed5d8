// Which work a thread block does. The grid is (query blocks, heads, batches); with a causal or windowed mask the
// query blocks run last-first, so the blocks with the most key tiles start first and the short ones fill the tail.
#pragma once

#include "cuda/flash/flash_params.h"

namespace attnlab::cuda::flash {

struct BlockCoord {
  int m_block, head, batch;
};

__device__ __forceinline__ BlockCoord block_coord(const FlashParams& p) {
  const bool banded = p.mask.causal || p.mask.window_right >= 0 || p.mask.window_left >= 0;
  const int m_block = banded ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  return {m_block, int(blockIdx.y), int(blockIdx.z)};
}

// A per-batch length from the device, clamped to [0, full] so that a bad value cannot send a load out of bounds.
__device__ __forceinline__ int sequence_length(const std::int32_t* lengths, int batch, int full) {
  if (lengths == nullptr) return full;
  const int len = lengths[batch];
  return len < 0 ? 0 : (len > full ? full : len);
}

}  // namespace attnlab::cuda::flash
