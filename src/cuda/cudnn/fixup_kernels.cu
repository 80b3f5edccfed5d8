// Fix-up kernels of the cudnn path (see fixup_kernels.h for why each exists). They touch only the rows they fix:
// a non-empty row costs one read of its Stats in the forward fix-up and nothing in the backward one.
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "cuda/common/cuda_check.h"
#include "cuda/cudnn/fixup_kernels.h"

namespace attnlab::cuda::cudnn {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr float kInf = std::numeric_limits<float>::infinity();

int blocks_for(std::int64_t work, int per_block) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  return int(std::clamp<std::int64_t>(blocks, 1, 65535));  // grid-stride loops cover the rest
}

__device__ __forceinline__ std::int64_t length(const std::int32_t* lens, std::int64_t b, std::int64_t full) {
  return lens != nullptr ? std::int64_t(lens[b]) : full;
}

// One warp zeroes one D-element row of 2-byte values.
__device__ __forceinline__ void zero_row(std::uint16_t* row, std::int64_t D, int lane) {
  for (std::int64_t h = lane; h < D; h += 32) row[h] = 0;  // +0.0 in both f16 and bf16
}

__device__ __forceinline__ std::uint16_t* row_of(const RowTensor& t, std::int64_t b, std::int64_t l, std::int64_t h) {
  return static_cast<std::uint16_t*>(t.data) + b * t.strides[0] + l * t.strides[1] + h * t.strides[2];
}

__global__ void prepare_lengths_kernel(const std::int32_t* q_lens, std::int64_t q_stride,
                                       const std::int32_t* kv_lens, std::int64_t kv_stride, std::int64_t B,
                                       std::int64_t T, std::int64_t S, bool fill_missing, std::int32_t* out) {
  for (std::int64_t b = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; b < B;
       b += std::int64_t(gridDim.x) * blockDim.x) {
    if (q_lens != nullptr || fill_missing) {
      const std::int64_t q = q_lens != nullptr ? std::int64_t(q_lens[b * q_stride]) : T;
      out[b] = std::int32_t(q < 0 ? 0 : (q > T ? T : q));
    }
    if (kv_lens != nullptr || fill_missing) {
      const std::int64_t kv = kv_lens != nullptr ? std::int64_t(kv_lens[b * kv_stride]) : S;
      out[B + b] = std::int32_t(kv < 0 ? 0 : (kv > S ? S : kv));
    }
  }
}

__global__ void forward_fixup_kernel(ForwardFixup a) {
  const int lane = threadIdx.x % 32;
  const std::int64_t rows = a.B * a.N * a.T;
  const std::int64_t first = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  for (std::int64_t row = first; row < rows; row += std::int64_t(gridDim.x) * kWarps) {
    const std::int64_t i = row % a.T;
    const std::int64_t n = (row / a.T) % a.N;
    const std::int64_t b = row / (a.T * a.N);
    const std::int64_t q_len = length(a.lengths.q, b, a.T);
    const std::int64_t kv_len = length(a.lengths.kv, b, a.S);
    bool empty = core::visible_keys(a.mask, i, q_len, kv_len).empty();
    float stats = 0.0f;
    if (a.stats != nullptr && !empty) {
      stats = a.stats[row];  // packed (B, N, T): row = (b·N + n)·T + i
      // Not finite: every visible score was −inf (an all −inf bias row). Depending on the engine that shows as
      // −inf, NaN (−inf − −inf) or +inf (the flash-attention convention); the row counts as empty either way.
      if (a.check_stats && !(fabsf(stats) < kInf)) empty = true;
    }
    if (lane == 0 && a.lse != nullptr && (empty || a.copy_stats))
      a.lse[b * a.lse_strides[0] + n * a.lse_strides[1] + i * a.lse_strides[2]] = empty ? -kInf : stats;
    if (empty) zero_row(row_of(a.o, b, i, n), a.Hv, lane);
  }
}

__global__ void prepare_backward_stats_kernel(const float* lse, std::int64_t sb, std::int64_t sn, std::int64_t st,
                                              std::int64_t B, std::int64_t N, std::int64_t T, float* packed) {
  const std::int64_t total = B * N * T;
  for (std::int64_t x = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; x < total;
       x += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = x % T, n = (x / T) % N, b = x / (T * N);
    const float v = lse[b * sb + n * sn + i * st];
    packed[x] = v == -kInf ? kInf : v;
  }
}

