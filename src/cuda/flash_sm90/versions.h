// The flash-sm90 kernel versions: which are compiled at which head dims, and which one a call runs by default.
// Host code without CUDA, so that the rules are tested on any machine (tests/test_sm90_versions.cpp).
#pragma once

#include "core/problem.h"

namespace attnlab::cuda::sm90 {

// The kernel versions compiled for each instance (traits.h, kVersion). Versions are numbered 1–7 and 11 (s1 … s7,
// s11); 0 was s0, retired, and 8, 9 and 10 experiments not kept (docs/perf-notes-flash-sm90.md), whose numbers are
// not reused. s2 and later need scale > 0; a call with another scale runs s1 (flash_sm90_path.cpp).
constexpr int kVersions = 12;  // one past the highest number (launch.cpp's dispatch asserts it)
constexpr bool version_exists(int version) { return (version >= 1 && version <= 7) || version == 11; }

// Whether version `version` is compiled at head dims `head_qk`/`head_v` (src/CMakeLists.txt follows it). The
// persistent versions keep a walk's state beside O: s3 is not at 256, where it spilled to local memory beside O's
// 128 registers (and measured slower than s2), s5 not at 192/192 and 256, where it spilled with its consumers at
// 224 registers (traits.h; docs/perf-notes-flash-sm90.md). s6's and s11's three consumer warpgroups and s7's
// 256-key tiles exist at head dim 64 alone (traits.h, query_block_rows and key_tile_rows). The path refuses such a
// call by this rule.
constexpr bool version_built(int head_qk, int head_v, int version) {
  if (version == 3) return head_qk != 256;
  if (version == 5) return head_qk != 256 && !(head_qk == 192 && head_v == 192);
  if (version == 6 || version == 7 || version == 11) return head_qk == 64 && head_v == 64;
  return true;
}

// The version a call runs unless Tuning::flash_config names another (tests and A/B runs): the fastest measured on
// the H200 (docs/perf-notes-flash-sm90.md, versions table). At head dim 64 by the shorter of T and S: s6 (three
// consumer warpgroups) from 4096 without a mask and from 8192 with one (1.09–1.18× s5); below that s7 (256-key
// tiles) from 512 without a mask (1.07–1.09× s5) and from 4096 with a causal one (1.04×), s5 elsewhere (short
// sequences, windows, and causal ones below 4096, where s7's 256-key tiles waste half a tile on the diagonal:
// 0.86–0.99× s5). s5 at 96, 128 and 192/128 (1.03–1.07× s2 at 96, 1.03–1.23× at 192/128); s2 at 192/192 and 256,
// where s5 is not built.
// `packed` (a packed variable-length batch): s5 at 64 and 128, where it was measured, s2 elsewhere.
inline int default_version(const core::Problem& p, bool packed) {
  const auto& d = p.dims;
  if (!version_built(int(d.Hqk), int(d.Hv), 5)) return 2;  // 192/192 and 256
  const bool h64 = d.Hqk == 64 && d.Hv == 64;
  if (packed) return h64 || (d.Hqk == 128 && d.Hv == 128) ? 5 : 2;
  if (!h64) return 5;
  const bool window = p.mask.window_left >= 0 || p.mask.window_right >= 0;
  const bool masked = p.mask.causal || window;
  const std::int64_t length = d.T < d.S ? d.T : d.S;
  if (length >= (masked ? 8192 : 4096)) return 6;
  if (!window && length >= (masked ? 4096 : 512)) return 7;  // windows were not measured on s7
  return 5;
}

}  // namespace attnlab::cuda::sm90
