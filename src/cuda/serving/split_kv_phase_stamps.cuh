// Where a split-KV block spends its time: the kernels' phase stamps. The library's kernels are instantiated with
// NoPhaseStamps, whose marks compile to nothing (the SASS is the same as without them); the diagnostic program
// tests/split_kv_phases.cu instantiates them with PhaseStamps, which has thread 0 of every block write the GPU's
// nanosecond clock (%globaltimer, comparable across SMs) and its SM's cycle counter (clock64) at each mark, so that
// a decode step's wave can be laid out block by block: when each block started, how long its lengths' reads, its
// first tile's latency, its loop and its epilogue took, and how the combine followed (docs/perf-notes-serving.md, "Batch 1,
// S = 32k"). A plain store per mark, issued and not waited for. Each mark is thread 0's view: when it got there
// (the loop's end for its warp, the stores it issued), which the block's barriers tie to the others' at the first
// tile and in the epilogue.
#pragma once

#include <cstdint>

#include "cuda/serving/split_kv_params.h"

namespace attnlab::cuda::serving {

// One block's record in SplitKvParams::phase_stamps: kMarks nanosecond stamps, then kMarks cycle stamps, then the
// SM, the block's key tiles plus one (the combine: the splits it merged plus one; 0: a block with no rows, which
// returns after its length reads; plus one so that no written value is all ones, a reader's "not written") and its
// index. The
// split kernel's blocks come first (blockIdx.x + gridDim.x · (blockIdx.y + gridDim.y · blockIdx.z)), the combine's
// after them (SplitKvParams::combine_stamps_offset records on).
struct PhaseStampLayout {
  static constexpr int kMarks = 6;
  static constexpr int kNs = 0, kCycles = kMarks, kSm = 2 * kMarks, kTiles = kSm + 1, kBlock = kSm + 2;
  static constexpr int kSlots = 16;
};

// The split kernel's marks: entry (before griddepcontrol.wait), after the wait, after the sequence's lengths and
// key range are known, when the first key tile has landed, after the last tile's P·V, after the epilogue's stores.
// The combine's: entry, after the wait, after its stores (marks 0, 1 and 5; 2–4 stay 0).
enum class Phase : int { entry = 0, waited = 1, lengths = 2, first_tile = 3, last_tile = 4, stored = 5 };

struct NoPhaseStamps {
  __device__ __forceinline__ explicit NoPhaseStamps(const SplitKvParams&, std::int64_t) {}
  __device__ __forceinline__ void mark(Phase) const {}
  __device__ __forceinline__ void finish(int) const {}
};

class PhaseStamps {
 public:
  // `first_record`: where this kernel's records start (0 for the split kernel, combine_stamps_offset for the
  // combine).
  __device__ __forceinline__ PhaseStamps(const SplitKvParams& p, std::int64_t first_record) {
    const std::int64_t block =
        blockIdx.x + std::int64_t(gridDim.x) * (blockIdx.y + std::int64_t(gridDim.y) * blockIdx.z);
    record_ = threadIdx.x == 0 && p.phase_stamps != nullptr
                  ? p.phase_stamps + (first_record + block) * PhaseStampLayout::kSlots
                  : nullptr;
    if (record_ != nullptr) record_[PhaseStampLayout::kBlock] = std::uint64_t(block);
  }

  __device__ __forceinline__ void mark(Phase phase) const {
    if (record_ == nullptr) return;
    std::uint64_t ns, cycles;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(cycles));
    record_[PhaseStampLayout::kNs + int(phase)] = ns;
    record_[PhaseStampLayout::kCycles + int(phase)] = cycles;
  }

  // The SM the block ran on and its key tiles (−1 for a block without rows).
  __device__ __forceinline__ void finish(int tiles) const {
    if (record_ == nullptr) return;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    record_[PhaseStampLayout::kSm] = sm;
    record_[PhaseStampLayout::kTiles] = std::uint64_t(std::int64_t(tiles) + 1);
  }

 private:
  std::uint64_t* record_;
};

}  // namespace attnlab::cuda::serving
