#include "cuda/serving/split_kv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/context_impl.h"
#include "core/error.h"
#include "core/problem.h"
#include "cuda/common/call_scratch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"
#include "cuda/common/scratch_layout.h"
#include "cuda/serving/split_kv_splits.h"

namespace attnlab::cuda::serving {
namespace {

// The head dims with a generated instance (src/CMakeLists.txt names them; split_kv_instances.inc carries them).
constexpr int kBuiltHeadDims[] = {
#define ATTNLAB_SPLIT_KV_HEAD_DIM(D) D,
#include "cuda/serving/split_kv_instances.inc"
#undef ATTNLAB_SPLIT_KV_HEAD_DIM
};

template <class Element>
bool launch_for_head_dim(int head_dim, const SplitKvParams& p, const SplitKvPlan& plan, cudaStream_t stream) {
  switch (head_dim) {
#define ATTNLAB_SPLIT_KV_HEAD_DIM(D) \
  case D: launch_split_kv<Element, D>(p, plan, stream); return true;
#include "cuda/serving/split_kv_instances.inc"
#undef ATTNLAB_SPLIT_KV_HEAD_DIM
    default: return false;
  }
}

// Whether the device holds clusters of the plan's splits for this dtype and head dim (split_kv_launch.cuh).
bool clusters_fit(DType dtype, int head_dim, int device, int row_warps, int splits) {
  DeviceGuard guard(device);  // the kernel's attributes and occupancy are the current device's
  switch (head_dim) {
#define ATTNLAB_SPLIT_KV_HEAD_DIM(D)                                                                  \
  case D:                                                                                             \
    return dtype == DType::bf16 ? split_kv_clusters_fit<__nv_bfloat16, D>(device, row_warps, splits) \
                                : split_kv_clusters_fit<__half, D>(device, row_warps, splits);
#include "cuda/serving/split_kv_instances.inc"
#undef ATTNLAB_SPLIT_KV_HEAD_DIM
    default: return false;
  }
}

// A tensor whose rows the kernel copies in 16-byte pieces: unit stride in the head dim, every other stride a
// multiple of 8 elements, the data 16-byte aligned.
std::optional<std::string> row_refusal(const char* name, const TensorView& t) {
  if (t.strides[t.rank - 1] != 1) return fmt::format("{}'s head dim must have stride 1", name);
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.strides[d] % 8 != 0)
      return fmt::format("{}'s strides must be multiples of 8 elements (16-byte rows), got {} in dim {}", name,
                         t.strides[d], d);
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return fmt::format("{} must be 16-byte aligned", name);
  return std::nullopt;
}

struct Scratch {
  SplitKvPlan plan;
  std::size_t bytes = 0;
};

Scratch scratch_of(const VarlenForwardArgs& a, const core::VarlenLayout& l, const Tuning& tuning) {
  Scratch s;
  s.plan = plan_split_kv(a, l, tuning);
  ScratchLayout layout("split-KV");
  if (s.plan.splits > 1 && !s.plan.cluster_merge) {
    const std::size_t rows = layout.checked_mul(std::size_t(s.plan.splits), std::size_t(l.total_q * l.N));
    layout.add(rows, std::size_t(l.Hv) * sizeof(float));
    s.plan.part_lse_offset = layout.add(rows, sizeof(float));
  }
  s.bytes = layout.size();
  s.plan.workspace_bytes = s.bytes;
  return s;
}


}  // namespace

