// Versions s9 and s10: a consumer warpgroup runs its persistent CTA's blocks as one chain. In s5 and s7 a block
// ends with its last P·V alone in a turn, then the epilogue, and the next block begins with its first Q·Kᵀ alone in
// another turn, waited for before its softmax: per block two turns in which the tensor cores have one GEMM's work
// from this warpgroup, and the once-per-block instructions run unhidden (docs/perf-notes-flash-sm90.md, "Where s7's
// time goes"). Here the next block's first Q·Kᵀ shares the turn of this block's last P·V:
//   s9 (s5's loop): both issued together, as inside a block; the next block's first softmax runs while the P·V is
//      still on the tensor cores, then this block's epilogue, then P of the next block becomes the operand;
//   s10 (s7's loop, P·V finished before the next Q·Kᵀ): the P·V waited for, the Q·Kᵀ issued, and this block's
//      epilogue runs while that Q·Kᵀ is on the tensor cores.
// The producer (kernel.cuh) claims each next block from the walk as the current one's loads begin and loads its Q
// into the other of two Q slots, so that the next block's Q and first K tile are in shared memory when the chain
// steps. A next block without keys, or the list's end, ends the chain: the block's last P·V then runs alone, as in
// s5.
#pragma once

#include <cstdint>

#include "cuda/flash_sm90/epilogue.cuh"
#include "cuda/flash_sm90/mainloop.cuh"
#include "cuda/flash_sm90/params.h"
#include "cuda/flash_sm90/pipeline.cuh"
#include "cuda/flash_sm90/ptx.cuh"
#include "cuda/flash_sm90/scheduler.cuh"
#include "cuda/flash_sm90/softmax.cuh"

