// The split-KV attention kernel for packed and paged batches (docs/serving.md): the serving calls' GPU kernel on
// every GPU from sm_80, built from mma.sync and cp.async like the flash-sm80 family, because what decides its
// speed is not the tensor cores but how many key bytes are in flight: decode reads each key once for a handful
// of query rows.
//
// One block per (query tile, split, KV head, sequence). The query tile holds kRows (token, query head) pairs of
// one KV head — every query head of the KV head's group side by side (GQA packing), so that decode's one token
// per sequence still fills 16-row MMAs with 4–8 heads instead of one. The block's visible keys (its rows' union,
// core/mask.h's rule) are cut into `splits` equal runs of 64-key tiles, so that a batch too small to fill the GPU
// (decode at batch 1) still gets blocks on every SM; the combine kernel then merges the splits, or on sm_90, where
// the plan says so, the blocks of one query tile's splits form a thread-block cluster and merge them there
// (split_kv_cluster.cuh).
//
//   load Q and the first kStages − 1 key tiles (cp.async, split_kv_load.cuh: packed rows or pages)
//   for each tile of the run: wait for it; issue tile + kStages − 1 into the slot the previous tile left (a paged
//     tile's key rows looked up two steps before);
//     S = Q·Kᵀ for the warp's rows and keys (split_kv_mma.cuh), softcap and mask where needed (split_kv_score.cuh),
//     online softmax (cuda/flash/softmax.cuh), O += P·V
//   merge the warps' key groups; write O and LSE, or the split's partial (split_kv_epilogue.cuh), or merge the
//     cluster's splits (split_kv_cluster.cuh)
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/mask.h"
#include "cuda/flash/mask.cuh"
#include "cuda/flash/ptx.cuh"
#include "cuda/flash/softmax.cuh"
#include "cuda/serving/split_kv_cluster.cuh"
#include "cuda/serving/split_kv_epilogue.cuh"
#include "cuda/serving/split_kv_load.cuh"
#include "cuda/serving/split_kv_mma.cuh"
#include "cuda/serving/split_kv_params.h"
#include "cuda/serving/split_kv_phase_stamps.cuh"
#include "cuda/serving/split_kv_score.cuh"

