// Which block a CTA computes. This first version keeps the sm_80 family's mapping (cuda/flash/scheduler.cuh):
// one CTA per (query block, head, batch), longest first within sections of (batch, head) pairs that share L2.
// The persistent scheduler of the Hopper design (one CTA per SM walking a tile list, the next tile's Q load under
// the current tile's epilogue) replaces it here, behind the same BlockWork.
#pragma once

#include "cuda/flash/mask.cuh"
#include "cuda/flash/scheduler.cuh"
#include "cuda/flash_sm90/mainloop.cuh"

namespace attnlab::cuda::sm90 {

template <class Traits>
__device__ __forceinline__ BlockWork block_work(const flash::FlashParams& p) {
  const flash::BlockCoord c = flash::block_coord(p);
  BlockWork w{};
  w.m0 = c.m_block * Traits::kBlockM;
  w.head = c.head;
  w.batch = c.batch;
  w.kv_head = c.head / p.group;
  w.q_len = flash::sequence_length(p.q_seqlens, c.batch, p.T);
  w.kv_len = flash::sequence_length(p.kv_seqlens, c.batch, p.S);
  const int valid_rows = min(Traits::kBlockM, w.q_len - w.m0);
  const flash::BlockKeys keys =
      valid_rows > 0 ? flash::block_keys(p.mask, w.m0, w.m0 + valid_rows - 1, w.q_len, w.kv_len) : flash::BlockKeys{};
  if (valid_rows > 0 && !keys.empty()) {
    w.tile_begin = keys.begin / Traits::kBlockN;
    w.tile_end = (keys.end + Traits::kBlockN - 1) / Traits::kBlockN;
    w.full_begin = keys.full_begin;
    w.full_end = keys.full_end;
  }
  return w;
}

}  // namespace attnlab::cuda::sm90
