// The interval part of every mask (causal, sliding window, sequence lengths): for each query row, the keys it may
// see form one contiguous range. Shared by every CPU path and by tile-skipping logic.
#pragma once

#include <algorithm>
#include <cstdint>

#include "attnlab/attention.h"

// Usable from CUDA kernels too: the GPU paths apply the very same rule.
#if defined(__CUDACC__)
#define ATTNLAB_HOST_DEVICE __host__ __device__
#else
#define ATTNLAB_HOST_DEVICE
#endif

namespace attnlab::core {

struct KeyRange {
  std::int64_t begin = 0;  // first visible key
  std::int64_t end = 0;    // one past the last visible key; end == begin means the row sees nothing
  ATTNLAB_HOST_DEVICE bool empty() const { return end <= begin; }
};

// Effective right bound of the window: causal means right = 0 (and clamps a wider window).
ATTNLAB_HOST_DEVICE inline std::int64_t effective_window_right(const MaskOptions& m) {
  if (m.causal) return m.window_right < 0 ? 0 : std::min<std::int64_t>(0, m.window_right);
  return m.window_right;
}

// Keys visible to query row i of a sequence with q_len queries and kv_len keys (row i ≥ q_len sees nothing).
ATTNLAB_HOST_DEVICE inline KeyRange visible_keys(const MaskOptions& m, std::int64_t i, std::int64_t q_len,
                                                std::int64_t kv_len) {
  if (i >= q_len || kv_len <= 0) return {0, 0};
  const std::int64_t diagonal = i + (m.align == MaskAlign::bottom_right ? kv_len - q_len : 0);
  std::int64_t begin = 0;
  std::int64_t end = kv_len;
  // A bound of q_len + kv_len or more hides nothing (|diagonal| ≤ q_len + kv_len); skipping it also keeps huge
  // windows (e.g. INT64_MAX) from overflowing.
  const std::int64_t reach = q_len + kv_len;
  const std::int64_t right = effective_window_right(m);
  if (right >= 0 && right < reach) end = std::min(end, diagonal + right + 1);
  if (m.window_left >= 0 && m.window_left < reach) begin = std::max(begin, diagonal - m.window_left);
  if (end < begin) end = begin;
  return {begin, end};
}

}  // namespace attnlab::core
