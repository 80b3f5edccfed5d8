// What the sm_90a kernel accepts and which version a call runs, for any problem handed to it: a padded call
// (flash_sm90_path.cpp) or a packed variable-length batch described as one (varlen.cpp).
#pragma once

#include <optional>
#include <string>

#include "core/problem.h"
#include "cuda/flash_sm90/versions.h"

namespace attnlab::cuda::sm90 {

// Why the kernel cannot run `p` (its rule, in words), or nullopt; `packed` for a packed variable-length batch
// (the version it would run is call_version(p, packed)).
std::optional<std::string> call_rules(const core::Problem& p, bool packed = false);

// default_version (the version a call runs unless Tuning::flash_config names another): versions.h.

// The kernel version `p` runs (launch.h): Tuning::flash_config or default_version, s1 where the others cannot.
int call_version(const core::Problem& p, bool packed = false);

}  // namespace attnlab::cuda::sm90
