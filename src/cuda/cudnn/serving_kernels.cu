// The kernels around the cudnn path's packed and paged graphs (serving_kernels.h says why each exists).
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "core/mask.h"
#include "cuda/common/cuda_check.h"
#include "cuda/cudnn/serving_kernels.h"

namespace attnlab::cuda::cudnn {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ std::int64_t clamp64(std::int64_t x, std::int64_t lo, std::int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

// Sequence b's first row and its length, from cumulative offsets clamped into `total` rows and to `max_len`.
struct Rows {
  std::int64_t begin, len;
};
__device__ __forceinline__ Rows rows_of(const std::int32_t* cu, std::int64_t stride, std::int64_t b,
                                        std::int64_t total, std::int64_t max_len) {
  const std::int64_t begin = clamp64(cu[b * stride], 0, total);
  const std::int64_t end = clamp64(cu[(b + 1) * stride], begin, total);
  return {begin, std::min(end - begin, max_len)};
}

// Row pieces of 16 bytes (8 two-byte elements; rows and head strides are multiples of them, cudnn_varlen.cpp).
constexpr int kPiece = 8;

__host__ __device__ std::int64_t prepare_work(const ServingInputs& a) {
  const std::int64_t entries = a.out.page_table != nullptr ? a.B * a.pages_per_sequence : 0;
  const std::int64_t gather = a.q_gathered != nullptr ? a.B * a.N * (a.Hqk / kPiece) : 0;
  const std::int64_t most = entries > gather ? entries : gather;
  return most > a.B + 1 ? most : a.B + 1;
}

__global__ void prepare_kernel(ServingInputs a) {
  const std::int64_t entries = a.out.page_table != nullptr ? a.B * a.pages_per_sequence : 0;
  const std::int64_t gather = a.q_gathered != nullptr ? a.B * a.N * (a.Hqk / kPiece) : 0;
  const std::int64_t work = prepare_work(a);
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < work;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    if (t < a.B) {
      const Rows q = rows_of(a.cu_q, a.cu_q_stride, t, a.total_q, a.T);
      a.out.seq_len_q[t] = std::int32_t(q.len);
      a.out.q_offsets[t] = std::int32_t(q.begin * a.q_row);
      a.out.o_offsets[t] = std::int32_t(q.begin * a.o_row);
      if (a.cu_k != nullptr) {
        const Rows k = rows_of(a.cu_k, a.cu_k_stride, t, a.total_k, a.S);
        a.out.seq_len_kv[t] = std::int32_t(k.len);
        a.out.k_offsets[t] = std::int32_t(k.begin * a.k_row);
        a.out.v_offsets[t] = std::int32_t(k.begin * a.v_row);
      } else {
        const std::int64_t capacity = std::min(a.S, a.pages_per_sequence * a.page_size);
        a.out.seq_len_kv[t] = std::int32_t(clamp64(a.seqlens[t * a.seqlens_stride], 0, capacity));
      }
    } else if (t == a.B) {  // the end of the last batch's rows
      const std::int64_t q_end = clamp64(a.cu_q[a.B * a.cu_q_stride], 0, a.total_q);
      a.out.q_offsets[t] = std::int32_t(q_end * a.q_row);
      a.out.o_offsets[t] = std::int32_t(q_end * a.o_row);
      if (a.cu_k != nullptr) {
        const std::int64_t k_end = clamp64(a.cu_k[a.B * a.cu_k_stride], 0, a.total_k);
        a.out.k_offsets[t] = std::int32_t(k_end * a.k_row);
        a.out.v_offsets[t] = std::int32_t(k_end * a.v_row);
      }
    }
    if (t < entries) {
      // A block table's entries past a sequence's last page are not read (docs/serving.md): page 0 stands there.
      const std::int64_t b = t / a.pages_per_sequence, page = t % a.pages_per_sequence;
      std::int64_t entry = 0;
      if (a.block_table == nullptr) {
        entry = rows_of(a.cu_k, a.cu_k_stride, b, a.total_k, a.S).begin + page;
      } else {
        const std::int64_t capacity = std::min(a.S, a.pages_per_sequence * a.page_size);
        const std::int64_t kv_len = clamp64(a.seqlens[b * a.seqlens_stride], 0, capacity);
        if (page * a.page_size < kv_len) entry = a.block_table[b * a.table_b + page * a.table_p];
      }
      a.out.page_table[t] = std::int32_t(clamp64(entry, 0, a.pages - 1));
    }
    if (t < gather) {  // piece t: sequence b, head n, columns piece · 8 …
      const std::int64_t pieces = a.Hqk / kPiece;
      const std::int64_t b = t / (a.N * pieces), n = t / pieces % a.N, piece = t % pieces;
      const Rows q = rows_of(a.cu_q, a.cu_q_stride, b, a.total_q, a.T);
      if (q.len > 0)
        static_cast<uint4*>(a.q_gathered)[t] = *reinterpret_cast<const uint4*>(
            static_cast<const std::uint16_t*>(a.q) + q.begin * a.q_row + n * a.q_head + piece * kPiece);
    }
  }
}

// One thread per (row i, head n) of sequence blockIdx.y.
__global__ void finish_kernel(ServingFinish a) {
  const std::int64_t b = blockIdx.y;
  const std::int64_t q_len = a.seq_len_q[b], kv_len = a.seq_len_kv[b];
  const std::int64_t begin = rows_of(a.cu_q, a.cu_q_stride, b, a.total_q, a.T).begin;
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < q_len * a.N;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = t / a.N, n = t % a.N;
    const bool empty = core::visible_keys(a.mask, i, q_len, kv_len).empty();
    auto* row = reinterpret_cast<uint4*>(static_cast<std::uint16_t*>(a.o) + (begin + i) * a.o_row + n * a.o_head);
    if (empty) {
      for (std::int64_t h = 0; h < a.Hv / kPiece; ++h) row[h] = make_uint4(0, 0, 0, 0);  // +0.0 in f16 and bf16
    } else if (a.o_gathered != nullptr) {  // decode: i = 0
      const auto* from = static_cast<const uint4*>(a.o_gathered) + (b * a.N + n) * (a.Hv / kPiece);
      for (std::int64_t h = 0; h < a.Hv / kPiece; ++h) row[h] = from[h];
    }
    if (a.lse != nullptr)
      a.lse[n * a.lse_head + (begin + i) * a.lse_row] =
          empty ? -std::numeric_limits<float>::infinity() : a.stats[(b * a.N + n) * a.T + i];
  }
}

