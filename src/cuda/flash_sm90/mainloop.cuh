// The main loop, in its two roles. The producer (one thread of warpgroup 0) issues every TMA load of the block:
// Q once, then K and V of each key tile into the next free slot. Each consumer warpgroup computes S = Q·Kᵀ for its
// 64 query rows with wgmma from shared memory, runs the online softmax in registers, and accumulates O += P·V with P
// as the register operand. Tiles inside every row's visible range skip the per-element mask (mask_tile below).
#pragma once

#include <cstdint>

#include "core/mask.h"
#include "cuda/flash_sm90/block_work.h"
#include "cuda/flash_sm90/gmma.cuh"
#include "cuda/flash_sm90/key_padding.cuh"
#include "cuda/flash_sm90/params.h"
#include "cuda/flash_sm90/pipeline.cuh"
#include "cuda/flash_sm90/ptx.cuh"
#include "cuda/flash_sm90/softmax.cuh"

namespace attnlab::cuda::sm90 {

// The producer's loads for one block: K of its first key tile, then Q once Q's shared memory is free (a persistent
// CTA's previous block staged its output there; a fresh barrier passes at once), then V of that tile and both of
// every further tile, each into the next free slot. With Traits::kKeysAheadOfValues (s15) V of each tile
// follows K of the next (FlashAttention-3's order): the loads wait for their slots in program order, and K's slot
// frees a P·V earlier than V's.
template <class Traits>
__device__ void produce(const KernelParams& kp, const Pipeline<Traits>& pipe, std::uint32_t smem,
                        const BlockWork& w, const BlockSchedule& at) {
  // The tensor maps were prefetched once per CTA (kernel.cuh).
  auto load_k = [&](int j, std::uint32_t step) {
    const int slot = Pipeline<Traits>::slot(step);
    pipe.producer_acquire_k(step);
    ptx::arrive_expect_bytes(pipe.k_full(slot), Traits::kKBytes);
#pragma unroll
    for (int h = 0; h < Traits::kQKSlices; ++h)
      ptx::tma_load(smem + Traits::kKOffset + slot * Traits::kKBytes + h * Traits::kKVSliceBytes, &kp.k,
                    pipe.k_full(slot), Traits::kSliceCols * h, w.kv_row0 + j * Traits::kBlockN, w.kv_head, w.map_batch);
  };
  auto load_v = [&](int j, std::uint32_t step) {
    const int slot = Pipeline<Traits>::slot(step);
    pipe.producer_acquire_v(step);
    ptx::arrive_expect_bytes(pipe.v_full(slot), Traits::kVBytes);
#pragma unroll
    for (int h = 0; h < Traits::kVSlices; ++h)
      ptx::tma_load(smem + Traits::kVOffset + slot * Traits::kVBytes + h * Traits::kKVSliceBytes, &kp.v,
                    pipe.v_full(slot), Traits::kSliceCols * h, w.kv_row0 + j * Traits::kBlockN, w.kv_head, w.map_batch);
  };
  const int tiles = w.tiles();
  if (tiles > 0) load_k(w.tile_begin, at.step0);
  ptx::wait(pipe.q_empty(), at.q_phase ^ 1u);
  // The block's rows (pack_rows: Traits::kBlockM), or the packed heads' rows (query_packing.h), of each column
  // slice.
  ptx::arrive_expect_bytes(pipe.q_full(),
                           std::uint32_t(kp.pack_heads * kp.pack_rows) * Traits::kRowBytes * Traits::kQKSlices);
#pragma unroll
  for (int h = 0; h < Traits::kQKSlices; ++h)
    ptx::tma_load(smem + Traits::kQOffset + h * Traits::kQSliceBytes, &kp.q, pipe.q_full(), Traits::kSliceCols * h,
                  w.q_row0 + w.m0, w.head, w.map_batch);
  // V's tile trails K's by `lag`: 0, or 1 in s15 (Traits::kKeysAheadOfValues).
  constexpr int lag = Traits::kKeysAheadOfValues ? 1 : 0;
  if (lag == 0 && tiles > 0) load_v(w.tile_begin, at.step0);
  // One tile per iteration: unrolled, the loop's loads held more registers than s11's 32-register producer has, and
  // ptxas spilled them (traits.h, kProducerRegisters).
#pragma unroll 1
  for (int i = 1; i < tiles; ++i) {
    load_k(w.tile_begin + i, at.step0 + std::uint32_t(i));
    load_v(w.tile_begin + i - lag, at.step0 + std::uint32_t(i - lag));
  }
  if (lag == 1 && tiles > 0) load_v(w.tile_begin + tiles - 1, at.step0 + std::uint32_t(tiles - 1));
}

// A consumer warpgroup's two GEMMs as wgmma chains, each issued and committed as one group. Q (A, K-major): this
// warpgroup's 64 rows; head-dim step k reads columns 16k … 16k + 15, which lie in column slice k / kStepsPerRow
// at byte 32·(k % kStepsPerRow) of each swizzled row (4 steps per 128-byte row, 2 per 64-byte row). K (B, K-major)
// likewise over its kBlockN rows. V (B, MN-major): key step k reads rows 16k … 16k + 15 (16 rows further per
// step), its column slices kKVSliceBytes apart (the leading offset), 8-row groups 8 rows apart (the stride
// offset).
// s30 (Traits::kQFromRegisters): this warpgroup's Q rows as Q·Kᵀ's A operand in registers, wgmma's A layout (as P's
// for P·V: probabilities_to_operand): head-dim step k in r[4k … 4k + 3]. Unused, and so never allocated, elsewhere.
template <class Traits>
struct QOperand {
  std::uint32_t r[Traits::kHeadQK / 4];
};

template <class Traits>
struct ConsumerMma {
  using Element = typename Traits::Element;
  std::uint32_t q_base;  // this warpgroup's first Q row

