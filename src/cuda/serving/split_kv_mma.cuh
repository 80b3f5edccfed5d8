// The two tensor-core products of one split-KV step, per warp: S = Q·Kᵀ for the warp's 16 rows against its
// kGroupKeys keys of the tile, and O += P·V with P straight from S's registers (mma.sync m16n8k16, operands by
// ldmatrix from the swizzled tiles; fragment layouts in cuda/flash/ptx.cuh). Q's fragments stay in registers for
// the whole block up to head dim 128 (SplitKvTraits::kQInRegisters); at 256 they are re-read per step.
#pragma once

#include <cstdint>

#include "cuda/flash/ptx.cuh"

namespace attnlab::cuda::serving {

template <class Traits>
struct SplitKvMma {
  using Element = typename Traits::Element;
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  static constexpr int kNFrags = Traits::kNFrags, kOFrags = Traits::kOFrags, kQKSteps = Traits::kQKSteps;

  using QFrags = std::uint32_t[Traits::kQInRegisters ? kQKSteps : 1][4];
  using ScoreFrags = float[1][kNFrags][4];
  using OutFrags = float[1][kOFrags][4];

  // Step ks of rows row0 … row0 + 15 of the Q tile.
  __device__ __forceinline__ static void load_q_step(std::uint32_t (&a)[4], std::uint32_t q_tile, int row0, int ks,
                                                     int lane) {
    const int row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8;
    flash::ptx::ldmatrix_x4(a, q_tile + QTile::offset(row, ks * 2 + (lane >> 4)));
  }
  // Every step, when Q stays in registers (a no-op otherwise).
  __device__ __forceinline__ static void load_q(QFrags& a, std::uint32_t q_tile, int row0, int lane) {
    if constexpr (Traits::kQInRegisters) {
#pragma unroll
      for (int ks = 0; ks < kQKSteps; ++ks) load_q_step(a[ks], q_tile, row0, ks, lane);
    }
  }

  // S = Q·Kᵀ over keys key0 … key0 + kGroupKeys − 1 of the tile, for the warp's rows row0 … of the Q tile.
  __device__ __forceinline__ static void scores(ScoreFrags& s, const QFrags& q, std::uint32_t q_tile, int row0,
                                                std::uint32_t k_tile, int key0, int lane) {
#pragma unroll
    for (int nf = 0; nf < kNFrags; ++nf)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nf][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kQKSteps; ++ks) {
      std::uint32_t a[4];
      if constexpr (Traits::kQInRegisters) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = q[ks][e];
      } else {
        load_q_step(a, q_tile, row0, ks, lane);
      }
#pragma unroll
      for (int np = 0; np < kNFrags / 2; ++np) {
        std::uint32_t b[4];
        const int key = key0 + np * 16 + (lane & 7) + (lane >> 4) * 8;
        flash::ptx::ldmatrix_x4(b, k_tile + KVTile::offset(key, ks * 2 + ((lane >> 3) & 1)));
        flash::ptx::mma_16816<Element>(s[0][2 * np], a, b[0], b[1]);
        flash::ptx::mma_16816<Element>(s[0][2 * np + 1], a, b[2], b[3]);
      }
    }
  }

  // O += P·V over the same keys; P is rounded to Element (the A layout of a k16 step is two n8 accumulators).
  __device__ __forceinline__ static void accumulate(OutFrags& o, const ScoreFrags& p, std::uint32_t v_tile, int key0,
                                                    int lane) {
#pragma unroll
    for (int kk = 0; kk < kNFrags / 2; ++kk) {
      const std::uint32_t a[4] = {flash::ptx::pack2<Element>(p[0][2 * kk][0], p[0][2 * kk][1]),
                                  flash::ptx::pack2<Element>(p[0][2 * kk][2], p[0][2 * kk][3]),
                                  flash::ptx::pack2<Element>(p[0][2 * kk + 1][0], p[0][2 * kk + 1][1]),
                                  flash::ptx::pack2<Element>(p[0][2 * kk + 1][2], p[0][2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < kOFrags / 2; ++dp) {
        std::uint32_t b[4];
        const int key = key0 + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        flash::ptx::ldmatrix_x4_trans(b, v_tile + KVTile::offset(key, dp * 2 + (lane >> 4)));
        flash::ptx::mma_16816<Element>(o[0][2 * dp], a, b[0], b[1]);
        flash::ptx::mma_16816<Element>(o[0][2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
};

}  // namespace attnlab::cuda::serving
