// What a block of the sm_90a kernel computes (BlockWork: its query rows, head, batch, lengths and key tiles) and
// where it sits in its CTA's sequence of blocks (BlockSchedule). Filled by the scheduler (scheduler.cuh), read by
// the main loop, the key padding and the epilogue.
#pragma once

#include <cstdint>

namespace attnlab::cuda::sm90 {

// Where a block works: its query rows [m0, m0 + kBlockM) of head `head` (or positions [m0, m0 + pack_rows) of the
// pack_heads query heads from `head` on: query_packing.h), batch, KV head, and its key tiles. Rows and keys
// count from the sequence's start, which is row q_row0 of Q and O and row kv_row0 of K and V at batch index
// map_batch of the tensor maps (0, 0, batch for a padded batch; the sequence's offsets, 0 for a packed one).
struct BlockWork {
  int m0, head, batch, kv_head;
  int q_len, kv_len;
  int q_row0, kv_row0, map_batch;
  int tile_begin, tile_end;        // key tiles [tile_begin, tile_end) of kBlockN keys
  int full_begin, full_end;        // keys every row of the block sees
  __device__ __forceinline__ int tiles() const { return tile_end > tile_begin ? tile_end - tile_begin : 0; }
};

// Where a block sits in its CTA's sequence: a persistent CTA (s3) runs several blocks through one pipeline, whose
// slots and phases continue (step0: the pipeline step of this block's first key tile), with Q's barriers in phase
// q_phase, and one sequence of ping-pong turns. A CTA of one block is {0, 0, true, true}.
struct BlockSchedule {
  std::uint32_t step0 = 0;
  std::uint32_t q_phase = 0;
  bool first_block = true, last_block = true;
};

}  // namespace attnlab::cuda::sm90
