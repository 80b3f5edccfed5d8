// The K/V pipeline between the producer warp and the consumer warpgroups: kStages slots for K and as many for V,
// each with a "full" barrier (completed by the TMA bytes the producer announced) and an "empty" barrier (completed
// when every consumer warp has released the slot). K and V have separate barriers so Q·Kᵀ can start on a tile
// whose V is still in flight. Step i uses slot i % kStages in phase (i / kStages) & 1; steps count a CTA's key
// tiles over all its blocks (a persistent CTA's pipeline runs on from block to block), unsigned so that they wrap
// in step on both sides.
#pragma once

#include <cstdint>

#include "cuda/flash_sm90/ptx.cuh"

namespace attnlab::cuda::sm90 {

template <class Traits>
struct Pipeline {
  static constexpr int kStages = Traits::kStages;
  static constexpr std::uint32_t kConsumerWarps = 4 * Traits::kConsumers;
  std::uint32_t barriers;  // shared address of barrier 0 (Q full)

  __device__ std::uint32_t q_full() const { return barriers; }
  __device__ std::uint32_t k_full(int slot) const { return barriers + 8 * (1 + slot); }
  __device__ std::uint32_t k_empty(int slot) const { return barriers + 8 * (1 + kStages + slot); }
  __device__ std::uint32_t v_full(int slot) const { return barriers + 8 * (1 + 2 * kStages + slot); }
  __device__ std::uint32_t v_empty(int slot) const { return barriers + 8 * (1 + 3 * kStages + slot); }
  // Persistent CTAs (s3, s5, s7, s11, s15, s26, s29, s30, s31): Q's shared memory is free again once the consumer
  // warpgroups' output stores, staged in it, have been read (one arrival per consumer warpgroup), or, where O is staged
  // apart (Traits::kOwnOBuffer), once the block's last Q·Kᵀ has completed (one arrival per consumer warp, as for a K
  // slot).
  __device__ std::uint32_t q_empty() const { return barriers + 8 * (1 + 4 * kStages); }
  static constexpr std::uint32_t kQEmptyArrivals = Traits::kOwnOBuffer ? kConsumerWarps : Traits::kConsumers;
  // The dynamic walk (s5, s7, s11, s15, s26, s29, s30; scheduler.cuh): item slot i % 2 is full once the producer has
  // written the CTA's i-th block there, empty once every consumer warp has read it.
  __device__ std::uint32_t walk_full(int slot) const { return barriers + 8 * (2 + 4 * kStages + slot); }
  __device__ std::uint32_t walk_empty(int slot) const { return barriers + 8 * (4 + 4 * kStages + slot); }
  __device__ std::uint32_t walk_item(int slot) const { return barriers + 8 * Traits::kBarriers + 4 * slot; }

  // One thread initializes; the caller's __syncthreads then publishes the barriers.
  __device__ void init() const {
    ptx::barrier_init(q_full(), 1);
    for (int s = 0; s < kStages; ++s) {
      ptx::barrier_init(k_full(s), 1);
      ptx::barrier_init(v_full(s), 1);
      ptx::barrier_init(k_empty(s), kConsumerWarps);
      ptx::barrier_init(v_empty(s), kConsumerWarps);
    }
    ptx::barrier_init(q_empty(), kQEmptyArrivals);
    for (int s = 0; s < 2; ++s) {
      ptx::barrier_init(walk_full(s), 1);
      ptx::barrier_init(walk_empty(s), kConsumerWarps);
    }
    ptx::fence_barrier_init();
  }

  // The slot index is hidden from loop strength reduction, which would otherwise turn a barrier's address into a
  // running one with a negative immediate offset ([R + UR − 0x10] in the SASS): compute-sanitizer's racecheck does
  // not match such an arrive to its barrier (docs/perf-notes-flash-sm80.md, v6a; scripts/sass-check.sh flags it).
  static __device__ int slot(std::uint32_t step) { return ptx::opaque(int(step % kStages)); }
  static __device__ std::uint32_t phase(std::uint32_t step) { return (step / kStages) & 1u; }