SplitKvPlan plan_split_kv(const VarlenForwardArgs& a, const core::VarlenLayout& l, const Tuning& tuning) {
  SplitKvPlan plan;
  plan.device = a.q.device_index;
  const std::int64_t rows = a.max_seqlen_q * (l.N / l.K);  // a sequence's (token, head) pairs per KV head
  plan.row_warps = rows <= 16 ? 1 : rows <= 32 ? 2 : 4;
  plan.q_tiles = int(std::min<std::int64_t>((rows + 16 * plan.row_warps - 1) / (16 * plan.row_warps),
                                            std::numeric_limits<int>::max()));
  const std::int64_t blocks = std::int64_t(plan.q_tiles) * l.K * l.B;
  const DeviceProperties& device = device_properties(a.q.device_index);
  plan.dependent_launch = device.cc_major >= 9;
  const std::int64_t slots = std::int64_t(device.sm_count) * split_kv_blocks_per_sm(l.Hqk);
  plan.splits = split_kv_splits(blocks, slots, a.max_seqlen_k, tuning.split_kv_splits);
  // Clusters of up to 16 blocks at two blocks per SM (head dims up to 128); the device is asked last, once per
  // count (split_kv_launch.cuh).
  plan.cluster_merge = tuning.split_kv_cluster_merge == 1 && plan.dependent_launch && l.Hqk <= 128 &&
                       (l.dtype == DType::bf16 || l.dtype == DType::f16) &&
                       split_kv_cluster_merge(plan.splits, a.max_seqlen_k, tuning.split_kv_splits) &&
                       clusters_fit(l.dtype, int(l.Hqk), a.q.device_index, plan.row_warps, plan.splits);
  return plan;
}

std::optional<std::string> split_kv_refusal(const VarlenForwardArgs& a, const core::VarlenLayout& l,
                                            const Tuning& tuning) {
  if (l.dtype != DType::f16 && l.dtype != DType::bf16)
    return fmt::format("the split-KV kernel takes f16 and bf16, got {}", to_string(l.dtype));
  if (l.Hqk != l.Hv) return fmt::format("the split-KV kernel needs Hqk = Hv, got {} and {}", l.Hqk, l.Hv);
  if (std::find(std::begin(kBuiltHeadDims), std::end(kBuiltHeadDims), l.Hqk) == std::end(kBuiltHeadDims))
    return fmt::format("the split-KV kernel is built for head dims 64, 128 and 256, got {}", l.Hqk);
  const DeviceProperties& d = device_properties(a.q.device_index);
  if (d.cc_major < 8) return fmt::format("the split-KV kernel needs compute capability ≥ 8.0, {} has {}.{}", d.name,
                                         d.cc_major, d.cc_minor);
  const TensorView& k = a.paged ? a.paged->k_cache : a.k;
  const TensorView& v = a.paged ? a.paged->v_cache : a.v;
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"q", &a.q}, {"o", &a.o},
                                {a.paged ? "paged.k_cache" : "k", &k}, {a.paged ? "paged.v_cache" : "v", &v}})
    if (auto why = row_refusal(name, *t)) return why;
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  if (l.B > 65535 || l.N > 65535)
    return fmt::format("the split-KV kernel's grid holds at most 65535 sequences and heads, got B = {}, N = {}", l.B,
                       l.N);
  if (l.total_q > kIntMax || k.shape[0] > kIntMax || a.max_seqlen_k > kIntMax || a.max_seqlen_q * (l.N / l.K) > kIntMax)
    return fmt::format("the split-KV kernel indexes rows and keys with 32-bit integers: at most {} each", kIntMax);
  if (a.paged && l.pages_per_sequence * l.page_size > kIntMax)
    return fmt::format("the split-KV kernel indexes keys with 32-bit integers: pages per sequence · page size must be "
                       "at most {}",
                       kIntMax);
  const SplitKvPlan plan = plan_split_kv(a, l, tuning);
  if (std::int64_t(plan.q_tiles) * plan.splits > kIntMax)
    return fmt::format("the split-KV kernel's grid: {} query tiles of a sequence is too many", plan.q_tiles);
  if (a.workspace) {
    const std::size_t needed = split_kv_workspace_bytes(a, l, tuning);
    if (needed > a.workspace->bytes)
      return fmt::format("needs {} bytes of workspace; the caller's holds {} (attnlab::workspace_size says what a "
                         "call needs)",
                         needed, a.workspace->bytes);
  }
  return std::nullopt;
}

std::size_t split_kv_workspace_bytes(const VarlenForwardArgs& a, const core::VarlenLayout& l, const Tuning& tuning) {
  return scratch_of(a, l, tuning).bytes;
}