namespace attnlab::cuda::sm90 {

// A condition every lane of the warp computes alike, made one that ptxas can see is (a warp vote). Without it, and
// with any branch placed after the walk's hand-over, ptxas compiled the main loop as possibly divergent: its wgmma
// descriptors in vector registers (an R2UR before each wgmma), its slot releases behind divergence checks
// (docs/perf-notes-flash-sm90.md, s9).
__device__ __forceinline__ bool warp_any(bool condition) { return __any_sync(0xffffffffu, condition); }

// The CTA's i-th block in s9 and s10: Q slots alternate, each slot's barriers completing once every other block.
__device__ __forceinline__ BlockSchedule chained_schedule(std::uint32_t step0, std::uint32_t i) {
  return BlockSchedule{step0, (i >> 1) & 1u, i == 0, false, int(i & 1u)};
}

// The chain's step from block `w` to block `next`, in two parts around `w`'s epilogue. chain_issue: `w`'s last P·V
// and `next`'s first Q·Kᵀ in one turn. s9 issues both together and runs `next`'s first softmax (into next_softmax)
// while the P·V is on the tensor cores; s10 waits for the P·V first (Traits::kPvBeforeQk) and leaves the Q·Kᵀ
// running under the epilogue.
template <class Traits>
__device__ __forceinline__ void chain_issue(const KernelParams& kp, const Pipeline<Traits>& pipe, std::uint32_t smem,
                                            const ConsumerSetup<Traits>& c, const BlockWork& w, std::uint32_t s0,
                                            const BlockWork& next, const BlockSchedule& next_at,
                                            const MmaTurns<Traits::kConsumers>& turns, int consumer, int warp,
                                            int lane, float (&s)[Traits::kSRegs], std::uint32_t (&a)[Traits::kPRegs],
                                            float (&o)[Traits::kORegs], OnlineSoftmax& next_softmax) {
  const std::uint32_t last = s0 + std::uint32_t(w.tiles() - 1);
  pipe.wait_v(last);
  clear_keys_past_length<Traits>(kp, w, v_tile<Traits>(smem, last), consumer);
  ptx::wait(pipe.q_full(next_at.q_slot), next_at.q_phase);
  pipe.wait_k(next_at.step0);
  const ConsumerSetup<Traits> next_c = consumer_setup<Traits>(kp, smem, next, consumer, warp, lane, next_at.q_slot);
  turns.begin(0);
  if constexpr (Traits::kPvBeforeQk) {
    c.mma.issue_pv(o, a, v_tile<Traits>(smem, last));
    ptx::wgmma_wait<0>();
    ptx::fence_registers(o);
    pipe.release_v(last, lane);
    next_c.mma.issue_qk(s, k_tile<Traits>(smem, next_at.step0));
    turns.end(0);
  } else {
    next_c.mma.issue_qk(s, k_tile<Traits>(smem, next_at.step0));
    c.mma.issue_pv(o, a, v_tile<Traits>(smem, last));
    turns.end(0);
    ptx::wgmma_wait<1>();  // the Q·Kᵀ is done; the P·V may not be
    next_softmax.init();
    first_probabilities<Traits>(pipe, next_c, next, next_at.step0, lane, s, next_softmax);
    ptx::wgmma_wait<0>();
    ptx::fence_registers(o);
    pipe.release_v(last, lane);
  }
}

// chain_finish, after `w`'s epilogue: O and the softmax state start over for `next`, whose first tile's
// probabilities become P's operand, as first_tile leaves them.
template <class Traits>
__device__ __forceinline__ void chain_finish(const KernelParams& kp, const Pipeline<Traits>& pipe,
                                             std::uint32_t smem, const BlockWork& next, const BlockSchedule& next_at,
                                             int consumer, int warp, int lane, float (&s)[Traits::kSRegs],
                                             std::uint32_t (&a)[Traits::kPRegs], float (&o)[Traits::kORegs],
                                             OnlineSoftmax& softmax, const OnlineSoftmax& next_softmax) {
  using Element = typename Traits::Element;
#pragma unroll
  for (int i = 0; i < Traits::kORegs; ++i) o[i] = 0.0f;
  if constexpr (Traits::kPvBeforeQk) {
    softmax.init();
    ptx::wgmma_wait<0>();
    const ConsumerSetup<Traits> next_c = consumer_setup<Traits>(kp, smem, next, consumer, warp, lane, next_at.q_slot);
    first_probabilities<Traits>(pipe, next_c, next, next_at.step0, lane, s, softmax);
  } else {
    softmax = next_softmax;
  }
  probabilities_to_operand<Element>(s, a);
}

// A consumer warpgroup's whole share of the CTA: every block it takes from the dynamic walk (scheduler.cuh), chained
// where the next block has keys. The turns form one sequence over the CTA (MmaTurns), ended by drain().
template <class Traits>
__device__ void consume_chained(const KernelParams& kp, const Pipeline<Traits>& pipe, std::uint32_t smem,
                                unsigned char* smem_generic, int consumer, int warp, int lane) {
  // The list's size is recomputed from the parameters (constant bank) where it is used, as in the producer's walk.
  const MmaTurns<Traits::kConsumers> turns{consumer, 1, /*first_block=*/true, /*last_block=*/false};
  turns.start();
  float s[Traits::kSRegs];
  std::uint32_t a[Traits::kPRegs];
  float o[Traits::kORegs];
  OnlineSoftmax softmax;
  auto work_of = [&](unsigned item) {
    return item < TileWalk::count(kp) ? block_work<Traits>(kp, flash::coord_of(kp.p, item, TileWalk::m_blocks(kp)))
                                      : BlockWork{};
  };
  // Each pass of the loop ends block `prev` (its last P·V and epilogue, chained to block `item` where that block has
  // keys), then runs `item` up to its own end, which the next pass does: every branch on the chain's state sits at
  // the pass's head, on a warp vote (warp_any), and the walk's hand-over is the pass's last step.
  std::uint32_t i = 0;            // the index of `item` in the CTA's walk
  std::uint32_t step0 = 0;        // the pipeline step of `item`'s first key tile
  std::uint32_t prev_step0 = 0;   // and of `prev`'s
  unsigned item = DynamicWalk::take(pipe, 0, lane), prev = 0;
  bool prev_due = false;          // whether `prev` ran its middle tiles and waits for its end
  OnlineSoftmax next_softmax;
  for (;;) {
    const bool has_item = item < TileWalk::count(kp);
    const BlockWork w = work_of(item);
    const int tiles = has_item ? w.tiles() : 0;
    const BlockSchedule at = chained_schedule(step0, i);
    if (warp_any(prev_due && tiles > 0)) {
      const BlockWork pw = work_of(prev);
      const ConsumerSetup<Traits> pc = consumer_setup<Traits>(kp, smem, pw, consumer, warp, lane, int((i - 1) & 1u));
      chain_issue<Traits>(kp, pipe, smem, pc, pw, prev_step0, w, at, turns, consumer, warp, lane, s, a, o,
                          next_softmax);
      store_output<Traits>(kp, smem, pipe.q_empty(), smem_generic, pw, consumer, warp, lane, o, softmax);
      chain_finish<Traits>(kp, pipe, smem, w, at, consumer, warp, lane, s, a, o, softmax, next_softmax);
    } else {
      if (warp_any(prev_due)) {
        const BlockWork pw = work_of(prev);
        const ConsumerSetup<Traits> pc =
            consumer_setup<Traits>(kp, smem, pw, consumer, warp, lane, int((i - 1) & 1u));
        last_pv<Traits>(kp, pipe, smem, pc, pw, prev_step0, turns, consumer, lane, a, o);
        store_output<Traits>(kp, smem, pipe.q_empty(), smem_generic, pw, consumer, warp, lane, o, softmax);
      }
      if (!warp_any(has_item)) break;
#pragma unroll
      for (int r = 0; r < Traits::kORegs; ++r) o[r] = 0.0f;
      softmax.init();
      if (warp_any(tiles == 0)) {
        // No key to see (consume_overlapped's empty block): one empty turn, O = 0 and LSE = −inf written out.
        turns.begin(0);
        turns.end(0);
        ptx::wait(pipe.q_full(at.q_slot), at.q_phase);
        pipe.release_q(at.q_slot, lane);
        store_output<Traits>(kp, smem, pipe.q_empty(), smem_generic, w, consumer, warp, lane, o, softmax);
      } else {
        first_tile<Traits>(pipe, smem, consumer_setup<Traits>(kp, smem, w, consumer, warp, lane, at.q_slot), w, at,
                           turns, lane, s, a, softmax);
      }
    }
    middle_tiles<Traits>(pipe, smem, consumer_setup<Traits>(kp, smem, w, consumer, warp, lane, at.q_slot), w, step0,
                         turns, lane, s, a, o, softmax);
    prev = item, prev_due = tiles > 0, prev_step0 = step0;  // an empty block has ended already
    step0 += std::uint32_t(tiles);
    item = DynamicWalk::take(pipe, ++i, lane);
  }
  MmaTurns<Traits::kConsumers>::drain(consumer);
  finish_output_stores<Traits>(warp, lane);
}

}  // namespace attnlab::cuda::sm90