// dQ rows (b, i, n) of query rows that see no key.
__global__ void zero_empty_query_rows(BackwardFixup a) {
  const int lane = threadIdx.x % 32;
  const std::int64_t rows = a.B * a.T * a.N;
  const std::int64_t first = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  for (std::int64_t row = first; row < rows; row += std::int64_t(gridDim.x) * kWarps) {
    const std::int64_t n = row % a.N;
    const std::int64_t i = (row / a.N) % a.T;
    const std::int64_t b = row / (a.N * a.T);
    const std::int64_t q_len = length(a.lengths.q, b, a.T);
    const std::int64_t kv_len = length(a.lengths.kv, b, a.S);
    if (core::visible_keys(a.mask, i, q_len, kv_len).empty()) zero_row(row_of(a.dq, b, i, n), a.Hqk, lane);
  }
}

// dK and dV rows (b, j, h) of keys that no query row sees (padded keys j ≥ kv_len included).
__global__ void zero_unseen_key_rows(BackwardFixup a) {
  const int lane = threadIdx.x % 32;
  const std::int64_t rows = a.B * a.S * a.K;
  const std::int64_t first = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  for (std::int64_t row = first; row < rows; row += std::int64_t(gridDim.x) * kWarps) {
    const std::int64_t h = row % a.K;
    const std::int64_t j = (row / a.K) % a.S;
    const std::int64_t b = row / (a.K * a.S);
    const core::KeyRange seen = seen_keys(a.mask, length(a.lengths.q, b, a.T), length(a.lengths.kv, b, a.S));
    if (j >= seen.begin && j < seen.end) continue;
    zero_row(row_of(a.dk, b, j, h), a.Hqk, lane);
    zero_row(row_of(a.dv, b, j, h), a.Hv, lane);
  }
}

}  // namespace

void prepare_lengths(const std::int32_t* q_lens, std::int64_t q_stride, const std::int32_t* kv_lens,
                     std::int64_t kv_stride, std::int64_t B, std::int64_t T, std::int64_t S, bool fill_missing,
                     std::int32_t* out, cudaStream_t stream) {
  prepare_lengths_kernel<<<blocks_for(B, kThreads), kThreads, 0, stream>>>(q_lens, q_stride, kv_lens, kv_stride, B,
                                                                           T, S, fill_missing, out);
  check_launch("cudnn: sequence-length kernel");
}

void forward_fixup(const ForwardFixup& args, cudaStream_t stream) {
  forward_fixup_kernel<<<blocks_for(args.B * args.N * args.T, kWarps), kThreads, 0, stream>>>(args);
  check_launch("cudnn: forward fix-up kernel");
}

void prepare_backward_stats(const float* lse, const std::int64_t lse_strides[3], std::int64_t B, std::int64_t N,
                            std::int64_t T, float* packed, cudaStream_t stream) {
  prepare_backward_stats_kernel<<<blocks_for(B * N * T, kThreads), kThreads, 0, stream>>>(
      lse, lse_strides[0], lse_strides[1], lse_strides[2], B, N, T, packed);
  check_launch("cudnn: backward statistics kernel");
}

void backward_fixup(const BackwardFixup& args, cudaStream_t stream) {
  zero_empty_query_rows<<<blocks_for(args.B * args.T * args.N, kWarps), kThreads, 0, stream>>>(args);
  check_launch("cudnn: backward fix-up kernel (dQ)");
  zero_unseen_key_rows<<<blocks_for(args.B * args.S * args.K, kWarps), kThreads, 0, stream>>>(args);
  check_launch("cudnn: backward fix-up kernel (dK, dV)");
}

namespace {
__global__ void combine_chunk_amaxes_kernel(const float* parts, int chunks, float* amax_s, float* amax_o) {
  const int k = int(threadIdx.x);  // 0: amax_s, 1: amax_o
  float* out = k == 0 ? amax_s : amax_o;
  if (out == nullptr) return;
  float m = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    const float x = parts[2 * c + k];
    m = (x != x || m != m) ? x + m : fmaxf(m, x);  // NaN propagates (fmaxf alone would drop it)
  }
  *out = m;
}
}  // namespace

void combine_chunk_amaxes(const float* parts, int chunks, float* amax_s, float* amax_o, cudaStream_t stream) {
  if (amax_s == nullptr && amax_o == nullptr) return;
  combine_chunk_amaxes_kernel<<<1, 2, 0, stream>>>(parts, chunks, amax_s, amax_o);
  check_launch("cudnn: combine_chunk_amaxes");
}

}  // namespace attnlab::cuda::cudnn
