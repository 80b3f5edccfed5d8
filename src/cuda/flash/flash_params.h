// Everything one flash forward launch needs, as plain values: the kernel receives this struct by value. Built on
// the host from a validated core::Problem (flash_path.cpp); read on the device by the kernel's parts.
#pragma once

#include <cstdint>

#include "attnlab/attention.h"

namespace attnlab::cuda::flash {

struct FlashParams {
  // Tensors (B, L, H, D) with the last dimension contiguous; strides in elements.
  const void* q;
  const void* k;
  const void* v;
  void* o;
  std::int64_t q_stride_b, q_stride_t, q_stride_n;
  std::int64_t k_stride_b, k_stride_s, k_stride_n;
  std::int64_t v_stride_b, v_stride_s, v_stride_n;
  std::int64_t o_stride_b, o_stride_t, o_stride_n;
  float* lse;  // (B, N, T) f32, or null
  std::int64_t lse_stride_b, lse_stride_n, lse_stride_t;

  int B, T, S, N, group;  // group = N / K: query heads per KV head

  // Scores: s = scale · q·k; with softcap c > 0, s = c · tanh(s / c); then + bias; then the mask.
  float scale;
  float softcap;  // 0 = none
  // Causal / window as one band around the diagonal (core/mask.h); bottom_right shifts the diagonal by
  // kv_len − q_len per batch.
  MaskOptions mask;
  const std::int32_t* q_seqlens;   // per batch on the device, or null (= T)
  const std::int32_t* kv_seqlens;  // per batch on the device, or null (= S)

  // An additive bias or a boolean mask, broadcast over (B|1, N|1, T, S): stride 0 on a broadcast dimension.
  const void* bias;
  DType bias_dtype;
  const std::uint8_t* bool_mask;
  std::int64_t mod_stride_b, mod_stride_n, mod_stride_t;

  // Banded masks: (batch, head) pairs per scheduling section, a divisor of B·N (scheduler.cuh).
  int section_heads;
};

}  // namespace attnlab::cuda::flash