namespace attnlab::cuda::serving {

// Stamps: NoPhaseStamps in the library, PhaseStamps in the diagnostic program (split_kv_phase_stamps.cuh).
// kClusterMerge: launched in clusters of p.splits blocks that merge their splits (split_kv_cluster.cuh).
template <class Traits, class Stamps = NoPhaseStamps, bool kClusterMerge = false>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kBlocksPerSm)
    split_kv_kernel(const __grid_constant__ SplitKvParams p) {
  using Load = SplitKvLoad<Traits>;
  using Mma = SplitKvMma<Traits>;
  using Epilogue = SplitKvEpilogue<Traits>;
  using Scores = SplitKvScores<Traits::kNFrags>;
  constexpr int kBlockN = Traits::kBlockN, kStages = Traits::kStages;
  extern __shared__ __align__(128) unsigned char smem[];
  const Stamps stamps(p, 0);
  stamps.mark(Phase::entry);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched ahead of the previous kernel's end (split_kv_launch.cuh): wait until it has finished and its writes
  // are visible before touching global memory — it may have written K and V (append_kv) or still read the
  // workspace's partial results (the previous step's combine). Then the combine may be launched; it waits on the
  // device for this grid to finish (split_kv_combine.cuh).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  stamps.mark(Phase::waited);
  const int thread = threadIdx.x, lane = thread & 31, warp = thread >> 5;
  const int q_tile_index = blockIdx.x / p.splits, split = blockIdx.x % p.splits;
  const int kv_head = blockIdx.y, b = blockIdx.z;
  const Sequence s = Sequence::read(p, b);
  const int rows = s.q_len * p.group;
  const int row0 = q_tile_index * Traits::kRows;
  if (row0 >= rows) {  // a cluster's blocks share the query tile: they leave together, before any cluster barrier
    stamps.mark(Phase::lengths);
    stamps.finish(-1);
    return;
  }

  // The keys any row of the block sees, then this split's run of their tiles (possibly none: it still writes
  // its rows, as a split that saw nothing, for the combine).
  const int last_row = min(row0 + Traits::kRows, rows) - 1;
  const flash::BlockKeys keys = flash::block_keys(p.mask, row0 / p.group, last_row / p.group, s.q_len, s.kv_len);
  const int tiles_begin = keys.empty() ? 0 : keys.begin / kBlockN;
  const int tiles = keys.empty() ? 0 : (keys.end + kBlockN - 1) / kBlockN - tiles_begin;
  const int per_split = (tiles + p.splits - 1) / p.splits;
  const int run_begin = tiles_begin + min(tiles, split * per_split);
  const int run_tiles = min(tiles, (split + 1) * per_split) - min(tiles, split * per_split);
  stamps.mark(Phase::lengths);

  // Shared memory: Q | key rows of the next two tiles (paged) | stages (K, V) …; the stages are the merge buffer
  // at the end.
  const std::uint32_t q_tile = flash::ptx::smem_address(smem);
  auto* key_rows = reinterpret_cast<KeyRow*>(smem + Traits::kQBytes);
  const std::uint32_t stages = q_tile + Traits::kQBytes + Traits::kPagesBytes;
  auto k_tile = [&](int slot) { return stages + slot * Traits::kStageBytes; };
  auto v_tile = [&](int slot) { return k_tile(slot) + Traits::KVTile::kBytes; };
  const bool paged = p.block_table != nullptr;
  // Tile `step` of the run into slot step % kStages: packed keys by a multiply, paged ones from the key rows
  // looked up ahead. Always commits a group, empty past the run, so the waits count alike.
  using Source = typename Load::RowSource;
  auto load_tile = [&](int step) {
    if (step < run_tiles) {
      const int slot = step % kStages, key0 = (run_begin + step) * kBlockN;
      if (paged)
        Load::template key_tile<Source::looked_up>(p, k_tile(slot), v_tile(slot), s, b, kv_head, key0, keys.end,
                                                   key_rows + slot * kBlockN, thread);
      else
        Load::template key_tile<Source::packed>(p, k_tile(slot), v_tile(slot), s, b, kv_head, key0, keys.end, nullptr,
                                                thread);
    }
    flash::ptx::cp_async_commit();
  };
  // A paged tile's key rows are found by the first 64 threads (one key each, one block-table read) into slot
  // step % kStages of key_rows: in the main loop two steps before the tile's copies are issued — the read into
  // a register one step, published the next — so that neither the copies nor the publishing thread waits on it
  // (docs/perf-notes-serving.md, split-KV v2).
  auto lookup = [&](int step) {
    return paged && thread < kBlockN && step < run_tiles
               ? Load::key_row(p, s, b, (run_begin + step) * kBlockN + thread, keys.end)
               : KeyRow{-1, -1};
  };
  auto publish = [&](int step, const KeyRow& row) {
    if (paged && thread < kBlockN) key_rows[(step % kStages) * kBlockN + thread] = row;
  };
  Load::query_rows(p, q_tile, s, kv_head, row0, thread);
  if (paged) {  // the first kStages tiles' rows, before their copies (block-uniform branch)
    for (int step = 0; step < kStages; ++step) publish(step, lookup(step));
    __syncthreads();
  }
#pragma unroll 1  // one copy of the copy code: it runs once per block
  for (int step = 0; step < kStages - 1; ++step) load_tile(step);  // Q travels with the first tile
  KeyRow next_row = lookup(kStages);

  // This warp: rows row_warp·16 … of the tile, keys key_group·kGroupKeys … of every key tile. Each thread's two
  // rows (g, g + 8) see keys [begin, end); a row past the sequence borrows the block's range (its zero query's
  // scores are finite and never written), so that it does not force the masked path on every tile.
  const int row_warp = warp % Traits::kRowWarps, key_group = warp / Traits::kRowWarps;
  const int group_key0 = key_group * Traits::kGroupKeys;
  int see_begin[2], see_end[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int pair = row0 + row_warp * 16 + (lane >> 2) + 8 * h;
    const core::KeyRange r = pair < rows ? core::visible_keys(p.mask, pair / p.group, s.q_len, s.kv_len)
                                         : core::KeyRange{keys.begin, keys.end};
    see_begin[h] = int(r.begin), see_end[h] = int(r.end);
  }
  const float to_log2 = p.softcap > 0.0f ? kLog2e : p.scale * kLog2e;

  // O's rescale only when a row's maximum moved (warp-uniform branch, bit-identical): after a decode block's first
  // tiles it rarely does, and its multiplies were a tenth of the step (docs/perf-notes-serving.md, split-KV v3).
  flash::OnlineSoftmax<1, Traits::kNFrags, Traits::kOFrags, true> softmax;
  softmax.init();
  typename Mma::OutFrags o;
#pragma unroll
  for (int of = 0; of < Traits::kOFrags; ++of)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][of][e] = 0.0f;
  typename Mma::QFrags q_frags;

  for (int step = 0; step < run_tiles; ++step) {
    flash::ptx::cp_async_wait<kStages - 2>();
    __syncthreads();  // tile `step` has landed for everyone, and everyone is done with the slot of step − 1
    load_tile(step + kStages - 1);
    if (step == 0) Mma::load_q(q_frags, q_tile, row_warp * 16, lane);
    if (step == 0) stamps.mark(Phase::first_tile);
    const int slot = step % kStages;
    const int key0 = (run_begin + step) * kBlockN + group_key0;  // this warp's first key
    typename Mma::ScoreFrags sc;
    Mma::scores(sc, q_frags, q_tile, row_warp * 16, k_tile(slot), group_key0, lane);
    if (p.softcap > 0.0f) Scores::softcap(sc, p.scale, p.softcap);
    const bool inside = see_begin[0] <= key0 && key0 + Traits::kGroupKeys <= see_end[0] && see_begin[1] <= key0 &&
                        key0 + Traits::kGroupKeys <= see_end[1];
    if (!__all_sync(0xffffffffu, inside)) Scores::mask(sc, key0, see_begin, see_end, lane);
    softmax.step(sc, o, to_log2);
    Mma::accumulate(o, sc, v_tile(slot), group_key0, lane);
    // The key rows of the tile the next step issues, into the slot of tile `step`, whose copies were issued
    // kStages − 1 steps ago (the barrier at the top of this step ordered those reads before these writes).
    publish(step + kStages, next_row);
    next_row = lookup(step + kStages + 1);
  }

  stamps.mark(Phase::last_tile);
  flash::ptx::cp_async_wait<0>();
  __syncthreads();  // the stages become the merge buffer
  float* merge = reinterpret_cast<float*>(smem + Traits::kQBytes + Traits::kPagesBytes);
  const float m[2] = {softmax.row_max[0][0], softmax.row_max[0][1]};
  const float l[2] = {softmax.total(0, 0), softmax.total(0, 1)};
  Epilogue::stage(merge, o, m, l, warp, lane);
  __syncthreads();
  if constexpr (kClusterMerge)
    SplitKvClusterMerge<Traits>::run(p, merge, s, kv_head, row0, thread);
  else
    Epilogue::store(p, merge, s, kv_head, row0, split, thread);
  stamps.mark(Phase::stored);
  stamps.finish(run_tiles);
}

}  // namespace attnlab::cuda::serving
