// The flash forward kernel: one thread block per (query block, head, batch). It walks the key tiles its rows can
// see, never materializing the score matrix:
//
//   load Q and the first kStages − 1 K/V tiles (cp.async)
//   for each visible key tile j:
//     wait for tile j; start loading tile j + kStages − 1 into the slot tile j − 1 just left (pipeline.cuh:
//     a block barrier, or mbarriers with the load issued at the end of the step)
//     S = Q·Kᵀ                        (mainloop.cuh, tensor cores)
//     mask / modify S where needed    (mask.cuh; tiles inside every row's band skip this)
//     P = online softmax of S         (softmax.cuh, registers)
//     O += P·V                        (mainloop.cuh)
//   O /= l, LSE, store                (epilogue.cuh)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/flash/epilogue.cuh"
#include "cuda/flash/flash_params.h"
#include "cuda/flash/mainloop.cuh"
#include "cuda/flash/mask.cuh"
#include "cuda/flash/pipeline.cuh"
#include "cuda/flash/ptx.cuh"
#include "cuda/flash/scheduler.cuh"
#include "cuda/flash/smem_tile.cuh"
#include "cuda/flash/softmax.cuh"

namespace attnlab::cuda::flash {

// kModifiers: softcap, bias or boolean mask present (every tile then takes the per-element path).
template <class Traits, bool kModifiers>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kBlocksPerSm) flash_forward_kernel(const __grid_constant__ FlashParams p) {
  using Element = typename Traits::Element;
  using Mma = WarpMma<Traits>;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kStages = Traits::kStages;
  constexpr int kThreads = Traits::kThreads;
  constexpr bool kOpaqueThread = Traits::kSaveRegisters;  // copy addresses rebuilt per tile (smem_tile.cuh)
  extern __shared__ __align__(128) unsigned char smem[];

  const int thread = threadIdx.x, lane = thread & 31, warp = thread >> 5;
  const BlockCoord at = block_coord(p);
  const int m0 = at.m_block * kBlockM;
  const int q_len = sequence_length(p.q_seqlens, at.batch, p.T);
  const int kv_len = sequence_length(p.kv_seqlens, at.batch, p.S);

  const auto* q = static_cast<const Element*>(p.q) + at.batch * p.q_stride_b + at.head * p.q_stride_n +
                  std::int64_t(m0) * p.q_stride_t;
  const int kv_head = at.head / p.group;
  const auto* k = static_cast<const Element*>(p.k) + at.batch * p.k_stride_b + kv_head * p.k_stride_n;
  const auto* v = static_cast<const Element*>(p.v) + at.batch * p.v_stride_b + kv_head * p.v_stride_n;
  // Built where it is used rather than held through the main loop: two pointers cost more registers than
  // (batch, head).
  auto output_rows = [&]() {
    OutputRows<Element> out{static_cast<Element*>(p.o) + at.batch * p.o_stride_b + at.head * p.o_stride_n,
                            p.o_stride_t, nullptr, p.lse_stride_t};
    if (p.lse != nullptr) out.lse = p.lse + at.batch * p.lse_stride_b + at.head * p.lse_stride_n;
    return out;
  };

  const int valid_rows = min(kBlockM, q_len - m0);
  const BlockKeys keys = valid_rows > 0 ? block_keys(p.mask, m0, m0 + valid_rows - 1, q_len, kv_len) : BlockKeys{};
  if (valid_rows <= 0 || keys.empty()) {
    Epilogue<Traits>::store_empty(output_rows(), m0, p.T, thread);
    return;
  }
  const int tile_begin = keys.begin / kBlockN;
  const int tile_end = (keys.end + kBlockN - 1) / kBlockN;

  // Shared memory: Q | stage 0 (K, V) | stage 1 (K, V) | ... | P rows (f32) | mbarriers
  const std::uint32_t q_tile = ptx::smem_address(smem);
  auto k_tile = [&](int stage) { return q_tile + Traits::kQBytes + stage * Traits::kStageBytes; };
  auto v_tile = [&](int stage) { return k_tile(stage) + Traits::kKBytes; };
  const std::uint32_t p_tile = q_tile + Traits::kQBytes + kStages * Traits::kStageBytes;  // f32 only
  TilePipeline<Traits> pipeline;
  pipeline.init(p_tile + Traits::kPBytes, thread);
  // Tile `step` (counted from tile_begin) into slot step % kStages. Keys past kv_len read as zeros (a padded
  // sequence's tail may hold anything, even NaN).
  auto load_tile = [&](int step) {
    const int j = tile_begin + step;
    if (j >= tile_end) {
      pipeline.nothing_to_issue();
      return;
    }
    pipeline.before_issue(step);
    const int key0 = j * kBlockN, slot = step % kStages;
    Mma::KTile::template load_async<kThreads, kOpaqueThread>(k_tile(slot), k + std::int64_t(key0) * p.k_stride_s,
                                                             p.k_stride_s, kv_len - key0, thread);
    Mma::VTile::template load_async<kThreads, kOpaqueThread>(v_tile(slot), v + std::int64_t(key0) * p.v_stride_s,
                                                             p.v_stride_s, kv_len - key0, thread);
    pipeline.after_issue(step);
  };

  Mma::QTile::template load_async<kThreads, kOpaqueThread>(q_tile, q, p.q_stride_t, p.T - m0, thread);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load_tile(s);  // Q travels with tile 0

  const int warp_row0 = warp * Traits::kRowsPerWarp;
  const ScoreRule<kModifiers> rule{p.scale * 1.4426950408889634f, p.scale, p.softcap};
  const std::int64_t mod_base = at.batch * p.mod_stride_b + at.head * p.mod_stride_n;

  OnlineSoftmax<Traits::kMFrags, Traits::kNFrags, Traits::kOFrags, Traits::kSaveRegisters> softmax;
  softmax.init();
  float o[Traits::kMFrags][Traits::kOFrags][4];
#pragma unroll
  for (int mf = 0; mf < Traits::kMFrags; ++mf)
#pragma unroll
    for (int of = 0; of < Traits::kOFrags; ++of)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mf][of][e] = 0.0f;

  // Q's fragments: kept in registers (loaded once) or re-read from shared memory each step.
  std::uint32_t q_regs[Traits::kQInRegisters ? Traits::kQKSteps : 1][Traits::kMFrags][4];
  auto q_from_registers = [&](int ks, typename Mma::QStep& a) {
#pragma unroll
    for (int mf = 0; mf < Traits::kMFrags; ++mf)
#pragma unroll
      for (int e = 0; e < 4; ++e) a[mf][e] = q_regs[ks][mf][e];
  };
  auto q_from_smem = [&](int ks, typename Mma::QStep& a) { Mma::load_q_step(a, q_tile, warp_row0, ks, lane); };

  for (int j = tile_begin, step = 0; j < tile_end; ++j, ++step) {
    pipeline.acquire(step);
    // The previous tile is released here rather than at the end of its step: by this wait its last MMAs have
    // consumed every ldmatrix result of it. With this placement the Hqk 64 mbarrier kernel runs 2–8 % faster than
    // the block-barrier one; with the release at the end of the step it was within −0.3…+2.4 % (docs/perf-notes-flash-sm80.md,
    // v4b and v6a, in different runs).
    if (step > 0) pipeline.release(step - 1);
    if constexpr (TilePipeline<Traits>::kIssueAtStart) load_tile(step + kStages - 1);
    const int stage = step % kStages;

    float s[Traits::kMFrags][Traits::kNFrags][4];
    if constexpr (Traits::kQInRegisters) {
      if (step == 0) {
#pragma unroll
        for (int ks = 0; ks < Traits::kQKSteps; ++ks) Mma::load_q_step(q_regs[ks], q_tile, warp_row0, ks, lane);
      }
      Mma::scores(s, q_from_registers, k_tile(stage), lane);
    } else {
      Mma::scores(s, q_from_smem, k_tile(stage), lane);
    }

    const int key0 = j * kBlockN;
    // A tile left raw is scaled inside the softmax's exponent, which takes its maximum over raw scores: the
    // maximum of the scaled ones only for a positive scale. With any other scale every tile is scaled here first.
    const bool inside_band =
        key0 >= keys.full_begin && key0 + kBlockN <= keys.full_end && rule.scale_log2 > 0.0f;
    float to_log2 = rule.scale_log2;
    if (kModifiers || !inside_band) {
#pragma unroll
      for (int mf = 0; mf < Traits::kMFrags; ++mf)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = m0 + warp_row0 + mf * 16 + (lane >> 2) + 8 * h;
          // Recomputed per masked tile rather than kept in registers: the accumulators need every register.
          const core::KeyRange band = core::visible_keys(p.mask, row, q_len, kv_len);
#pragma unroll
          for (int nf = 0; nf < Traits::kNFrags; ++nf)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = key0 + nf * 8 + 2 * (lane & 3) + e;
              const bool visible = col >= band.begin && col < band.end;
              s[mf][nf][2 * h + e] = rule.apply(p, mod_base, s[mf][nf][2 * h + e], row, col, visible);
            }
        }
      to_log2 = 1.0f;
    }
    softmax.step(s, o, to_log2);
    Mma::accumulate(o, s, v_tile(stage), p_tile, warp_row0, lane);
    if constexpr (!TilePipeline<Traits>::kIssueAtStart) load_tile(step + kStages - 1);
  }

  Epilogue<Traits>::store(o, softmax, smem, output_rows(), m0, p.T, q_len, warp, lane);
}

}  // namespace attnlab::cuda::flash
