// The TMA tensor maps of one call (host side): each of Q, K, V, O as a 4-D tensor (head dim, sequence, heads,
// batches) over the caller's memory with its own strides, boxes of 64 head-dim elements (128 bytes, the swizzle
// width) × the rows one load or store moves. Built per call: cuTensorMapEncodeTiled is a host computation of
// about a microsecond, and a cached map would hold the caller's pointers past the call.
#pragma once

#include <optional>
#include <string>

#include "core/problem.h"
#include "cuda/flash_sm90/params.h"

namespace attnlab::cuda::sm90 {

// What TMA needs from a tensor: the base 16-byte aligned and each stride of a dimension larger than 1 a multiple
// of 16 bytes below 2^40 bytes. nullopt when Q, K, V and O all qualify, else the rule they break.
std::optional<std::string> tensor_map_rule(const core::Problem& p);

// Fills params.q / k / v / o for kernel version `version` (its key tiles size K's and V's boxes) and the packing
// already in params (apply_query_packing: Q's box); throws Error(internal) if the driver refuses a map the rule
// accepted.
void build_tensor_maps(const core::Problem& p, int version, KernelParams& params);

}  // namespace attnlab::cuda::sm90
