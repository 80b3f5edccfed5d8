// The end of a block, per consumer warpgroup: O = acc / l rounded to the element type and staged in the
// warpgroup's own 64 rows of Q's shared memory (same swizzle as the TMA box), then written by one TMA store per
// column slice that clips rows past T; LSE = (max + log2 l) · ln 2 straight from the registers of one lane per
// row. Rows past the query length and rows that saw no key get O = 0 and LSE = −inf (docs/design.md §2: never
// NaN), written as zeros rather than scaled: a padding row's Q may be NaN, and then so is its accumulator.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/flash_sm90/mainloop.cuh"
#include "cuda/flash_sm90/params.h"
#include "cuda/flash_sm90/ptx.cuh"
#include "cuda/flash_sm90/softmax.cuh"

namespace attnlab::cuda::sm90 {

// Byte offset of element (row, col) in a swizzled tile of kRowBytes-byte rows split in column slices, as TMA's
// SWIZZLE_128B and SWIZZLE_64B lay them out: the 16-byte chunk index within a row is XORed with bits 7 and up of
// the row's offset (row % 8 for 128-byte rows, (row / 2) % 4 for 64-byte rows).
template <class Traits>
__device__ __forceinline__ std::uint32_t swizzled_offset(int row, int col) {
  constexpr int kChunkMask = Traits::kRowBytes / 16 - 1;
  const int slice = col / Traits::kSliceCols, byte = (col % Traits::kSliceCols) * 2;
  const int row_offset = row * Traits::kRowBytes;
  return std::uint32_t(slice * Traits::kQSliceBytes + row_offset +
                       ((((byte >> 4) ^ ((row_offset >> 7) & kChunkMask))) << 4) + (byte & 15));
}

// Q's shared memory is free for the CTA's next block once this store has read it: `q_empty` gets this warpgroup's
// arrival then.
template <class Traits>
__device__ void store_output(const KernelParams& kp, std::uint32_t smem, std::uint32_t q_empty,
                             unsigned char* smem_generic,
                             const BlockWork& w, int consumer, int warp, int lane,
                             const float (&o)[Traits::kORegs],
                             const OnlineSoftmax& softmax) {
  using Element = typename Traits::Element;
  const flash::FlashParams& p = kp.p;
  const int local0 = consumer * Traits::kRowsPerConsumer;  // this warpgroup's first row in the block
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int local = local0 + 16 * warp + (lane >> 2) + 8 * h;
    const int row = w.m0 + local;
    const float l = softmax.total(h);
    const bool seen = row < w.q_len && l > 0.0f;
    const float inv = seen ? __frcp_rn(l) : 0.0f;
#pragma unroll
    for (int j = 0; j < Traits::kORegs / 4; ++j) {
      const int col = 8 * j + 2 * (lane & 3);
      *reinterpret_cast<std::uint32_t*>(smem_generic + swizzled_offset<Traits>(local, col)) =
          seen ? ptx::pack2<Element>(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv) : 0u;
    }
    if (p.lse != nullptr && (lane & 3) == 0 && row < p.T)
      p.lse[w.batch * p.lse_stride_b + w.head * p.lse_stride_n + std::int64_t(row) * p.lse_stride_t] =
          seen ? (softmax.row_max[h] + __log2f(l)) * 0.6931471805599453f : -INFINITY;
  }
  // Every thread's writes must be visible to the TMA unit before one thread issues the store.
  ptx::fence_proxy_async();
  ptx::named_barrier_sync(1 + consumer, 128);
  if (warp == 0 && lane == 0) {
#pragma unroll
    for (int slice = 0; slice < Traits::kVSlices; ++slice)
      ptx::tma_store(&kp.o, smem + Traits::kQOffset + slice * Traits::kQSliceBytes + local0 * Traits::kRowBytes,
                     Traits::kSliceCols * slice, w.m0 + local0, w.head, w.batch);
    ptx::tma_store_commit();
    ptx::tma_store_wait_read();
    ptx::arrive(q_empty);
  }
}

}  // namespace attnlab::cuda::sm90
