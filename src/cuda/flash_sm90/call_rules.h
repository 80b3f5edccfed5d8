// What the sm_90a kernel accepts and which version a call runs, for any problem handed to it: a padded call
// (flash_sm90_path.cpp) or a packed variable-length batch described as one (varlen.cpp).
#pragma once

#include <optional>
#include <string>

#include "core/problem.h"

namespace attnlab::cuda::sm90 {

// Why the kernel cannot run `p` (its rule, in words), or nullopt; `packed` for a packed variable-length batch
// (the version it would run is call_version(p, packed)).
std::optional<std::string> call_rules(const core::Problem& p, bool packed = false);

// The version a call runs unless Tuning::flash_config names another (tests and A/B runs): the fastest measured on
// the H200 (docs/perf-notes-flash-sm90.md). At head dim 64, s6 (three consumer warpgroups) for long padded
// sequences — T and S ≥ 8192, or ≥ 4096 without a mask — where it measured 1.09–1.17× s2 and ahead of s5, and s5
// below, where s5's persistent CTAs won; s5 at 96, 128 and 192/128 (1.03–1.07× s2 at 96, 1.03–1.23× at 192/128);
// s2 at 192/192 and 256, where s5 is not built. `packed` (a packed variable-length batch): s5 at 64 and 128, where
// it was measured, s2 elsewhere.
int default_version(const core::Problem& p, bool packed);

// The kernel version `p` runs (launch.h): Tuning::flash_config or default_version, s1 where the others cannot.
int call_version(const core::Problem& p, bool packed = false);

}  // namespace attnlab::cuda::sm90
