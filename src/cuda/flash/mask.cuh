// Which keys each query row sees (causal top-left / bottom-right, sliding window, sequence lengths: one band per
// row, core/mask.h's rule exactly), which key tiles a query block must visit at all, which of those need
// per-element masking, and the per-element score modifiers (softcap, bias, boolean mask).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/mask.h"
#include "cuda/common/dtype.cuh"
#include "cuda/flash/flash_params.h"

namespace attnlab::cuda::flash {

// The keys a block of query rows needs. Rows with no key form a prefix or a suffix of the rows (the band has a
// constant width until it is clipped at 0 or kv_len), and band edges never decrease with the row, so the first
// and last valid rows bound them all.
struct BlockKeys {
  int begin = 0, end = 0;            // union over rows: keys any row may see
  int full_begin = 0, full_end = 0;  // intersection: keys every row sees (a tile inside it needs no mask)
  __device__ bool empty() const { return end <= begin; }
};

__device__ __forceinline__ BlockKeys block_keys(const MaskOptions& mask, int first_row, int last_row, int q_len,
                                                int kv_len) {
  const core::KeyRange first = core::visible_keys(mask, first_row, q_len, kv_len);
  const core::KeyRange last = core::visible_keys(mask, last_row, q_len, kv_len);
  BlockKeys k;
  k.begin = int(first.begin);
  k.end = int(first.end > last.end ? first.end : last.end);
  if (k.end > kv_len) k.end = kv_len;
  if (!first.empty() && !last.empty()) {
    k.full_begin = int(last.begin);
    k.full_end = int(first.end);
  }
  return k;
}

// Per-element modifiers and the band, applied to one thread's slice of a score tile. Scores arrive as raw q·k;
// after apply() they are in log2 units (scale · log2 e folded in) so that p = exp2(s − m). kModifiers (softcap,
// bias or boolean mask present) is a template flag: the per-element loads and tanh would otherwise cost the plain
// kernel registers it needs for accumulators.
template <bool kModifiers>
struct ScoreRule {
  float scale_log2;  // scale · log2 e
  float scale;
  float softcap;     // 0 = none

  // Transforms score s at (row, col); `visible` says whether the band lets the row see the key.
  __device__ __forceinline__ float apply(const FlashParams& p, std::int64_t mod_base, float s, int row, int col,
                                         bool visible) const {
    if (!visible) return -INFINITY;
    if constexpr (!kModifiers) {
      return s * scale_log2;
    } else {
      float x = s * scale;
      if (softcap > 0.0f) x = softcap * tanhf(__fdividef(x, softcap));
      const std::int64_t at = mod_base + std::int64_t(row) * p.mod_stride_t + col;
      if (p.bias != nullptr) x += load_as_float(p.bias, p.bias_dtype, at);
      if (p.bool_mask != nullptr && p.bool_mask[at] == 0) return -INFINITY;
      return x * 1.4426950408889634f;
    }
  }
};

}  // namespace attnlab::cuda::flash
