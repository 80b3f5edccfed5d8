// Packed variable-length batches (include/attnlab/serving.h's VarlenForwardArgs with packed keys) on the sm_90a
// kernel: each packed tensor is mapped as one batch of all its rows, and every block finds its sequence's rows
// from the offsets on the device (params.h, PackedRows). Paged caches stay on the split-KV kernel
// (cuda/serving/split_kv.h), which reads pages through the block table row by row.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "attnlab/serving.h"
#include "core/validate_serving.h"

namespace attnlab::cuda::sm90 {

// Why the sm_90a kernel cannot run the batch (its rule, in words), or nullopt.
std::optional<std::string> varlen_refusal(const VarlenForwardArgs& a, const core::VarlenLayout& l,
                                          const Tuning& tuning);

// Scratch bytes of the call: s5's block counter where its CTAs walk several blocks (16), else none (the offsets
// are read in place).
std::size_t varlen_workspace_bytes(const VarlenForwardArgs& a, const core::VarlenLayout& l, const Tuning& tuning);

// Runs the batch on the context's stream (after varlen_refusal said yes), its scratch from the caller's workspace
// or the context's (cuda/common/call_scratch.h); a caller workspace below varlen_workspace_bytes is refused before
// anything is written.
void run_varlen(Context& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l);

}  // namespace attnlab::cuda::sm90
