// The flash-sm90 kernel versions: which are compiled at which head dims, and which one a call runs by default.
// Host code without CUDA, so that the rules are tested on any machine (tests/test_sm90_versions.cpp).
#pragma once

#include "core/problem.h"

namespace attnlab::cuda::sm90 {

// The kernel versions compiled for each instance (traits.h, kVersion). Versions are numbered 1–7, 11, 13, 15 and
// 26 (s1 … s7, s11, s13, s15, s26); 0 was s0, retired, 8, 9, 10, 12, 14, 16, 20, 21, 24, 25 and 27 … 31
// experiments not kept and 17–19, 22 and 23 probes that computed no attention (docs/perf-notes-flash-sm90.md), whose
// numbers are not reused. s2 and later need scale > 0; a call with another scale runs s1 (flash_sm90_path.cpp).
constexpr int kVersions = 27;  // one past the highest number (launch.cpp's dispatch asserts it)
constexpr bool version_exists(int version) {
  return (version >= 1 && version <= 7) || version == 11 || version == 13 || version == 15 || version == 26;
}

// Whether version `version` is compiled at head dims `head_qk`/`head_v` (src/CMakeLists.txt follows it). The
// persistent versions keep a walk's state beside O: s3 is not at 256, where it spilled to local memory beside O's
// 128 registers (and measured slower than s2), s5 not at 192/192 and 256, where it spilled with its consumers at
// 224 registers, and at 256 with every split of the CTA's registers tried (traits.h;
// docs/perf-notes-flash-sm90.md). s6's and s11's three consumer warpgroups and s7's 256-key tiles exist at head
// dim 64 alone (traits.h, query_block_rows and key_tile_rows), s13 (s4 with O rescaled before P·V) at 256 alone,
// s15 (s5 with FlashAttention-3's order of K/V loads and waits) and s26 (s15 with lazy row maxima) at 128 alone.
// The path refuses such a call by this rule.
constexpr bool version_built(int head_qk, int head_v, int version) {
  if (version == 3) return head_qk != 256;
  if (version == 5) return head_qk != 256 && !(head_qk == 192 && head_v == 192);
  if (version == 6 || version == 7 || version == 11) return head_qk == 64 && head_v == 64;
  if (version == 13) return head_qk == 256 && head_v == 256;
  if (version == 15 || version == 26) return head_qk == 128 && head_v == 128;
  return true;
}

// The version a call runs unless Tuning::flash_config names another (tests and A/B runs): the fastest measured
// (docs/perf-notes-flash-sm90.md, versions table; s1–s7 chosen on the H200, s11 against them on an H100 in three runs,
// every version in the same run). At head dim 64 by the shorter of T and S: s6 (three consumer warpgroups, a CTA per
// block) from 4096 without a mask and from 8192 with a causal one, up to 16383 (1.09–1.18× s5; s11 0.96–1.02× it
// without a mask; at 8k causal 0.87× in five-group bench runs, within 1–2 % over 50 groups or 1000 calls:
// docs/perf-notes-flash-sm90.md, "Head dim 64 at 8k causal"); s11 (three consumer warpgroups in persistent CTAs) from
// 2048 below that band and from 16384 on (1.02–1.05× the s7, s5 and s6 those rows ran before it); below 2048 s7
// (256-key tiles) from 512 without a mask (1.07–1.09× s5), s5 elsewhere (short sequences, and causal ones, where s7's
// 256-key tiles waste half a tile on the diagonal: 0.86–0.99× s5). With a window s6 from 8192 and s5 below (s7 and s11
// were not measured with windows). At 128 s26 (s15 with lazy row maxima: 0.90–0.92× s15's cycles on an H100 at T = 8k
// and 16k, 1.01–1.08× its time from T = 2k in two rounds, both masks; 0.96–1.04× at T = 512 and 1k), which s15 (s5 with
// FlashAttention-3's order of K/V loads and waits: 1.00–1.02× s5 on the H200 from T = 4k) preceded; s5 with windows
// (neither measured there). s5 at 96 and 192/128 (1.03–1.07× s2 at 96, 1.03–1.23× at 192/128); s2 at 192/192, where s5
// is not built. At 256, where s5 is not built either, s13 (FlashAttention-3's 80-key tiles, s4, with O rescaled before
// P·V is issued: s4 1.00–1.08× s2 on the H200 in two alternating rounds, T = 512 … 16k without a mask and causal from
// 1024; s13 1.00–1.03× s4 in two more), s2 for causal calls shorter than 1024 (s4 0.97× there, s13 0.99× s4) and with
// windows (neither measured with them). `packed` (a packed variable-length batch): s5 at 64 and 128, where it was
// measured, s2 elsewhere.
inline int default_version(const core::Problem& p, bool packed) {
  const auto& d = p.dims;
  const bool h64 = d.Hqk == 64 && d.Hv == 64;
  if (packed) return h64 || (d.Hqk == 128 && d.Hv == 128) ? 5 : 2;
  const std::int64_t length = d.T < d.S ? d.T : d.S;
  const bool window = p.mask.window_left >= 0 || p.mask.window_right >= 0;
  if (d.Hqk == 256 && d.Hv == 256) return window || (p.mask.causal && length < 1024) ? 2 : 13;
  if (!version_built(int(d.Hqk), int(d.Hv), 5)) return 2;  // 192/192
  if (d.Hqk == 128 && d.Hv == 128) return window ? 5 : 26;
  if (!h64) return 5;
  if (window) return length >= 8192 ? 6 : 5;
  if (length >= (p.mask.causal ? 8192 : 4096) && length < 16384) return 6;
  if (length >= 2048) return 11;
  if (p.mask.causal) return 5;
  return length >= 512 ? 7 : 5;
}

}  // namespace attnlab::cuda::sm90
