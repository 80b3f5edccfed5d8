// The main loop, in its two roles. The producer (one thread of warpgroup 0) issues every TMA load of the block:
// Q once, then K and V of each key tile into the next free slot. Each consumer warpgroup computes S = Q·Kᵀ for its
// 64 query rows with wgmma from shared memory, runs the online softmax in registers, and accumulates O += P·V with P
// as the register operand. Tiles inside every row's visible range skip the per-element mask (mask_tile below).
#pragma once

#include <cstdint>

#include "core/mask.h"
#include "cuda/flash_sm90/params.h"
#include "cuda/flash_sm90/pipeline.cuh"
#include "cuda/flash_sm90/ptx.cuh"
#include "cuda/flash_sm90/softmax.cuh"

namespace attnlab::cuda::sm90 {

// Where a block works: its query rows [m0, m0 + kBlockM), head, batch, KV head, and its key tiles.
struct BlockWork {
  int m0, head, batch, kv_head;
  int q_len, kv_len;
  int tile_begin, tile_end;        // key tiles [tile_begin, tile_end) of kBlockN keys
  int full_begin, full_end;        // keys every row of the block sees
};

template <class Traits>
__device__ void produce(const KernelParams& kp, const Pipeline<Traits>& pipe, std::uint32_t smem,
                        const BlockWork& w) {
  ptx::prefetch_tensor_map(&kp.q);
  ptx::prefetch_tensor_map(&kp.k);
  ptx::prefetch_tensor_map(&kp.v);
  ptx::arrive_expect_bytes(pipe.q_full(), Traits::kQBytes);
#pragma unroll
  for (int h = 0; h < Traits::kHalves; ++h)
    ptx::tma_load(smem + Traits::kQOffset + h * Traits::kQHalfBytes, &kp.q, pipe.q_full(), 64 * h, w.m0, w.head,
                  w.batch);
  for (int j = w.tile_begin, step = 0; j < w.tile_end; ++j, ++step) {
    const int slot = Pipeline<Traits>::slot(step), key0 = j * Traits::kBlockN;
    pipe.producer_acquire_k(step);
    ptx::arrive_expect_bytes(pipe.k_full(slot), Traits::kKVBytes);
#pragma unroll
    for (int h = 0; h < Traits::kHalves; ++h)
      ptx::tma_load(smem + Traits::kKOffset + slot * Traits::kKVBytes + h * Traits::kKVHalfBytes, &kp.k,
                    pipe.k_full(slot), 64 * h, key0, w.kv_head, w.batch);
    pipe.producer_acquire_v(step);
    ptx::arrive_expect_bytes(pipe.v_full(slot), Traits::kKVBytes);
#pragma unroll
    for (int h = 0; h < Traits::kHalves; ++h)
      ptx::tma_load(smem + Traits::kVOffset + slot * Traits::kKVBytes + h * Traits::kKVHalfBytes, &kp.v,
                    pipe.v_full(slot), 64 * h, key0, w.kv_head, w.batch);
  }
}

// One consumer warpgroup's loop over the block's key tiles; leaves O unnormalized and the softmax state for the
// epilogue. `consumer` is 0 or 1 (its 64 rows start at m0 + 64·consumer); `lane` and `warp` (0–3) are within it.
template <class Traits>
__device__ void consume(const KernelParams& kp, const Pipeline<Traits>& pipe, std::uint32_t smem,
                        const BlockWork& w, int consumer, int warp, int lane, float (&o)[64],
                        OnlineSoftmax& softmax) {
  using Element = typename Traits::Element;
  const flash::FlashParams& p = kp.p;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  // The two rows this thread owns and the keys each sees.
  KeySpan visible[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = w.m0 + consumer * Traits::kRowsPerConsumer + 16 * warp + (lane >> 2) + 8 * h;
    const core::KeyRange r = core::visible_keys(p.mask, row, w.q_len, w.kv_len);
    visible[h] = {int(r.begin), int(r.end)};
  }
  // Descriptors. Q (A, K-major): this warpgroup's 64 rows; key step k reads columns 16k … 16k + 15, which lie in
  // column half k / 4 at byte 32·(k % 4) of each swizzled row. K (B, K-major) likewise over its 128 rows. V (B,
  // MN-major): key step k reads rows 16k … 16k + 15 (2048 bytes further per step), its two column halves
  // kKVHalfBytes apart (the leading offset), 8-row groups 1024 bytes apart (the stride offset).
  const std::uint32_t q_base = smem + Traits::kQOffset + consumer * Traits::kRowsPerConsumer * Traits::kRowBytes;
  auto k_major = [](std::uint32_t tile, int k) {
    return ptx::make_descriptor(tile + (k / 4) * Traits::kKVHalfBytes + 32 * (k % 4), 16, 1024);
  };
  auto q_major = [&](int k) {
    return ptx::make_descriptor(q_base + (k / 4) * Traits::kQHalfBytes + 32 * (k % 4), 16, 1024);
  };

  ptx::wait(pipe.q_full(), 0);
  for (int j = w.tile_begin, step = 0; j < w.tile_end; ++j, ++step) {
    const int slot = Pipeline<Traits>::slot(step), key0 = j * Traits::kBlockN;
    const std::uint32_t k_tile = smem + Traits::kKOffset + slot * Traits::kKVBytes;
    const std::uint32_t v_tile = smem + Traits::kVOffset + slot * Traits::kKVBytes;

    float s[64];
    pipe.wait_k(step);
    ptx::wgmma_fence();
#pragma unroll
    for (int k = 0; k < Traits::kHead / 16; ++k) ptx::mma_ss<Element>(s, q_major(k), k_major(k_tile, k), k > 0);
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::fence_registers(s);
    pipe.release_k(step, lane);

    const bool mask_tile = key0 < w.full_begin || key0 + Traits::kBlockN > w.full_end;
    if (mask_tile)
      OnlineSoftmax::scale_and_mask<true>(s, scale_log2, visible, key0, lane);
    else
      OnlineSoftmax::scale_and_mask<false>(s, scale_log2, visible, key0, lane);
    softmax.update(s, o);
    std::uint32_t a[32];
    probabilities_to_operand<Element>(s, a);

    pipe.wait_v(step);
    ptx::fence_registers(a);
    ptx::fence_registers(o);
    ptx::wgmma_fence();
#pragma unroll
    for (int k = 0; k < Traits::kBlockN / 16; ++k) {
      const std::uint32_t (&ak)[4] = *reinterpret_cast<const std::uint32_t(*)[4]>(&a[4 * k]);
      ptx::mma_rs<Element>(o, ak, ptx::make_descriptor(v_tile + 2048 * k, Traits::kKVHalfBytes, 1024), 1);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::fence_registers(o);
    pipe.release_v(step, lane);
  }
}

}  // namespace attnlab::cuda::sm90
