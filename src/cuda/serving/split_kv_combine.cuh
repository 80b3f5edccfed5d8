// The combine of split-KV (flash-decoding): each split left a row's O normalized over its own keys and its LSE
// (log2 units); the row's O is their sum weighted by 2^(lse_s − M) over the total weight, the attention sink
// joining the total. One warp per (query row, head); the lanes read the splits' LSEs, then O's columns, four
// floats each. Rows past cu_seqlens_q[B] belong to no sequence and are not written.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/flash/ptx.cuh"
#include "cuda/serving/split_kv_epilogue.cuh"
#include "cuda/serving/split_kv_load.cuh"
#include "cuda/serving/split_kv_params.h"

namespace attnlab::cuda::serving {

constexpr int kCombineThreads = 128;

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads) split_kv_combine_kernel(const __grid_constant__ SplitKvParams p) {
  const int lane = threadIdx.x & 31;
  const std::int64_t item = std::int64_t(blockIdx.x) * (kCombineThreads / 32) + (threadIdx.x >> 5);
  const std::int64_t q_row = item / p.N;
  const int head = int(item % p.N);
  if (q_row >= clamp_to(p.cu_q[p.B * p.cu_q_stride], 0, p.total_q)) return;

  const std::int64_t split_stride = std::int64_t(p.total_q) * p.N;
  const float* lse = p.part_lse + q_row * p.N + head;
  float m = -INFINITY;
  for (int s = lane; s < p.splits; s += 32) m = fmaxf(m, lse[s * split_stride]);
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  const float shift = m == -INFINITY ? 0.0f : m;
  float l = 0.0f;
  for (int s = lane; s < p.splits; s += 32) l += flash::ptx::exp2_fast(lse[s * split_stride] - shift);
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) l += __shfl_xor_sync(0xffffffffu, l, d);
  // Σ_s 2^(lse_s − shift) · O_s is the row's O times l; the sink then joins l.
  const FinishedRow f = FinishedRow::of(shift, l, sink_of(p, head));

  const float* part = p.part_o + (q_row * p.N + head) * kHeadDim;
  auto* o = static_cast<Element*>(p.o) + q_row * p.o_row + head * p.o_head;
#pragma unroll
  for (int col = lane * 4; col < kHeadDim; col += 128) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < p.splits; ++s) {
      const float w = flash::ptx::exp2_fast(lse[s * split_stride] - shift);
      const float4 x = *reinterpret_cast<const float4*>(part + s * split_stride * kHeadDim + col);
      acc.x += w * x.x, acc.y += w * x.y, acc.z += w * x.z, acc.w += w * x.w;
    }
    *reinterpret_cast<uint2*>(o + col) = make_uint2(flash::ptx::pack2<Element>(acc.x * f.o_factor, acc.y * f.o_factor),
                                                    flash::ptx::pack2<Element>(acc.z * f.o_factor, acc.w * f.o_factor));
  }
  if (lane == 0 && p.lse != nullptr) p.lse[head * p.lse_head + q_row * p.lse_row] = f.lse;
}

}  // namespace attnlab::cuda::serving
