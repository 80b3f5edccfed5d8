// Which blocks a CTA computes. Versions s1 and s2 keep the sm_80 family's mapping (cuda/flash/scheduler.cuh): one CTA
// per (query block, head, batch), longest first within sections of (batch, head) pairs that share L2. Versions s3 and
// s5 (and s7, s11, s15, s26, s29, s30, s31) are persistent: one CTA per SM walks the same list, so a CTA's next block starts
// its loads while this one's epilogue runs, and no CTA is launched per block. s3 walks it with a stride of the grid
// (TileWalk), a static deal that leaves CTAs unequal under causal masks; s5 takes each CTA's next block from a counter
// (DynamicWalk), FlashAttention-3's dynamic scheduler.
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
  // With packed query heads (query_packing.h) a block holds positions [m0, m0 + pack_rows) of the pack_heads
  // query heads from `head` on, all of KV head c.head (p.N and p.group count packed heads then).
  w.m0 = c.m_block * kp.pack_rows;
  w.head = c.head * kp.pack_heads;
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
  const int valid_rows = min(kp.pack_rows, w.q_len - w.m0);
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

// The blocks of one persistent CTA: items blockIdx.x, blockIdx.x + gridDim.x, … of the m_blocks · N · B list
// (position blocks of pack_rows rows: kBlockM, or fewer with packed query heads). Only the position lives in a
// register (the list's size is recomputed from the kernel's parameters, which sit in the constant bank): at head
// dim 256 the consumers have no register to spare.
struct TileWalk {
  unsigned next = blockIdx.x;
  static __device__ unsigned m_blocks(const KernelParams& kp) {
    return unsigned((kp.p.T + kp.pack_rows - 1) / kp.pack_rows);
  }
  static __device__ unsigned count(const KernelParams& kp) {
    return m_blocks(kp) * unsigned(kp.p.N) * unsigned(kp.p.B);
  }
  __device__ bool done(const KernelParams& kp) const { return next >= count(kp); }
  // Whether the current item is this CTA's last.
  __device__ bool last(const KernelParams& kp) const { return next + gridDim.x >= count(kp); }
  __device__ flash::BlockCoord coord(const KernelParams& kp) const {
    return flash::coord_of(kp.p, next, m_blocks(kp));
  }
  __device__ void advance() { next += gridDim.x; }
};

// s5's walk. CTA c starts with item c; whenever its producer has issued the last load of a block it takes the next
// item from the call's counter (KernelParams::tile_counter, zeroed on the stream before the launch): item
// gridDim.x + atomicAdd(counter, 1), so a CTA that frees first gets the next block of the longest-first list, as
// with a grid of one CTA per block, but without a CTA's launch, prologue and tail per block. The producer hands
// each item to the consumers through two shared-memory slots (Pipeline::walk_full / walk_empty / walk_item); an
// item past the list ends the CTA on both sides. Without a counter (a grid of one CTA per block) the walk ends
// after the first item.
struct DynamicWalk {
  // Producer (one thread): the item after this CTA's current block.
  static __device__ unsigned next(std::int32_t* counter, unsigned items) {
    return counter != nullptr ? gridDim.x + unsigned(atomicAdd(counter, 1)) : items;
  }
  // The same in two halves, for s31 (traits.h, kFetchAhead): claim() issues the atomic, claimed_item() turns its
  // answer into the item. The add is inline PTX marked volatile, so that ptxas keeps it after the block's loads
  // (volatile too) between the two calls: an add right after the atomic, where ptxas had put it, waits for the
  // atomic's answer before the loads go out.
  static __device__ unsigned claim(std::int32_t* counter) {
    return counter != nullptr ? unsigned(atomicAdd(counter, 1)) : 0u;
  }
  static __device__ unsigned claimed_item(const std::int32_t* counter, unsigned claim, unsigned items) {
    if (counter == nullptr) return items;
    unsigned item;
    asm volatile("add.u32 %0, %1, %2;\n" : "=r"(item) : "r"(claim), "r"(gridDim.x));
    return item;
  }
  template <class Pipe>
  static __device__ void publish(const Pipe& pipe, std::uint32_t i, unsigned item) {
    const int slot = int(i & 1u);
    ptx::wait(pipe.walk_empty(slot), ((i >> 1) & 1u) ^ 1u);
    ptx::store_shared(pipe.walk_item(slot), item);
    ptx::arrive(pipe.walk_full(slot));
  }
  // Consumer warps: the CTA's i-th item. Lane 0 reads the slot, hands the item to its warp with a shuffle and
  // then releases the slot, so the read and the release are one thread's, in program order.
  template <class Pipe>
  static __device__ unsigned take(const Pipe& pipe, std::uint32_t i, int lane) {
    const int slot = int(i & 1u);
    ptx::wait(pipe.walk_full(slot), (i >> 1) & 1u);
    unsigned item = 0;
    if (lane == 0) item = ptx::load_shared(pipe.walk_item(slot));
    item = __shfl_sync(0xffffffffu, item, 0);
    if (lane == 0) ptx::arrive(pipe.walk_empty(slot));
    return item;
  }
};

}  // namespace attnlab::cuda::sm90
