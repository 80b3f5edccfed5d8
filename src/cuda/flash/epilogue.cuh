// The end of a query block: O = acc / l rounded to the output dtype and LSE = m + log l (natural log), written
// coalesced. Each warp stages its own rows in shared memory (Q's place) so that global stores are whole 16-byte
// chunks of a row instead of the accumulator's scattered 4-byte pairs. Rows past the query length get O = 0 and
// LSE = −inf, as does any row that saw no key (docs/design.md §2: never NaN).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/flash/flash_params.h"
#include "cuda/flash/ptx.cuh"
#include "cuda/flash/smem_tile.cuh"

namespace attnlab::cuda::flash {

// Where one (batch, head)'s output rows go.
template <class Element>
struct OutputRows {
  Element* o;             // row 0 of this (b, n)
  std::int64_t o_stride;  // elements between rows
  float* lse;             // row 0 of this (b, n)'s LSE, or null
  std::int64_t lse_stride;
};

template <class Traits>
struct Epilogue {
  using Element = typename Traits::Element;
  using OTile = SmemTile<Traits::kBlockM, Traits::kHeadV, Traits::kElementBytes>;
  static constexpr int kChunks = OTile::kChunks;

  template <class Softmax, class OutFrags>
  __device__ __forceinline__ static void store(const OutFrags& o, const Softmax& softmax, unsigned char* smem,
                                               const OutputRows<Element>& out, int m0, int T, int q_len, int warp,
                                               int lane) {
    // With Hv < Hqk the output layout's rows straddle other warps' Q rows: wait until every warp is done with Q.
    // With Hv = Hqk each warp overwrites only its own Q rows, after its own last read of them.
    if constexpr (Traits::kHeadV != Traits::kHeadQK)
      __syncthreads();
    else
      __syncwarp();
    const int g = lane >> 2, t = lane & 3;
    const int warp_row0 = warp * Traits::kRowsPerWarp;
#pragma unroll
    for (int mf = 0; mf < Traits::kMFrags; ++mf)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int local = warp_row0 + mf * 16 + g + 8 * h;
        const int row = m0 + local;
        const float l = softmax.total(mf, h);
        const bool seen = row < q_len && l > 0.0f;
        const float inv = seen ? __frcp_rn(l) : 0.0f;
#pragma unroll
        for (int of = 0; of < Traits::kOFrags; ++of) {
          unsigned char* at = smem + OTile::element_offset(local, of * 8 + 2 * t);
          if constexpr (Traits::kF32)
            *reinterpret_cast<float2*>(at) = make_float2(o[mf][of][2 * h] * inv, o[mf][of][2 * h + 1] * inv);
          else
            *reinterpret_cast<std::uint32_t*>(at) = ptx::pack2<Element>(o[mf][of][2 * h] * inv, o[mf][of][2 * h + 1] * inv);
        }
        if (out.lse != nullptr && t == 0 && row < T)
          out.lse[row * out.lse_stride] =
              seen ? (softmax.row_max[mf][h] + __log2f(l)) * 0.6931471805599453f : -INFINITY;
      }
    __syncwarp();
    constexpr int kWarpChunks = Traits::kRowsPerWarp * kChunks;
#pragma unroll
    for (int id = lane; id < kWarpChunks; id += 32) {
      const int local = warp_row0 + id / kChunks;
      const int chunk = id % kChunks;
      const int row = m0 + local;
      if (row < T)
        *reinterpret_cast<uint4*>(out.o + row * out.o_stride + chunk * OTile::kChunkElements) =
            *reinterpret_cast<const uint4*>(smem + OTile::offset(local, chunk));
    }
  }

  // A block none of whose rows sees a key: zeros and −inf, straight from every thread.
  __device__ __forceinline__ static void store_empty(const OutputRows<Element>& out, int m0, int T, int thread) {
    const int rows = T - m0 < Traits::kBlockM ? T - m0 : Traits::kBlockM;
    for (int id = thread; id < rows * kChunks; id += Traits::kThreads)
      *reinterpret_cast<uint4*>(out.o + (m0 + id / kChunks) * out.o_stride + (id % kChunks) * OTile::kChunkElements) =
          make_uint4(0, 0, 0, 0);
    if (out.lse != nullptr)
      for (int r = thread; r < rows; r += Traits::kThreads) out.lse[(m0 + r) * out.lse_stride] = -INFINITY;
  }
};

}  // namespace attnlab::cuda::flash