  // Producer side: wait for a free slot (a fresh slot passes at once, see ptx::wait), then announce its bytes.
  __device__ void producer_acquire_k(std::uint32_t step) const { ptx::wait(k_empty(slot(step)), phase(step) ^ 1u); }
  __device__ void producer_acquire_v(std::uint32_t step) const { ptx::wait(v_empty(slot(step)), phase(step) ^ 1u); }

  // Consumer side: wait for a tile's bytes; release the slot once the MMAs reading it have completed. One lane per
  // warp arrives (the barrier counts warps), after the warp's own wgmma wait.
  __device__ void wait_k(std::uint32_t step) const { ptx::wait(k_full(slot(step)), phase(step)); }
  __device__ void wait_v(std::uint32_t step) const { ptx::wait(v_full(slot(step)), phase(step)); }
  __device__ void release_k(std::uint32_t step, int lane) const {
    __syncwarp();
    if (lane == 0) ptx::arrive(k_empty(slot(step)));
  }
  __device__ void release_v(std::uint32_t step, int lane) const {
    __syncwarp();
    if (lane == 0) ptx::arrive(v_empty(slot(step)));
  }
  // Q's rows were read by this warp's last Q·Kᵀ of the block (Traits::kOwnOBuffer only).
  __device__ void release_q(int lane) const {
    __syncwarp();
    if (lane == 0) ptx::arrive(q_empty());
  }
};

// Hardware (named) barriers of the consumer warpgroups, for every version: 1 + c is consumer c's own (the
// epilogue's, 128 threads), kTurnBarrier0 + c its turn (MmaTurns), kKeyPaddingBarrier all consumers'
// (key_padding.cuh). 0 is __syncthreads'. Numbered for up to three consumers.
constexpr int kMaxConsumers = 3;
__device__ __forceinline__ int own_barrier(int consumer) { return 1 + consumer; }
constexpr int kTurnBarrier0 = 1 + kMaxConsumers;
constexpr int kKeyPaddingBarrier = 1 + 2 * kMaxConsumers;

// Ping-pong between the consumer warpgroups (every version), a ring of two (three in s6 and s11): each issues its GEMMs
// of a turn only after the one before it has issued its own, consumer c waiting on its turn barrier and arriving on
// c + 1's (the last consumer on 0's), 256 threads each: the waiting warpgroup and the arriving one. Consumer 0
// goes first: the last consumer's first arrival, as if it had ended turn −1, starts it. All take `count` turns per
// block; a persistent CTA's blocks continue one sequence of turns, so only its first block starts it, and only the
// last turn of its last block (`last_block`) has no successor: the last consumer then arrives nowhere. A CTA that
// learns only after a block that it was its last (the dynamic walk of s5, s7, s11, s15, s26, s29, s30 and s31) runs every
// block with last_block false and ends with drain(): consumer 0 takes the last consumer's final arrival.
template <int kConsumers>
struct MmaTurns {
  static_assert(kConsumers >= 2 && kConsumers <= kMaxConsumers);
  int consumer;
  int count;
  bool first_block = true, last_block = true;
  static __device__ int barrier(int c) { return kTurnBarrier0 + c; }
  __device__ void start() const {
    if (first_block && consumer == kConsumers - 1) ptx::named_barrier_arrive(barrier(0), 256);
  }
  __device__ void begin(int) const { ptx::named_barrier_sync(barrier(consumer), 256); }
  __device__ void end(int turn) const {
    if (last_block && consumer == kConsumers - 1 && turn == count - 1) return;
    ptx::named_barrier_arrive(barrier(consumer + 1 < kConsumers ? consumer + 1 : 0), 256);
  }
  static __device__ void drain(int consumer) {
    if (consumer == 0) ptx::named_barrier_sync(barrier(0), 256);
  }
};

}  // namespace attnlab::cuda::sm90
