// The host side of a packed batch on the sm_90a kernel (varlen.h). The batch is described to the kernel's rules,
// parameters and tensor maps as a padded problem of B sequences of the maximum lengths whose tensors are one batch
// of total rows; the kernel parameters then say where each sequence's rows start (PackedRows) instead of which
// batch index holds them.
#include "cuda/flash_sm90/varlen.h"

#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "core/context_impl.h"
#include "core/error.h"
#include "core/path.h"  // workspace_shortfall
#include "cuda/common/call_scratch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"
#include "cuda/flash/make_params.h"
#include "cuda/flash_sm90/call_rules.h"
#include "cuda/flash_sm90/launch.h"
#include "cuda/flash_sm90/query_packing.h"
#include "cuda/flash_sm90/tensor_maps.h"
#include "cuda/flash_sm90/traits.h"

namespace attnlab::cuda::sm90 {
namespace {

// A packed (rows, heads, H) tensor as the (1, rows, heads, H) view the tensor maps take.
TensorView as_one_batch(const TensorView& t) {
  TensorView v = t;
  v.rank = 4;
  v.shape = {1, t.shape[0], t.shape[1], t.shape[2]};
  v.strides = {t.shape[0] * t.strides[0], t.strides[0], t.strides[1], t.strides[2]};
  return v;
}

core::Problem as_problem(const VarlenForwardArgs& a, const core::VarlenLayout& l, const Tuning& tuning) {
  core::Problem p;
  p.dims = {l.B, a.max_seqlen_q, a.max_seqlen_k, l.N, l.K, l.Hqk, l.Hv};
  p.dtype = l.dtype;
  p.device = Device::cuda;
  p.device_index = a.q.device_index;
  p.q = as_one_batch(a.q), p.k = as_one_batch(a.k), p.v = as_one_batch(a.v), p.o = as_one_batch(a.o);
  p.scale = a.options.scale.value_or(float(1.0 / std::sqrt(double(l.Hqk))));  // as core/validate.cpp
  p.softcap = a.options.softcap;
  p.mask = a.options.mask;
  p.workspace = a.workspace;
  p.tuning = &tuning;
  return p;
}

// The block counter of s5, s7, s11, s15, s26, s29, s30 and s31 (scheduler.cuh, DynamicWalk) where the batch's blocks
// outnumber the SMs: a 16-byte piece of scratch, as for a padded call (flash_sm90_path.cpp). The grid has a block per
// ⌈max_seqlen_q / rows⌉ position blocks of every sequence and query head (those past a sequence's length exit at once).
std::size_t counter_bytes(const core::Problem& p, int version) {
  if (!walks_dynamically(version)) return 0;
  const long long blocks = block_count(p, unpacked(query_block_rows(version)));
  return dynamic_walk_needs_counter(blocks, device_properties(p.device_index).sm_count) ? 16 : 0;
}

}  // namespace

std::size_t varlen_workspace_bytes(const VarlenForwardArgs& a, const core::VarlenLayout& l, const Tuning& tuning) {
  const core::Problem p = as_problem(a, l, tuning);
  return counter_bytes(p, call_version(p, /*packed=*/true));
}

std::optional<std::string> varlen_refusal(const VarlenForwardArgs& a, const core::VarlenLayout& l,
                                          const Tuning& tuning) {
  if (l.paged)
    return std::string("paged KV caches run on the split-KV kernel (path flash or flash-sm80), which reads pages "
                       "through the block table");
  if (a.k.shape[0] == 0 || l.total_q == 0)
    return std::string("needs at least one packed query row and one key row (TMA maps no empty tensor)");
  const core::Problem p = as_problem(a, l, tuning);
  if (auto why = call_rules(p, /*packed=*/true)) return why;
  // A caller workspace must hold the call's scratch (s5's counter), so that why_not and the call agree.
  if (a.workspace) return core::workspace_shortfall(p, counter_bytes(p, call_version(p, /*packed=*/true)));
  return std::nullopt;
}

void run_varlen(Context& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l) {
  Context::Impl& impl = ctx.impl();
  const core::Problem p = as_problem(a, l, impl.tuning);
  const auto stream = static_cast<cudaStream_t>(impl.stream);
  const int version = call_version(p, /*packed=*/true);
  const std::size_t scratch_bytes = counter_bytes(p, version);
  const core::Problem owner = scratch_owner(p.device_index, a.workspace);
  if (scratch_bytes > 0)
    if (auto why = scratch_refusal(impl, owner, scratch_bytes, stream))
      core::fail(ErrorCode::unsupported, "path flash-sm90: {}", *why);
  if (a.max_seqlen_q == 0) return;  // no query rows: nothing to write
  KernelParams params{};
  params.p = flash::make_params(p, impl.tuning);
  // Rows and offsets come from the packed layout, not from per-batch lengths or batch strides.
  params.p.q_seqlens = params.p.kv_seqlens = nullptr;
  if (!a.lse.empty()) {
    params.p.lse = static_cast<float*>(a.lse.data);
    params.p.lse_stride_b = 0, params.p.lse_stride_n = a.lse.strides[0], params.p.lse_stride_t = a.lse.strides[1];
  }
  params.packed.cu_q = static_cast<const std::int32_t*>(a.cu_seqlens_q.data);
  params.packed.cu_k = static_cast<const std::int32_t*>(a.cu_seqlens_k.data);
  params.packed.cu_q_stride = a.cu_seqlens_q.strides[0], params.packed.cu_k_stride = a.cu_seqlens_k.strides[0];
  params.packed.total_q = int(l.total_q), params.packed.total_k = int(a.k.shape[0]);
  if (!a.sinks.empty())
    params.sinks = static_cast<const float*>(a.sinks.data), params.sinks_stride = a.sinks.strides[0];
  apply_query_packing(unpacked(query_block_rows(version)), params);  // the version's block rows, no head packing
  build_tensor_maps(p, version, params);
  DeviceGuard guard(p.device_index);
  if (scratch_bytes > 0) {
    // The walk's counter (s5, s7, s11, s15, s26, s29, s30, s31) starts at zero for every launch, in the stream's order.
    ScratchLease scratch(impl, owner, scratch_bytes, stream, "flash-sm90");
    params.tile_counter = reinterpret_cast<std::int32_t*>(scratch.data());
    check_cuda(cudaMemsetAsync(params.tile_counter, 0, sizeof(std::int32_t), stream),
               "flash-sm90: zeroing the block counter");
    launch_forward(p.dtype, int(l.Hqk), int(l.Hv), version, params, p.device_index, stream);
  } else {
    launch_forward(p.dtype, int(l.Hqk), int(l.Hv), version, params, p.device_index, stream);
  }
  impl.ran_member = "flash-sm90";
}

}  // namespace attnlab::cuda::sm90
