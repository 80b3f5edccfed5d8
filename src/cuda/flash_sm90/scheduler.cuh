// Which blocks a CTA computes. Versions s1 and s2 keep the sm_80 family's mapping (cuda/flash/scheduler.cuh): one CTA
// per (query block, head, batch), longest first within sections of (batch, head) pairs that share L2. Version s3
// is persistent: one CTA per SM walks the same list with a stride of the grid (TileWalk), so a CTA's next block
// starts its loads while this one's epilogue runs, and no CTA is launched per block.
#pragma once

#include "cuda/flash/mask.cuh"
#include "cuda/flash/scheduler.cuh"
#include "cuda/flash_sm90/mainloop.cuh"
#include "cuda/flash_sm90/params.h"

namespace attnlab::cuda::sm90 {

// Rows [begin, begin + len) of packed sequence b from its offsets, clamped to the tensor's rows and to the maximum
// length the grid was sized by, so that offsets out of range cannot send a load or a store outside the tensor.
struct SequenceRows {
  int begin, len;
};
__device__ __forceinline__ SequenceRows sequence_rows(const std::int32_t* cu, std::int64_t stride, int b, int total,
                                                      int max_len) {
  const int begin = min(max(cu[b * stride], 0), total);
  const int end = min(max(cu[(b + 1) * stride], begin), total);
  return {begin, min(end - begin, max_len)};
}

template <class Traits>
__device__ __forceinline__ BlockWork block_work(const KernelParams& kp, const flash::BlockCoord& c) {
  const flash::FlashParams& p = kp.p;
  BlockWork w{};
  w.m0 = c.m_block * Traits::kBlockM;
  w.head = c.head;
  w.batch = c.batch;
  w.kv_head = c.head / p.group;
  if (kp.packed.cu_q != nullptr) {
    const SequenceRows q = sequence_rows(kp.packed.cu_q, kp.packed.cu_q_stride, c.batch, kp.packed.total_q, p.T);
    const SequenceRows k = sequence_rows(kp.packed.cu_k, kp.packed.cu_k_stride, c.batch, kp.packed.total_k, p.S);
    w.q_row0 = q.begin, w.q_len = q.len;
    w.kv_row0 = k.begin, w.kv_len = k.len;
    w.map_batch = 0;
  } else {
    w.q_len = flash::sequence_length(p.q_seqlens, c.batch, p.T);
    w.kv_len = flash::sequence_length(p.kv_seqlens, c.batch, p.S);
    w.q_row0 = w.kv_row0 = 0;
    w.map_batch = c.batch;
  }
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

// The blocks of one persistent CTA: items blockIdx.x, blockIdx.x + gridDim.x, … of the m_blocks · N · B list.
// Only the position lives in a register (the list's size is recomputed from the kernel's parameters, which sit in
// the constant bank): at head dim 256 the consumers have no register to spare.
template <int kBlockM>
struct TileWalk {
  unsigned next = blockIdx.x;
  static __device__ unsigned m_blocks(const flash::FlashParams& p) { return unsigned((p.T + kBlockM - 1) / kBlockM); }
  static __device__ unsigned count(const flash::FlashParams& p) {
    return m_blocks(p) * unsigned(p.N) * unsigned(p.B);
  }
  __device__ bool done(const flash::FlashParams& p) const { return next >= count(p); }
  // Whether the current item is this CTA's last.
  __device__ bool last(const flash::FlashParams& p) const { return next + gridDim.x >= count(p); }
  __device__ flash::BlockCoord coord(const flash::FlashParams& p) const {
    return flash::coord_of(p, next, m_blocks(p));
  }
  __device__ void advance() { next += gridDim.x; }
};

}  // namespace attnlab::cuda::sm90