  static constexpr int kRowBytes = Traits::kRowBytes;
  static constexpr int kStepsPerRow = kRowBytes / 32;  // 16-element K steps in one swizzled row
  static constexpr std::uint32_t kGroupBytes = 8 * kRowBytes;  // one 8-row swizzle pattern

  // s30: Q's fragments from shared memory, once Q has landed. Warp w's rows are 16w … 16w + 15 of the warpgroup's
  // 64; for head-dim step k, ldmatrix's four 8 × 8 matrices are (rows 0–7, 8–15) × (columns 16k … +7, 16k + 8 … +15),
  // lane l addressing row l % 8 of matrix l / 8, its 16-byte chunk XORed with the row's index in its 8-row pattern
  // (the 128-byte swizzle: epilogue.cuh, swizzled_offset). 128-byte rows only (head dim 128).
  __device__ void load_q(QOperand<Traits>& q, int warp, int lane) const {
    static_assert(kRowBytes == 128, "Q from registers at 128-byte rows (head dim 128)");
    const int row = 16 * warp + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int k = 0; k < Traits::kHeadQK / 16; ++k) {
      const int slice = k / kStepsPerRow, chunk = 2 * (k % kStepsPerRow) + (lane >> 4);
      std::uint32_t (&rk)[4] = *reinterpret_cast<std::uint32_t(*)[4]>(&q.r[4 * k]);
      ptx::ldmatrix_x4(q_base + slice * Traits::kQSliceBytes + row * kRowBytes + ((chunk ^ (row & 7)) << 4), rk);
    }
  }

  __device__ void issue_qk(float (&s)[Traits::kSRegs], std::uint32_t k_tile, const QOperand<Traits>& q) const {
    ptx::wgmma_fence();
#pragma unroll
    for (int k = 0; k < Traits::kHeadQK / 16; ++k) {
      const int slice = k / kStepsPerRow, within = 32 * (k % kStepsPerRow);
      const std::uint64_t k_desc =
          ptx::make_descriptor<kRowBytes>(k_tile + slice * Traits::kKVSliceBytes + within, 16, kGroupBytes);
      if constexpr (Traits::kQFromRegisters) {
        const std::uint32_t (&qk)[4] = *reinterpret_cast<const std::uint32_t(*)[4]>(&q.r[4 * k]);
        gmma::mma_rs<Element, Traits::kBlockN, true>(s, qk, k_desc, k > 0);
      } else {
        gmma::mma_ss<Element, Traits::kBlockN>(
            s, ptx::make_descriptor<kRowBytes>(q_base + slice * Traits::kQSliceBytes + within, 16, kGroupBytes),
            k_desc, k > 0);
      }
    }
    ptx::wgmma_commit();
  }
  __device__ void issue_pv(float (&o)[Traits::kORegs], std::uint32_t (&a)[Traits::kPRegs],
                           std::uint32_t v_tile) const {
    ptx::fence_registers(a);
    ptx::fence_registers(o);
    ptx::wgmma_fence();
#pragma unroll
    for (int k = 0; k < Traits::kBlockN / 16; ++k) {
      const std::uint32_t (&ak)[4] = *reinterpret_cast<const std::uint32_t(*)[4]>(&a[4 * k]);
      gmma::mma_rs<Element, Traits::kHeadV>(
          o, ak, ptx::make_descriptor<kRowBytes>(v_tile + 2 * kGroupBytes * k, Traits::kKVSliceBytes, kGroupBytes),
          true);
    }
    ptx::wgmma_commit();
  }
};

