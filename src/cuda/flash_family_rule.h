// Which member of path `flash` takes a small call on a GPU where both families run it: host code without CUDA,
// so that the rule is tested on any machine (tests/test_flash_family_rule.cpp).
//
// A call this small is one block's latency, not its FLOPs: its grid leaves SMs idle, so its time is the launch,
// the host's work before it and one block from start to end. There flash-sm80's small-problem kernel (64-row
// blocks of 4 warps, cuda/flash/tile_configs.h, SmallList) beats flash-sm90, whose call encodes four TMA
// descriptors on the host and whose 128-row block starts three warpgroups, initializes its mbarriers and fills a
// pipeline for one key tile. Measured on the H200 at the codelab's default shape (4, 128, 8, 64) bf16, three
// processes per family (docs/perf-notes-flash-sm90.md, the s6 table's notes; docs/results/h200/codelab-families.jsonl):
// flash-sm80 6.1–6.3 µs per call back to back and 4.4 µs per graph replay, flash-sm90 6.9–7.1 and 6.1. Then
// bench/workloads_fwd_small.json's rows on both families (docs/results/h200/flash-small-calls.jsonl; the table in
// docs/perf-notes-flash-sm90.md): at head dim 64 flash-sm80 ahead up to 256 keys (1.04–1.19× back to back,
// 1.16–1.38× per graph replay; (4, 256, 256, 8) 6.9 against 8.2 µs), flash-sm90 from 512 (0.82–0.95× from
// 512 keys); at head dim 128 flash-sm90 ahead on every row (flash-sm80 0.41–0.96×).
//
// The rule covers those measurements' kind of call and no further: head dim 64 (where flash-sm80 has its
// small-problem list), at most 256 keys, flash-sm80's own test for a grid that leaves SMs idle (launch.cuh,
// leaves_sms_idle: ⌈T / 128⌉ · N · B below the SM count), and no packed query heads (N / K ≥ 2 with T ≤ 64:
// flash-sm90 then loads each K/V tile once for a KV head's query heads, where flash-sm80 loads it once per query
// head).
#pragma once

#include <cstdint>

#include "core/problem.h"

namespace attnlab::cuda {

inline constexpr std::int64_t kSmallCallMaxKeys = 256;

// Whether the call's shape is one the rule covers, before the SM count is asked (the device is asked only then).
inline bool small_call_shape(const core::Dims& d) {
  if (d.Hqk != 64 || d.Hv != 64) return false;
  if (d.B < 1 || d.N < 1 || d.K < 1 || d.T < 1 || d.S < 1 || d.S > kSmallCallMaxKeys) return false;
  const bool packs_query_heads = d.N / d.K >= 2 && d.T <= 64;
  return !packs_query_heads;
}

// Whether `flash` hands the call to flash-sm80: small_call_shape() and a grid of flash-sm80's 128-row blocks that
// leaves some of the `sm_count()` SMs idle. `sm_count` is called only for a shape the rule covers.
template <class SmCount>
bool small_call_runs_sm80(const core::Dims& d, SmCount sm_count) {
  if (!small_call_shape(d)) return false;
  const std::int64_t blocks = (d.T + 127) / 128 * d.N * d.B;
  return blocks < std::int64_t(sm_count());
}

}  // namespace attnlab::cuda
