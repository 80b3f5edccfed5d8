// How K/V tiles move through the kStages shared-memory slots, and when a warp may read one. Two schemes:
//   block barrier (default): at the top of every step, wait for this thread's copies and __syncthreads — every
//     warp then sees the tile, and the slot the next load overwrites is free; warps run in lockstep.
//   mbarriers: each slot has a "full" barrier (every thread arrives when its copies of the tile have landed) and an
//     "empty" one (every thread arrives when it has read the tile, so that each thread's reads are ordered before
//     the refill by its own release, not through a warp barrier and one lane's arrival). A warp waits only for the
//     tile it needs, and before refilling a slot only for the warps still reading it, so warps drift apart by up
//     to a tile and one warp's softmax can overlap another's MMAs. Loads are issued at the end of a step, so
//     3 stages keep a tile of prefetch.
// The kernel calls: init, then issue() for the first kStages − 1 tiles, then per step acquire(), release() of
// the previous tile, [issue() at the start], compute, [issue() at the end] — kIssueAtStart says which. A tile is
// released one wait later than its last read so that the reads' results have been consumed before the arrival.
#pragma once

#include <cstdint>

#include "cuda/flash/ptx.cuh"

namespace attnlab::cuda::flash {

template <class Traits, bool kMbarriers = Traits::kMbarriers>
struct TilePipeline;

template <class Traits>
struct TilePipeline<Traits, false> {
  static constexpr bool kIssueAtStart = true;
  __device__ __forceinline__ void init(std::uint32_t, int) {}
  __device__ __forceinline__ void before_issue(int) {}
  __device__ __forceinline__ void after_issue(int) { ptx::cp_async_commit(); }
  // An empty group past the last tile keeps the wait counts uniform.
  __device__ __forceinline__ void nothing_to_issue() { ptx::cp_async_commit(); }
  __device__ __forceinline__ void acquire(int) {
    ptx::cp_async_wait<Traits::kStages - 2>();
    __syncthreads();  // the tile is in shared memory for everyone, and the previous tile's slot is free
  }
  __device__ __forceinline__ void release(int) {}
};

template <class Traits>
struct TilePipeline<Traits, true> {
  static constexpr bool kIssueAtStart = false;
  static constexpr int kStages = Traits::kStages;
  std::uint32_t full = 0, empty = 0;  // kStages barriers each, 8 bytes apart

  __device__ __forceinline__ void init(std::uint32_t barriers, int thread) {
    full = barriers;
    empty = barriers + 8 * kStages;
    if (thread == 0)
      for (int s = 0; s < kStages; ++s) {
        ptx::mbarrier_init(full + 8 * s, Traits::kThreads);
        ptx::mbarrier_init(empty + 8 * s, Traits::kThreads);
      }
    __syncthreads();
  }
  // Tile t (counted from the block's first) reuses slot t % kStages once every thread has read tile t − kStages.
  __device__ __forceinline__ void before_issue(int t) {
    if (t >= kStages) ptx::mbarrier_wait(slot_barrier(empty, t), ((t / kStages) - 1) & 1);
  }
  __device__ __forceinline__ void after_issue(int t) { ptx::mbarrier_cp_async_arrive(slot_barrier(full, t)); }
  __device__ __forceinline__ void nothing_to_issue() {}
  __device__ __forceinline__ void acquire(int t) { ptx::mbarrier_wait(slot_barrier(full, t), (t / kStages) & 1); }
  __device__ __forceinline__ void release(int t) { ptx::mbarrier_arrive(slot_barrier(empty, t)); }

  // The barrier of tile t's slot. The slot index is hidden from the compiler's loop strength reduction, which
  // otherwise turns full + 8·(t mod kStages) into a running address with a negative immediate offset
  // ([UR − 0x18] in the SASS). compute-sanitizer's racecheck does not match such an arrive to its barrier and
  // reports every copy issued in the main loop as racing with the tile's readers; with [base + slot·8 + positive
  // offset], as in the prologue, it follows the barrier (docs/perf-notes-flash-sm80.md, v6a).
  __device__ __forceinline__ static std::uint32_t slot_barrier(std::uint32_t first, int t) {
    int slot = t % kStages;
    asm volatile("" : "+r"(slot));
    return first + 8 * slot;
  }
};

}  // namespace attnlab::cuda::flash