// What a consumer needs per block: its rows' visible keys, its MMAs, the block's work.
template <class Traits>
struct ConsumerSetup {
  KeySpan visible[2];  // the two rows this thread owns
  ConsumerMma<Traits> mma;
  float scale_log2;
  // Softcap c > 0 (s1 only, flash_sm90_path.cpp): s = c · tanh(scale · q·k / c), taken as scale / c and c · log2 e.
  float scale_over_cap, cap_log2;
};

template <class Traits>
__device__ ConsumerSetup<Traits> consumer_setup(const KernelParams& kp, std::uint32_t smem, const BlockWork& w,
                                                int consumer, int warp, int lane) {
  const flash::FlashParams& p = kp.p;
  ConsumerSetup<Traits> c;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // The row's query position: with packed query heads (query_packing.h) rows are head-major, and rows past the
    // packed heads' (kBlockM / heads · heads of them) see no key.
    const int local = consumer * Traits::kRowsPerConsumer + 16 * warp + (lane >> 2) + 8 * h;
    if (local < kp.pack_heads * kp.pack_rows) {
      const core::KeyRange r = core::visible_keys(p.mask, w.m0 + local % kp.pack_rows, w.q_len, w.kv_len);
      c.visible[h] = {int(r.begin), int(r.end)};
    } else {
      c.visible[h] = {0, 0};
    }
  }
  c.mma.q_base = smem + Traits::kQOffset + consumer * Traits::kRowsPerConsumer * Traits::kRowBytes;
  c.scale_log2 = p.scale * 1.4426950408889634f;
  c.scale_over_cap = p.softcap > 0.0f ? p.scale / p.softcap : 0.0f;
  c.cap_log2 = p.softcap * 1.4426950408889634f;
  return c;
}

template <class Traits>
__device__ __forceinline__ std::uint32_t k_tile(std::uint32_t smem, std::uint32_t step) {
  return smem + Traits::kKOffset + Pipeline<Traits>::slot(step) * Traits::kKBytes;
}
template <class Traits>
__device__ __forceinline__ std::uint32_t v_tile(std::uint32_t smem, std::uint32_t step) {
  return smem + Traits::kVOffset + Pipeline<Traits>::slot(step) * Traits::kVBytes;
}

// Scale (and cap) and mask a finished score tile: per element only where the tile is not inside every row's range.
template <class Traits>
__device__ __forceinline__ void prepare_scores(float (&s)[Traits::kSRegs], const ConsumerSetup<Traits>& c,
                                               const BlockWork& w, int key0, int lane) {
  if (c.cap_log2 > 0.0f) {  // uniform: the call's softcap
    OnlineSoftmax::cap_and_mask(s, c.scale_over_cap, c.cap_log2, c.visible, key0, lane);
    return;
  }
  if (key0 < w.full_begin || key0 + Traits::kBlockN > w.full_end)
    OnlineSoftmax::scale_and_mask<true>(s, c.scale_log2, c.visible, key0, lane);
  else
    OnlineSoftmax::scale_and_mask<false>(s, c.scale_log2, c.visible, key0, lane);
}

// s2 and later: mask only (raw scores); fold_raw applies the scale.
template <class Traits>
__device__ __forceinline__ void mask_scores(float (&s)[Traits::kSRegs], const ConsumerSetup<Traits>& c,
                                            const BlockWork& w, int key0, int lane) {
  if (key0 < w.full_begin || key0 + Traits::kBlockN > w.full_end) OnlineSoftmax::mask_raw(s, c.visible, key0, lane);
}

