// The flash kernels' parameters from a validated problem (make_params.h).
#include "cuda/flash/make_params.h"

#include <algorithm>
#include <cstdint>

#include "cuda/common/device.h"
#include "cuda/common/score_modifier.h"

namespace attnlab::cuda::flash {
namespace {

// Under a causal or window mask, query blocks differ in work: the scheduler (scheduler.cuh) starts the longest
// first across a section of (batch, head) pairs, whose K and V should stay in L2 while its blocks run. A section
// is the largest divisor of B·N whose keys and values fill at most half the L2 (equal sections: a short last one
// would end the grid on long blocks). Below 16 query blocks of 128 rows per head the spread of block lengths is
// small and a section is one pair, each head's blocks side by side (measured on the H200: longest-first across
// heads gained 2–4 % at T = 2k–8k but lost 1–4 % at T = 512). ATTNLAB_FLASH_SECTION_HEADS overrides the size
// when it divides B·N (tests and tuning).
int section_heads(const core::Problem& p, std::size_t l2_bytes, int forced) {
  const auto& d = p.dims;
  const std::int64_t heads = d.B * d.N;
  if (forced > 0 && heads % forced == 0) return int(forced);
  const bool banded = p.mask.causal || p.mask.window_left >= 0 || p.mask.window_right >= 0;
  if (!banded || d.T < 16 * 128) return 1;
  const double kv_bytes_per_head = double(d.S) * double(d.Hqk + d.Hv) * double(size_of(p.dtype)) / double(d.group());
  const std::int64_t fit = std::max<std::int64_t>(1, std::int64_t(0.5 * double(l2_bytes) / kv_bytes_per_head));
  std::int64_t best = 1;
  for (std::int64_t i = 1; i * i <= heads; ++i) {
    if (heads % i != 0) continue;
    if (i <= fit) best = std::max(best, i);
    if (heads / i <= fit) best = std::max(best, heads / i);
  }
  return int(best);
}

}  // namespace

FlashParams make_params(const core::Problem& p, const Tuning& tuning) {
  FlashParams f{};
  f.q = p.q.data, f.k = p.k.data, f.v = p.v.data, f.o = p.o.data;
  f.q_stride_b = p.q.strides[0], f.q_stride_t = p.q.strides[1], f.q_stride_n = p.q.strides[2];
  f.k_stride_b = p.k.strides[0], f.k_stride_s = p.k.strides[1], f.k_stride_n = p.k.strides[2];
  f.v_stride_b = p.v.strides[0], f.v_stride_s = p.v.strides[1], f.v_stride_n = p.v.strides[2];
  f.o_stride_b = p.o.strides[0], f.o_stride_t = p.o.strides[1], f.o_stride_n = p.o.strides[2];
  if (p.has_lse()) {
    f.lse = static_cast<float*>(p.lse.data);
    f.lse_stride_b = p.lse.strides[0], f.lse_stride_n = p.lse.strides[1], f.lse_stride_t = p.lse.strides[2];
  }
  const auto& d = p.dims;
  f.B = int(d.B), f.T = int(d.T), f.S = int(d.S), f.N = int(d.N), f.group = int(d.group());
  f.scale = p.scale;
  f.softcap = p.softcap;
  f.mask = p.mask;
  const ScoreModifier mod = score_modifier(p);
  f.bias = mod.bias;
  f.bias_dtype = mod.bias_dtype;
  f.bool_mask = mod.bool_mask;
  f.mod_stride_b = mod.stride_b, f.mod_stride_n = mod.stride_n, f.mod_stride_t = mod.stride_t;
  f.section_heads = section_heads(p, device_properties(p.device_index).l2_bytes, tuning.flash_section_heads);
  return f;
}

}  // namespace attnlab::cuda::flash
