// The serving calls (include/attnlab/serving.h) on the cudnn path: a packed batch as cuDNN's ragged (THD) layout,
// a paged cache through its page tables, one graph per (batch size, maximum lengths rounded up to powers of two,
// layout), cached with the padded calls' graphs (cudnn_cache.h). docs/serving.md lists what it takes.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "attnlab/serving.h"
#include "core/context_impl.h"
#include "core/validate_serving.h"

namespace attnlab::cuda::cudnn {

// Why the cudnn path cannot run the batch, or nullopt. Past the rules it finds (builds on first use) the call's
// graph, so that a case cuDNN cannot build is refused here, by cuDNN's reason.
std::optional<std::string> varlen_refusal(Context::Impl& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l);

// Device scratch bytes of the call: cuDNN's workspace, the derived lengths, offsets and page table, and the
// statistics when an LSE is asked for. Call after varlen_refusal() said yes.
std::size_t varlen_workspace_bytes(Context::Impl& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l);

// Enqueues the call on the context's stream: prepare kernel, graph, finish kernel. Throws with the refusal when
// there is one.
void run_varlen(Context::Impl& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l);

}  // namespace attnlab::cuda::cudnn