int blocks_for(std::int64_t work) {
  return int(std::clamp<std::int64_t>((work + kThreads - 1) / kThreads, 1, 65535));  // grid-stride beyond
}

}  // namespace

std::size_t serving_int_words(std::int64_t B, std::int64_t table_entries) {
  return std::size_t(2 * B + 4 * (B + 1) + table_entries);
}

ServingInts carve_serving_ints(std::int32_t* base, std::int64_t B, std::int64_t table_entries) {
  ServingInts s;
  s.seq_len_q = base;
  s.seq_len_kv = s.seq_len_q + B;
  s.q_offsets = s.seq_len_kv + B;
  s.o_offsets = s.q_offsets + (B + 1);
  s.k_offsets = s.o_offsets + (B + 1);
  s.v_offsets = s.k_offsets + (B + 1);
  s.page_table = table_entries > 0 ? s.v_offsets + (B + 1) : nullptr;
  return s;
}

void prepare_serving_inputs(const ServingInputs& a, cudaStream_t stream) {
  prepare_kernel<<<blocks_for(prepare_work(a)), kThreads, 0, stream>>>(a);
  check_launch("cudnn: preparing a packed or paged call's lengths and offsets");
}

void finish_serving_outputs(const ServingFinish& a, cudaStream_t stream) {
  if (a.B == 0 || a.T == 0) return;
  const dim3 grid(unsigned(blocks_for(a.T * a.N)), unsigned(a.B));
  finish_kernel<<<grid, kThreads, 0, stream>>>(a);
  check_launch("cudnn: finishing a packed or paged call's outputs");
}

}  // namespace attnlab::cuda::cudnn
