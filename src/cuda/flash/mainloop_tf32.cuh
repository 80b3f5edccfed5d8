// O += P·V for f32 inputs, on TF32 tensor cores in 3xTF32 (ptx.cuh). Unlike f16/bf16, the f32 probabilities
// cannot be re-read as the m16n8k8 A operand from the accumulator registers (the layouts differ: a0 = (g, t) but
// the accumulator holds (g, 2t..2t+1)), so each warp writes its P rows to its own shared-memory rows and reads
// them back with ldmatrix; V's B fragments are single floats (ldmatrix cannot transpose 32-bit elements), read
// from the swizzled tile with at most 2-way bank conflicts. f32 is the accurate path, not the fast one.
#pragma once

#include <cstdint>

#include "cuda/flash/ptx.cuh"
#include "cuda/flash/smem_tile.cuh"

namespace attnlab::cuda::flash {

template <class Traits>
struct Tf32ProbsTimesV {
  static constexpr int kMFrags = Traits::kMFrags, kNFrags = Traits::kNFrags, kOFrags = Traits::kOFrags;
  using PTile = SmemTile<Traits::kBlockM, Traits::kBlockN, 4>;
  using VTile = SmemTile<Traits::kBlockN, Traits::kHeadV, 4>;

  __device__ __forceinline__ static float load_float(std::uint32_t address) {
    float x;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(address));
    return x;
  }
  __device__ __forceinline__ static void store_pair(std::uint32_t address, float lo, float hi) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(address), "f"(lo), "f"(hi));
  }

  template <class OutFrags, class ScoreFrags>
  __device__ __forceinline__ static void accumulate(OutFrags& o, const ScoreFrags& p, std::uint32_t v_tile,
                                                    std::uint32_t p_tile, int row0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    __syncwarp();  // the previous step's ldmatrix reads of these rows are done
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int nf = 0; nf < kNFrags; ++nf)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          store_pair(p_tile + PTile::element_offset(row0 + mf * 16 + g + 8 * h, nf * 8 + 2 * t),
                     p[mf][nf][2 * h], p[mf][nf][2 * h + 1]);
    __syncwarp();
#pragma unroll
    for (int kk = 0; kk < Traits::kPVSteps; ++kk) {  // 8 keys per step
      std::uint32_t a[kMFrags][4];
#pragma unroll
      for (int mf = 0; mf < kMFrags; ++mf) {
        const int row = row0 + mf * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ptx::ldmatrix_x4(a[mf], p_tile + PTile::offset(row, kk * 2 + (lane >> 4)));
      }
#pragma unroll
      for (int of = 0; of < kOFrags; ++of) {
        const int col = of * 8 + g;
        const std::uint32_t b0 = __float_as_uint(load_float(v_tile + VTile::element_offset(kk * 8 + t, col)));
        const std::uint32_t b1 = __float_as_uint(load_float(v_tile + VTile::element_offset(kk * 8 + t + 4, col)));
#pragma unroll
        for (int mf = 0; mf < kMFrags; ++mf) ptx::mma_3xtf32(o[mf][of], a[mf], b0, b1);
      }
    }
  }
};

}  // namespace attnlab::cuda::flash