// A finished score tile into probabilities, by version: s1 scales every score before the max (any scale), s2 and
// later keep raw scores and scale inside the exponent's FFMA (scale > 0).
template <class Traits>
__device__ __forceinline__ void scores_to_probabilities(float (&s)[Traits::kSRegs], const ConsumerSetup<Traits>& c,
                                                        const BlockWork& w, int key0, int lane,
                                                        OnlineSoftmax& softmax, float (&correction)[2]) {
  if constexpr (Traits::kVersion >= 2) {
    mask_scores<Traits>(s, c, w, key0, lane);
    softmax.fold_raw(s, c.scale_log2, correction);
  } else {
    prepare_scores<Traits>(s, c, w, key0, lane);
    softmax.fold(s, correction);
  }
}

// s26, tiles after a block's first: the probabilities against the row maxima as they stand, without taking the
// tile's maxima (OnlineSoftmax::fold_raw_lazy), in warps whose rows all have one (the others fold exactly). The
// reference maximum of a row may then lag its true maximum, which the probabilities' sums absorb, as long as none
// passes 2^8; where one does in any warp (or is NaN or infinite), the warpgroup (wgmma is the warpgroup's) computes
// Q·Kᵀ of the tile again — K's slot and Q are still held — and folds it exactly, from the state before the tile.
// Returns whether O must be rescaled by `correction` (not after a lazy fold: its correction is 1).
template <class Traits>
__device__ __forceinline__ bool lazy_probabilities(float (&s)[Traits::kSRegs], const ConsumerSetup<Traits>& c,
                                                   const BlockWork& w, int key0, int lane, int consumer,
                                                   std::uint32_t k_tile, const QOperand<Traits>& q,
                                                   OnlineSoftmax& softmax, float (&correction)[2]) {
  const OnlineSoftmax before = softmax;
  mask_scores<Traits>(s, c, w, key0, lane);
  const bool lazy =
      __all_sync(0xffffffffu, softmax.row_max[0] != -INFINITY && softmax.row_max[1] != -INFINITY);
  bool bounded = true;
  if (lazy) {
    bounded = softmax.fold_raw_lazy(s, c.scale_log2);
    correction[0] = correction[1] = 1.0f;
  } else {
    softmax.fold_raw(s, c.scale_log2, correction);
  }
  if (ptx::named_barrier_all(own_barrier(consumer), 128, bounded)) return !lazy;
  softmax = before;
  c.mma.issue_qk(s, k_tile, q);
  ptx::wgmma_wait<0>();
  ptx::fence_registers(s);
  mask_scores<Traits>(s, c, w, key0, lane);
  softmax.fold_raw(s, c.scale_log2, correction);
  return true;
}

