// The end of a block, per consumer warpgroup: O = acc / l rounded to the element type and staged in the
// warpgroup's own 64 rows of O's staging rows (Q's shared memory, or the dynamic walk's own buffer: traits.h, kOOffset;
// the same swizzle as the TMA box), then written by one TMA store per column slice that clips rows past T (a packed
// sequence's last rows are copied out by the threads instead); LSE = (max + log2 l) · ln 2 straight from the registers
// of one lane per row. Rows past the query length and rows that saw no key get O = 0 and LSE = −inf (docs/design.md §2:
// never NaN), written as zeros rather than scaled: a padding row's Q may be NaN, and then so is its accumulator.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/flash_sm90/mainloop.cuh"
#include "cuda/flash_sm90/params.h"
#include "cuda/flash_sm90/pipeline.cuh"  // own_barrier
#include "cuda/flash_sm90/ptx.cuh"
#include "cuda/flash_sm90/smem_layout.cuh"
#include "cuda/flash_sm90/softmax.cuh"

namespace attnlab::cuda::sm90 {

// Row h's normalization: 1 / l for O and the LSE, with the call's attention sink (KernelParams::sinks) joining the
// denominator as one more term e^σ. In the log2 units of the running maximum m: l' = l · 2^(m − m') + 2^(σ' − m')
// with m' = max(m, σ'), σ' = σ · log2 e, so O = acc · 2^(m − m') / l' and LSE = (m' + log2 l') · ln 2. A row that
// saw no key (l = 0) gets O = 0 and LSE = σ with a sink, −inf without (docs/design.md §2).
struct RowNorm {
  float scale;  // what O's accumulator is multiplied by (0 for rows without output)
  float lse;
};
__device__ __forceinline__ RowNorm row_norm(float row_max, float l, bool row_exists, const float* sink) {
  constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
  if (!row_exists || !(l > 0.0f)) return {0.0f, sink != nullptr ? *sink : -INFINITY};
  if (sink == nullptr) return {__frcp_rn(l), (row_max + __log2f(l)) * kLn2};
  const float sigma = *sink * kLog2e, top = fmaxf(row_max, sigma);
  const float kept = exp2f(row_max - top), total = l * kept + exp2f(sigma - top);
  return {kept * __frcp_rn(total), (top + __log2f(total)) * kLn2};
}

// Rows of O past a packed sequence's end belong to the next sequence (or to no sequence), so the block's last rows
// cannot go out through a TMA box of 64: the warpgroup copies its valid rows from the staged tile, 16 bytes per
// thread and step, straight to global memory.
template <class Traits>
__device__ __forceinline__ void copy_rows_out(const flash::FlashParams& p, const unsigned char* smem_generic,
                                              const BlockWork& w, int local0, int rows) {
  using Element = typename Traits::Element;
  constexpr int kChunks = Traits::kHeadV / 8;  // 16-byte pieces of a row
  for (int i = ptx::opaque(int(threadIdx.x) % 128); i < rows * kChunks; i += 128) {
    const int r = i / kChunks, col = 8 * (i % kChunks);
    const uint4 piece = *reinterpret_cast<const uint4*>(smem_generic + swizzled_offset<Traits>(local0 + r, col));
    Element* out = static_cast<Element*>(p.o) + std::int64_t(w.q_row0 + w.m0 + local0 + r) * p.o_stride_t +
                   std::int64_t(w.head) * p.o_stride_n + col;
    *reinterpret_cast<uint4*>(out) = piece;
  }
}

// Packed query heads (query_packing.h): the staged rows are head-major, row r being head w.head + r / pack_rows at
// position w.m0 + r % pack_rows; the warpgroup copies each of its rows inside the tensor to where that head and
// position live in O, 16 bytes per thread and step.
template <class Traits>
__device__ __forceinline__ void copy_packed_heads_out(const KernelParams& kp, const unsigned char* smem_generic,
                                                      const BlockWork& w, int local0) {
  using Element = typename Traits::Element;
  const flash::FlashParams& p = kp.p;
  constexpr int kChunks = Traits::kHeadV / 8;  // 16-byte pieces of a row
  for (int i = ptx::opaque(int(threadIdx.x) % 128); i < Traits::kRowsPerConsumer * kChunks; i += 128) {
    const int local = local0 + i / kChunks, col = 8 * (i % kChunks);
    const int t = w.m0 + local % kp.pack_rows, head = w.head + local / kp.pack_rows;
    if (local >= kp.pack_heads * kp.pack_rows || t >= p.T) continue;
    const uint4 piece = *reinterpret_cast<const uint4*>(smem_generic + swizzled_offset<Traits>(local, col));
    Element* out = static_cast<Element*>(p.o) + std::int64_t(w.batch) * p.o_stride_b +
                   std::int64_t(t) * p.o_stride_t + std::int64_t(head) * p.o_stride_n + col;
    *reinterpret_cast<uint4*>(out) = piece;
  }
}

// Where O is staged in Q's shared memory, Q's memory is free for the CTA's next block once this store has read it:
// `q_empty` gets this warpgroup's arrival then. In a buffer of its own (Traits::kOwnOBuffer) the store is waited
// for only when the next block's O is about to be staged (or at the CTA's end: finish_output_stores), and Q's
// memory was released by the main loop.
template <class Traits>
__device__ void store_output(const KernelParams& kp, std::uint32_t smem, std::uint32_t q_empty,
                             unsigned char* smem_generic,
                             const BlockWork& w, int consumer, int warp, int lane,
                             const float (&o)[Traits::kORegs],
                             const OnlineSoftmax& softmax) {
  using Element = typename Traits::Element;
  const flash::FlashParams& p = kp.p;
  const int local0 = consumer * Traits::kRowsPerConsumer;  // this warpgroup's first row in the block
  const bool packed = kp.packed.cu_q != nullptr;
  unsigned char* staged = smem_generic + Traits::kOOffset;
  if constexpr (Traits::kOwnOBuffer) {
    // The previous block's store (issued by this thread) must have read the rows before they are rewritten; the
    // warpgroup's threads that copied rows out (copy_rows_out) have passed this barrier after their reads too.
    if (warp == 0 && lane == 0) ptx::tma_store_wait_read();
    ptx::named_barrier_sync(own_barrier(consumer), 128);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int local = local0 + 16 * warp + (lane >> 2) + 8 * h;
    // The row's position and head (head-major rows with packed query heads: query_packing.h).
    const bool in_block = local < kp.pack_heads * kp.pack_rows;
    const int row = w.m0 + local % kp.pack_rows, head = w.head + local / kp.pack_rows;
    const float* sink = kp.sinks != nullptr ? kp.sinks + std::int64_t(head) * kp.sinks_stride : nullptr;
    const RowNorm norm = row_norm(softmax.row_max[h], softmax.total(h), in_block && row < w.q_len, sink);
#pragma unroll
    for (int j = 0; j < Traits::kORegs / 4; ++j) {
      const int col = 8 * j + 2 * (lane & 3);
      *reinterpret_cast<std::uint32_t*>(staged + swizzled_offset<Traits>(local, col)) =
          norm.scale != 0.0f ? ptx::pack2<Element>(o[4 * j + 2 * h] * norm.scale, o[4 * j + 2 * h + 1] * norm.scale)
                             : 0u;
    }
    if (p.lse != nullptr && (lane & 3) == 0 && in_block && row < (packed ? w.q_len : p.T))
      p.lse[w.batch * p.lse_stride_b + head * p.lse_stride_n + std::int64_t(w.q_row0 + row) * p.lse_stride_t] =
          norm.lse;
  }
  // Every thread's writes must be visible to the TMA unit (or to the warpgroup's other threads) before the store.
  ptx::fence_proxy_async();
  ptx::named_barrier_sync(own_barrier(consumer), 128);
  if (kp.pack_heads > 1) {  // uniform: the call's packing
    copy_packed_heads_out<Traits>(kp, staged, w, local0);
    if constexpr (!Traits::kOwnOBuffer) {
      ptx::named_barrier_sync(own_barrier(consumer), 128);  // every read of the staged tile is done
      if (warp == 0 && lane == 0) ptx::arrive(q_empty);
    }
    return;
  }
  const int rows = w.q_len - (w.m0 + local0);  // this warpgroup's rows inside the sequence (uniform)
  if (packed && rows < Traits::kRowsPerConsumer) {
    copy_rows_out<Traits>(p, staged, w, local0, rows);
    if constexpr (!Traits::kOwnOBuffer) {
      ptx::named_barrier_sync(own_barrier(consumer), 128);  // every read of the staged tile is done
      if (warp == 0 && lane == 0) ptx::arrive(q_empty);
    }
    return;
  }
  if (warp == 0 && lane == 0) {
#pragma unroll
    for (int slice = 0; slice < Traits::kVSlices; ++slice)
      ptx::tma_store(&kp.o, smem + Traits::kOOffset + slice * Traits::kQSliceBytes + local0 * Traits::kRowBytes,
                     Traits::kSliceCols * slice, w.q_row0 + w.m0 + local0, w.head, w.map_batch);
    ptx::tma_store_commit();
    if constexpr (!Traits::kOwnOBuffer) {
      ptx::tma_store_wait_read();
      ptx::arrive(q_empty);
    }
  }
}

// A CTA whose O stores were left in flight (Traits::kOwnOBuffer) waits for them to read its shared memory before it
// exits.
template <class Traits>
__device__ __forceinline__ void finish_output_stores(int warp, int lane) {
  if constexpr (Traits::kOwnOBuffer)
    if (warp == 0 && lane == 0) ptx::tma_store_wait_read();
}

}  // namespace attnlab::cuda::sm90