void run_split_kv(Context& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l) {
  Context::Impl& impl = ctx.impl();
  const Scratch scratch = scratch_of(a, l, impl.tuning);
  const SplitKvPlan& plan = scratch.plan;
  const auto stream = static_cast<cudaStream_t>(impl.stream);
  const core::Problem owner = scratch_owner(a.q.device_index, a.workspace);
  if (auto why = scratch_refusal(impl, owner, scratch.bytes, stream))
    core::fail(ErrorCode::unsupported, "path flash-sm80: {}", *why);
  if (a.max_seqlen_q == 0 || l.total_q == 0) return;  // no query rows: nothing to write
  DeviceGuard guard(a.q.device_index);
  ScratchLease lease(impl, owner, scratch.bytes, stream, "split-KV");

  // Offsets, lengths and block tables are on the device with q (core/validate_serving.cpp: one device per call).
  auto ints = [](const TensorView& t) { return static_cast<const std::int32_t*>(t.data); };

  SplitKvParams p;
  p.q = a.q.data, p.q_row = a.q.strides[0], p.q_head = a.q.strides[1];
  p.o = a.o.data, p.o_row = a.o.strides[0], p.o_head = a.o.strides[1];
  if (!a.lse.empty()) p.lse = static_cast<float*>(a.lse.data), p.lse_head = a.lse.strides[0], p.lse_row = a.lse.strides[1];
  p.cu_q = ints(a.cu_seqlens_q), p.cu_q_stride = a.cu_seqlens_q.strides[0];
  p.total_q = int(l.total_q);
  if (a.paged) {
    const PagedKV& c = *a.paged;
    p.k = c.k_cache.data, p.v = c.v_cache.data;
    p.k_page = c.k_cache.strides[0], p.k_row = c.k_cache.strides[1], p.k_head = c.k_cache.strides[2];
    p.v_page = c.v_cache.strides[0], p.v_row = c.v_cache.strides[1], p.v_head = c.v_cache.strides[2];
    p.block_table = ints(c.block_table);
    p.table_b = c.block_table.strides[0], p.table_p = c.block_table.strides[1];
    p.page_size = int(l.page_size), p.pages = int(std::min<std::int64_t>(l.pages, std::numeric_limits<int>::max()));
    p.pages_per_sequence = int(l.pages_per_sequence);
    if ((l.page_size & (l.page_size - 1)) == 0) p.page_shift = __builtin_ctzll(std::uint64_t(l.page_size));
    p.seqlens_k = ints(c.seqlens), p.seqlens_stride = c.seqlens.strides[0];
  } else {
    p.k = a.k.data, p.v = a.v.data;
    p.k_row = a.k.strides[0], p.k_head = a.k.strides[1];
    p.v_row = a.v.strides[0], p.v_head = a.v.strides[1];
    p.cu_k = ints(a.cu_seqlens_k), p.cu_k_stride = a.cu_seqlens_k.strides[0];
    p.total_k = int(a.k.shape[0]);
  }
  p.B = int(l.B), p.N = int(l.N), p.K = int(l.K), p.group = int(l.N / l.K);
  p.max_q = int(a.max_seqlen_q);
  p.scale = a.options.scale.value_or(float(1.0 / std::sqrt(double(l.Hqk))));  // as core/validate.cpp
  p.softcap = a.options.softcap;
  p.mask = a.options.mask;
  if (!a.sinks.empty()) p.sinks = static_cast<const float*>(a.sinks.data), p.sinks_stride = a.sinks.strides[0];
  p.splits = plan.splits;
  if (plan.splits > 1 && !plan.cluster_merge) {
    p.part_o = reinterpret_cast<float*>(lease.data());
    p.part_lse = reinterpret_cast<float*>(lease.data() + plan.part_lse_offset);
  }
  const bool launched = l.dtype == DType::bf16 ? launch_for_head_dim<__nv_bfloat16>(int(l.Hqk), p, plan, stream)
                                               : launch_for_head_dim<__half>(int(l.Hqk), p, plan, stream);
  if (!launched) core::fail(ErrorCode::internal, "split-KV: no instance for head dim {}", l.Hqk);
  impl.ran_member = "flash-sm80";
}

}  // namespace attnlab::cuda::serving
