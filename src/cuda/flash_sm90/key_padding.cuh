// Keys past a batch's length (per-batch sequence lengths, docs/design.md §2): the caller's K and V rows in
// [kv_len, S) are padding and may hold anything, NaN included, yet TMA loads a key tile whole. For K that is
// harmless: those keys' scores are masked to −inf before the softmax reads them. For V it is not: P·V multiplies
// each V row by its probability, and 0 · NaN = NaN. So before the P·V of the one tile that straddles kv_len (a
// block's last: its key range ends at or before kv_len), consumer warpgroup 0 zeroes those rows in shared memory,
// and all consumer warpgroups meet on a barrier before any issues that MMA.
#pragma once

#include <cstdint>

#include "cuda/flash_sm90/block_work.h"
#include "cuda/flash_sm90/params.h"
#include "cuda/flash_sm90/pipeline.cuh"  // kKeyPaddingBarrier
#include "cuda/flash_sm90/ptx.cuh"

namespace attnlab::cuda::sm90 {

// `v_tile`: the shared-memory V slot of the block's last key tile, whose bytes have landed. Uniform over the CTA:
// every consumer thread calls it, and all of them return without a barrier when the tile has no padding row.
template <class Traits>
__device__ __forceinline__ void clear_keys_past_length(const KernelParams& kp, const BlockWork& w,
                                                       std::uint32_t v_tile, int consumer) {
  const int key0 = (w.tile_end - 1) * Traits::kBlockN;
  const int first = w.kv_len - key0;  // first padding row of the tile
  // Padded batches: rows from S on arrived as zeros (TMA's out-of-bounds fill). Packed ones: the rows past the
  // sequence are the next sequence's keys, to be cleared as well.
  const int end = kp.packed.cu_q != nullptr ? Traits::kBlockN : min(Traits::kBlockN, kp.p.S - key0);
  if (first >= end) return;
  if (consumer == 0) {
    // Within a column slice the rows [first, end) are contiguous: zero them 16 bytes per thread and step.
    constexpr int kChunksPerRow = Traits::kRowBytes / 16;
    const int per_slice = (end - first) * kChunksPerRow;
    for (int i = int(threadIdx.x) % 128; i < per_slice * Traits::kVSlices; i += 128) {
      const int slice = i / per_slice, chunk = i % per_slice;
      ptx::store_zero_16(v_tile + std::uint32_t(slice * Traits::kKVSliceBytes + first * Traits::kRowBytes + 16 * chunk));
    }
    // The zeros must be visible to the tensor cores' (async-proxy) reads of the slot.
    ptx::fence_proxy_async();
  }
  ptx::named_barrier_sync(kKeyPaddingBarrier, 128 * Traits::kConsumers);
}

}  // namespace attnlab::cuda::sm90
