// The small kernels around the cuDNN graphs. cuDNN's fused attention leaves a few things to its caller that
// docs/design.md §2 fixes exactly, so the path enqueues these next to the graph — and only for the calls that need them
// (per-batch lengths, masks that can empty a row, a bias, an LSE layout cuDNN cannot write):
//   - padded query rows (i ≥ q_len) are not computed by cuDNN, so O and LSE there are whatever was in memory;
//   - a row with no visible key must give O = 0 and LSE = −inf, whatever cuDNN's softmax makes of an all −inf row;
//   - cuDNN's backward computes P = exp(s − Stats); for an empty row, −inf − (−inf) is NaN, so the backward gets
//     +inf Stats there (P = 0 exactly), and dQ of empty rows / dK, dV of keys no query sees are written as 0;
//   - device-side sequence lengths are clamped to [0, T] / [0, S] (our contract; cuDNN would read out of range).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attnlab/attention.h"
#include "core/mask.h"

namespace attnlab::cuda::cudnn {

// Keys seen by at least one query row of a sequence: the rows' key ranges move monotonically with the diagonal
// and consecutive ranges touch, so their union is one range — from the first non-empty row's begin to the last
// non-empty row's end. Empty when no row sees anything.
ATTNLAB_HOST_DEVICE inline core::KeyRange seen_keys(const MaskOptions& m, std::int64_t q_len, std::int64_t kv_len) {
  if (q_len <= 0 || kv_len <= 0) return {0, 0};
  const std::int64_t offset = m.align == MaskAlign::bottom_right ? kv_len - q_len : 0;  // d(i) = i + offset
  const std::int64_t right = core::effective_window_right(m);
  std::int64_t first = 0, last = q_len - 1;
  if (right >= 0 && -offset - right > first) first = -offset - right;  // rows with d(i) + right < 0 see nothing
  if (m.window_left >= 0 && kv_len + m.window_left - offset - 1 < last)  // rows with d(i) − left ≥ kv_len neither
    last = kv_len + m.window_left - offset - 1;
  if (first > last) return {0, 0};
  return {core::visible_keys(m, first, q_len, kv_len).begin, core::visible_keys(m, last, q_len, kv_len).end};
}

// A (B, L, H, D) tensor of 2-byte elements (f16/bf16) with element strides.
struct RowTensor {
  void* data = nullptr;
  std::int64_t strides[4] = {};
};

// Per-batch lengths on the device, already clamped; null means the full T / S.
struct Lengths {
  const std::int32_t* q = nullptr;
  const std::int32_t* kv = nullptr;
};

// Writes the (B) lengths cuDNN reads, q then kv, into `out` (2·B int32), each clamped to [0, T] / [0, S]. Inputs
// are device pointers with element strides; a null one is written as T / S when fill_missing, else left as is
// (its values were already copied there from the host).
void prepare_lengths(const std::int32_t* q_lens, std::int64_t q_stride, const std::int32_t* kv_lens,
                     std::int64_t kv_stride, std::int64_t B, std::int64_t T, std::int64_t S, bool fill_missing,
                     std::int32_t* out, cudaStream_t stream);

// After the forward graph, per row (b, n, i): a row with no visible key (padding, masks, or — when check_stats —
// non-finite Stats, i.e. only −inf scores) gets O = 0 and LSE = −inf; other rows get LSE = Stats when
// copy_stats (Stats went to the workspace because the caller's LSE layout is not cuDNN's).
struct ForwardFixup {
  std::int64_t B = 0, N = 0, T = 0, S = 0, Hv = 0;
  MaskOptions mask;
  Lengths lengths;
  RowTensor o;                    // (B, T, N, Hv)
  const float* stats = nullptr;   // packed (B, N, T); may alias lse when cuDNN wrote the caller's LSE directly
  float* lse = nullptr;           // caller's (B, N, T) or null
  std::int64_t lse_strides[3] = {};
  bool copy_stats = false;
  bool check_stats = false;
};
void forward_fixup(const ForwardFixup& args, cudaStream_t stream);

// Before the backward graph: packed[b, n, i] = lse[b, n, i], with −inf (a row that saw no key) turned into +inf so
// that cuDNN's exp(s − Stats) is exactly 0 on that row instead of NaN.
void prepare_backward_stats(const float* lse, const std::int64_t lse_strides[3], std::int64_t B, std::int64_t N,
                            std::int64_t T, float* packed, cudaStream_t stream);

// After the backward graph: dQ rows of query rows that see no key, and dK / dV rows of keys that no query row sees
// (padding included), are set to 0.
struct BackwardFixup {
  std::int64_t B = 0, N = 0, K = 0, T = 0, S = 0, Hqk = 0, Hv = 0;
  MaskOptions mask;
  Lengths lengths;
  RowTensor dq, dk, dv;  // (B, T, N, Hqk), (B, S, K, Hqk), (B, S, K, Hv)
};
void backward_fixup(const BackwardFixup& args, cudaStream_t stream);

// An FP8 forward run in batch chunks: amax_s = max over chunks of parts[2c], amax_o = max of parts[2c + 1] (a NaN
// anywhere wins, as one graph's amax would carry it); a null output is skipped.
void combine_chunk_amaxes(const float* parts, int chunks, float* amax_s, float* amax_o, cudaStream_t stream);

}  // namespace attnlab::cuda::cudnn