// Every version (FlashAttention-3's two overlaps; from s2 on with the raw-score softmax). Inside the warpgroup,
// tile j + 1's Q·Kᵀ is issued together with tile j's P·V, so the softmax of tile j + 1 runs while P·V(j) is still
// on the tensor cores; O is rescaled only after that P·V completes (s7 waits for P·V(j) before issuing the Q·Kᵀ:
// Traits::kPvBeforeQk). Between the consumer warpgroups, MmaTurns makes them take turns issuing their GEMMs, so
// that one's softmax runs under another's MMAs (ping-pong) instead of all competing at once.
template <class Traits>
__device__ void consume_overlapped(const KernelParams& kp, const Pipeline<Traits>& pipe, std::uint32_t smem,
                                   const BlockWork& w, const BlockSchedule& at, int consumer, int warp, int lane,
                                   float (&o)[Traits::kORegs], OnlineSoftmax& softmax) {
  using Element = typename Traits::Element;
  const ConsumerSetup<Traits> c = consumer_setup<Traits>(kp, smem, w, consumer, warp, lane);
  const int tiles = w.tiles();
  const MmaTurns<Traits::kConsumers> turns{consumer, tiles > 0 ? tiles + 1 : 1, at.first_block, at.last_block};
  turns.start();
  if (tiles == 0) {
    // No key to see: one empty turn keeps the warpgroups' sequence of turns in step (a persistent CTA's next
    // block continues it), and O's staging overwrites Q, so the load must have landed.
    turns.begin(0);
    turns.end(0);
    ptx::wait(pipe.q_full(), at.q_phase);
    if constexpr (Traits::kOwnOBuffer) pipe.release_q(lane);
    return;
  }
  ptx::wait(pipe.q_full(), at.q_phase);
  const std::uint32_t s0 = at.step0;
  QOperand<Traits> q;
  if constexpr (Traits::kQFromRegisters) c.mma.load_q(q, warp, lane);

  float s[Traits::kSRegs];
  std::uint32_t a[Traits::kPRegs];
  pipe.wait_k(s0);
  turns.begin(0);
  c.mma.issue_qk(s, k_tile<Traits>(smem, s0), q);
  turns.end(0);
  ptx::wgmma_wait<0>();
  ptx::fence_registers(s);
  pipe.release_k(s0, lane);
  if constexpr (Traits::kOwnOBuffer)
    if (tiles == 1) pipe.release_q(lane);  // the block's last Q·Kᵀ has read Q
  float correction[2];  // O is still 0: nothing to rescale after the first tile
  scores_to_probabilities<Traits>(s, c, w, w.tile_begin * Traits::kBlockN, lane, softmax, correction);
  probabilities_to_operand<Element>(s, a);

  for (int step = 1; step < tiles; ++step) {
    const std::uint32_t now = s0 + std::uint32_t(step), before = now - 1u;
    pipe.wait_k(now);
    if constexpr (!Traits::kKeysAheadOfValues) pipe.wait_v(before);
    turns.begin(step);
    if constexpr (Traits::kPvBeforeQk) {
      // P·V(step − 1) first and waited for within the turn: P's registers are free before Q·Kᵀ(step) writes S
      // (traits.h). The tensor cores stay busy with it meanwhile; this warpgroup's softmax then runs under the
      // other warpgroup's turn.
      c.mma.issue_pv(o, a, v_tile<Traits>(smem, before));
      ptx::wgmma_wait<0>();
      ptx::fence_registers(o);
      pipe.release_v(before, lane);
      c.mma.issue_qk(s, k_tile<Traits>(smem, now), q);
      turns.end(step);
      ptx::wgmma_wait<0>();
    } else {
      c.mma.issue_qk(s, k_tile<Traits>(smem, now), q);
      if constexpr (Traits::kRescaleBeforePv) OnlineSoftmax::rescale(o, correction);  // the tile before's
      // s15: V waited for here, under the Q·Kᵀ just issued; the turn is held meanwhile, but the tensor cores
      // are busy with this warpgroup's Q·Kᵀ, which the other's GEMMs would queue behind.
      if constexpr (Traits::kKeysAheadOfValues) pipe.wait_v(before);
      c.mma.issue_pv(o, a, v_tile<Traits>(smem, before));
      turns.end(step);
      ptx::wgmma_wait<1>();  // groups complete in order: Q·Kᵀ(step) is done, P·V(step − 1) may not be
    }
    ptx::fence_registers(s);
    const int key0 = (w.tile_begin + step) * Traits::kBlockN;
    bool rescale_o = true;
    if constexpr (Traits::kLazyMax)  // K and Q stay held until the tile's probabilities are known to stand
      rescale_o = lazy_probabilities<Traits>(s, c, w, key0, lane, consumer, k_tile<Traits>(smem, now), q, softmax,
                                             correction);
    pipe.release_k(now, lane);
    if constexpr (Traits::kOwnOBuffer)
      if (step == tiles - 1) pipe.release_q(lane);
    if constexpr (!Traits::kLazyMax)
      scores_to_probabilities<Traits>(s, c, w, key0, lane, softmax, correction);
    if constexpr (!Traits::kPvBeforeQk) {
      ptx::wgmma_wait<0>();
      ptx::fence_registers(o);
      pipe.release_v(before, lane);
    }
    if constexpr (!Traits::kRescaleBeforePv)
      if (rescale_o) OnlineSoftmax::rescale(o, correction);
    probabilities_to_operand<Element>(s, a);
  }

  const std::uint32_t last = s0 + std::uint32_t(tiles - 1);
  pipe.wait_v(last);
  clear_keys_past_length<Traits>(kp, w, v_tile<Traits>(smem, last), consumer);
  if constexpr (Traits::kRescaleBeforePv) OnlineSoftmax::rescale(o, correction);
  turns.begin(tiles);
  c.mma.issue_pv(o, a, v_tile<Traits>(smem, last));
  turns.end(tiles);
  ptx::wgmma_wait<0>();
  ptx::fence_registers(o);
  pipe.release_v(last, lane);
}

}  // namespace attnlab::cuda::sm90
