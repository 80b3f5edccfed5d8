// The two tensor-core products of one main-loop step, per warp: S = Q·Kᵀ for the warp's query rows against the
// current key tile, and O += P·V with P taken straight from S's registers. Operands come from the swizzled shared
// tiles through ldmatrix (V transposed on the way); nothing here touches global memory or synchronizes. f32
// inputs share Q·Kᵀ (ldmatrix hands out TF32 fragments too) and take P·V from mainloop_tf32.cuh.
#pragma once

#include <cstdint>

#include "cuda/flash/mainloop_tf32.cuh"
#include "cuda/flash/ptx.cuh"
#include "cuda/flash/smem_tile.cuh"

namespace attnlab::cuda::flash {

template <class Traits>
struct WarpMma {
  using Element = typename Traits::Element;
  using QTile = SmemTile<Traits::kBlockM, Traits::kHeadQK, Traits::kElementBytes>;
  using KTile = SmemTile<Traits::kBlockN, Traits::kHeadQK, Traits::kElementBytes>;
  using VTile = SmemTile<Traits::kBlockN, Traits::kHeadV, Traits::kElementBytes>;
  static constexpr int kMFrags = Traits::kMFrags, kNFrags = Traits::kNFrags, kOFrags = Traits::kOFrags;

  using ScoreFrags = float[kMFrags][kNFrags][4];
  using OutFrags = float[kMFrags][kOFrags][4];
  // A-operand fragments of the warp's Q rows, one k16 step.
  using QStep = std::uint32_t[kMFrags][4];

  // Q rows [row0, row0 + 16·kMFrags) of the tile, k step `ks` (16 halves or 8 floats: two chunks). ldmatrix.x4
  // matrices: (rows 0–7, chunk 0), (rows 8–15, chunk 0), (rows 0–7, chunk 1), (rows 8–15, chunk 1) = a0..a3.
  __device__ __forceinline__ static void load_q_step(QStep& a, std::uint32_t q_tile, int row0, int ks, int lane) {
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf) {
      const int row = row0 + mf * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      ptx::ldmatrix_x4(a[mf], q_tile + QTile::offset(row, ks * 2 + (lane >> 4)));
    }
  }

  // S = Q·Kᵀ. `q_step(ks, a)` supplies Q's fragments for step ks (from registers or shared memory).
  template <class QSource>
  __device__ __forceinline__ static void scores(ScoreFrags& s, const QSource& q_step, std::uint32_t k_tile,
                                                int lane) {
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int nf = 0; nf < kNFrags; ++nf)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mf][nf][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < Traits::kQKSteps; ++ks) {
      QStep a;
      q_step(ks, a);
#pragma unroll
      for (int np = 0; np < kNFrags / 2; ++np) {
        // Keys np·16 … +15 as two n8 B operands. Matrices: (keys 0–7, k 0–7), (keys 0–7, k 8–15),
        // (keys 8–15, k 0–7), (keys 8–15, k 8–15) = b0, b1 of fragment 2np, then b0, b1 of fragment 2np + 1.
        std::uint32_t b[4];
        const int key = np * 16 + (lane & 7) + (lane >> 4) * 8;
        ptx::ldmatrix_x4(b, k_tile + KTile::offset(key, ks * 2 + ((lane >> 3) & 1)));
#pragma unroll
        for (int mf = 0; mf < kMFrags; ++mf) {
          mma(s[mf][2 * np], a[mf], b[0], b[1]);
          mma(s[mf][2 * np + 1], a[mf], b[2], b[3]);
        }
      }
    }
  }

  __device__ __forceinline__ static void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                            std::uint32_t b1) {
    if constexpr (Traits::kF32)
      ptx::mma_3xtf32(d, a, b0, b1);
    else
      ptx::mma_16816<Element>(d, a, b0, b1);
  }

  // O += P·V. For f16/bf16, P (probabilities in S's registers) is rounded to Element and re-read as the A
  // operand: the f32 accumulator layout of two adjacent n8 tiles is exactly the A layout of one k16 step. f32
  // stages P in the warp's rows of `p_tile` (mainloop_tf32.cuh).
  __device__ __forceinline__ static void accumulate(OutFrags& o, ScoreFrags& p, std::uint32_t v_tile,
                                                    std::uint32_t p_tile, int row0, int lane) {
    if constexpr (Traits::kF32)
      Tf32ProbsTimesV<Traits>::accumulate(o, p, v_tile, p_tile, row0, lane);
    else
      accumulate_halves(o, p, v_tile, lane);
  }

 private:
  __device__ __forceinline__ static void accumulate_halves(OutFrags& o, const ScoreFrags& p, std::uint32_t v_tile,
                                                           int lane) {
#pragma unroll
    for (int kk = 0; kk < Traits::kPVSteps; ++kk) {
      std::uint32_t a[kMFrags][4];
#pragma unroll
      for (int mf = 0; mf < kMFrags; ++mf) {
        a[mf][0] = ptx::pack2<Element>(p[mf][2 * kk][0], p[mf][2 * kk][1]);
        a[mf][1] = ptx::pack2<Element>(p[mf][2 * kk][2], p[mf][2 * kk][3]);
        a[mf][2] = ptx::pack2<Element>(p[mf][2 * kk + 1][0], p[mf][2 * kk + 1][1]);
        a[mf][3] = ptx::pack2<Element>(p[mf][2 * kk + 1][2], p[mf][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kOFrags / 2; ++dp) {
        // Keys kk·16 … +15, head-dim columns dp·16 … +15, transposed: (keys 0–7, d 0–7), (keys 8–15, d 0–7),
        // (keys 0–7, d 8–15), (keys 8–15, d 8–15) = b0, b1 of fragment 2dp, then of fragment 2dp + 1.
        std::uint32_t b[4];
        const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ptx::ldmatrix_x4_trans(b, v_tile + VTile::offset(key, dp * 2 + (lane >> 4)));
#pragma unroll
        for (int mf = 0; mf < kMFrags; ++mf) {
          ptx::mma_16816<Element>(o[mf][2 * dp], a[mf], b[0], b[1]);
          ptx::mma_16816<Element>(o[mf][2 * dp + 1], a[mf], b[2], b[3]);
        }
      }
    }
  }
};

}  // namespace attnlab::cuda::flash
