// The serving calls (include/attnlab/serving.h). On the CPU a packed or paged batch runs one sequence at a time:
// each sequence is a padded call of batch 1 (attnlab::forward) whose views point into the packed tensors, with a
// paged sequence's keys gathered from its pages into a host buffer first; attention sinks then rescale each row
// (below). The per-sequence call is the reference the GPU kernels are checked against. GPU tensors go to the
// split-KV kernel (cuda/serving/split_kv.h) or to the sm_90a kernel (cuda/flash_sm90/varlen.h), by path name or by
// core/dispatch_policy.h's varlen_prefers_sm90; append_kv copies rows on the CPU here and on the GPU in
// cuda/serving/append_kv.cu.
#include "attnlab/serving.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "attnlab/version.h"  // ATTNLAB_WITH_CUDA

#include "core/context_impl.h"
#include "core/dispatch_policy.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/validate_serving.h"
#if ATTNLAB_WITH_CUDA
#include "cuda/common/device.h"
#include "cuda/cudnn/cudnn_varlen.h"
#include "cuda/flash_sm90/varlen.h"
#include "cuda/serving/split_kv.h"
#endif

namespace attnlab {

#if ATTNLAB_WITH_CUDA
namespace cuda {
void append_kv_on_device(Context& ctx, const AppendKVArgs& args, const core::AppendLayout& layout);
}
#endif

namespace {

using core::SequenceSpan;
using core::VarlenLayout;

char* bytes_at(const TensorView& t, std::int64_t elements) {
  return static_cast<char*>(t.data) + elements * std::int64_t(size_of(t.dtype));
}

// Rows [begin, begin + len) of a packed (rows, heads, dim) tensor as a padded batch of one: (1, len, heads, dim).
TensorView packed_rows(const TensorView& t, std::int64_t begin, std::int64_t len) {
  TensorView v = t;
  v.rank = 4;
  v.data = bytes_at(t, begin * t.strides[0]);
  v.shape = {1, len, t.shape[1], t.shape[2]};
  v.strides = {len * t.strides[0], t.strides[0], t.strides[1], t.strides[2]};
  return v;
}

// Columns [begin, begin + len) of lse (N, total_q) as the (1, N, len) LSE of a batch of one.
TensorView lse_columns(const TensorView& t, std::int64_t begin, std::int64_t len) {
  TensorView v = t;
  v.rank = 3;
  v.data = bytes_at(t, begin * t.strides[1]);
  v.shape = {1, t.shape[0], len};
  v.strides = {t.shape[0] * t.strides[0], t.strides[0], t.strides[1]};
  return v;
}

// Row `row` of a paged cache's sequence b: page block_table[b][row / page_size], row % page_size within it.
char* paged_row(const PagedKV& c, const TensorView& cache, std::int64_t b, std::int64_t row) {
  const TensorView& table = c.block_table;
  const std::int64_t page_size = cache.shape[1];
  const std::int64_t page =
      static_cast<const std::int32_t*>(table.data)[b * table.strides[0] + (row / page_size) * table.strides[1]];
  return bytes_at(cache, page * cache.strides[0] + (row % page_size) * cache.strides[1]);
}

// Sequence b's keys of a paged cache, gathered into `buffer` as a dense (1, len, K, H) view.
TensorView gather_pages(const PagedKV& c, const TensorView& cache, std::int64_t b, std::int64_t len,
                        std::vector<std::byte>& buffer) {
  const std::int64_t K = cache.shape[2], H = cache.shape[3];
  const std::size_t row_bytes = std::size_t(H) * size_of(cache.dtype);
  buffer.resize(std::size_t(len * K) * row_bytes);
  for (std::int64_t j = 0; j < len; ++j) {
    const char* src = paged_row(c, cache, b, j);
    for (std::int64_t kh = 0; kh < K; ++kh)
      std::memcpy(buffer.data() + std::size_t(j * K + kh) * row_bytes,
                  src + kh * cache.strides[2] * std::int64_t(size_of(cache.dtype)), row_bytes);
  }
  return TensorView::contiguous(buffer.data(), cache.dtype, {1, len, K, H});
}

// Sequence s's call: a padded batch of one over views into the packed tensors (gathered keys when paged).
struct SequenceCall {
  std::vector<std::byte> k_rows, v_rows;
  ForwardArgs args;

  SequenceCall(const VarlenForwardArgs& a, std::int64_t b, const SequenceSpan& s) {
    args.q = packed_rows(a.q, s.q_begin, s.q_len);
    args.o = packed_rows(a.o, s.q_begin, s.q_len);
    if (!a.lse.empty()) args.lse = lse_columns(a.lse, s.q_begin, s.q_len);
    if (a.paged) {
      args.k = gather_pages(*a.paged, a.paged->k_cache, b, s.kv_len, k_rows);
      args.v = gather_pages(*a.paged, a.paged->v_cache, b, s.kv_len, v_rows);
    } else {
      args.k = packed_rows(a.k, s.k_begin, s.kv_len);
      args.v = packed_rows(a.v, s.k_begin, s.kv_len);
    }
    args.options = a.options;
  }
};

// A (1, len, heads, dim) view's values as a dense f32 tensor in `buffer`.
TensorView as_f32(const TensorView& t, std::vector<float>& buffer) {
  const std::int64_t len = t.shape[1], heads = t.shape[2], dim = t.shape[3];
  buffer.resize(std::size_t(len * heads * dim));
  for (std::int64_t j = 0; j < len; ++j)
    for (std::int64_t h = 0; h < heads; ++h)
      core::load_row(t.data, t.dtype, j * t.strides[1] + h * t.strides[2], dim,
                     buffer.data() + (j * heads + h) * dim);
  return TensorView::contiguous(buffer.data(), DType::f32, {1, len, heads, dim});
}

// A sequence's call with sinks on f16/bf16 inputs runs in f32, so that O is rounded once, after the sinks' rescale
// (rounding it before as well put a second half ulp into every row).
struct WideCall {
  std::vector<float> q, k, v, o;
  TensorView narrow_o;  // where the rounded rows go
  ForwardArgs args;

  explicit WideCall(const ForwardArgs& a) : narrow_o(a.o), args(a) {
    args.q = as_f32(a.q, q);
    args.k = as_f32(a.k, k);
    args.v = as_f32(a.v, v);
    o.assign(std::size_t(a.o.shape[1] * a.o.shape[2] * a.o.shape[3]), 0.0f);
    args.o = TensorView::contiguous(o.data(), DType::f32, {1, a.o.shape[1], a.o.shape[2], a.o.shape[3]});
  }
  void store() const {
    const std::int64_t len = narrow_o.shape[1], heads = narrow_o.shape[2], dim = narrow_o.shape[3];
    for (std::int64_t j = 0; j < len; ++j)
      for (std::int64_t h = 0; h < heads; ++h)
        core::store_row(narrow_o.data, narrow_o.dtype, j * narrow_o.strides[1] + h * narrow_o.strides[2], dim,
                        o.data() + (j * heads + h) * dim);
  }
};

// Attention sinks on a finished sequence: a sink logit σ joins the softmax's denominator, so that with L the row's
// LSE without it, L' = log(e^L + e^σ), and every probability, hence O, scales by e^(L − L'). `o` is the sequence's
// (1, q_len, N, Hv) output and `lse` its (1, N, q_len) LSE without sinks; it receives L'.
void apply_sinks(const VarlenForwardArgs& a, const SequenceSpan& s, const TensorView& o, const TensorView& lse) {
  const auto* sinks = static_cast<const float*>(a.sinks.data);
  auto* l = static_cast<float*>(lse.data);
  std::vector<float> row(std::size_t(o.shape[3]));
  for (std::int64_t n = 0; n < o.shape[2]; ++n) {
    const double sink = sinks[n * a.sinks.strides[0]];
    for (std::int64_t i = 0; i < s.q_len; ++i) {
      float& at = l[n * lse.strides[1] + i * lse.strides[2]];
      const double old_lse = at;
      const double top = std::max(old_lse, sink);
      const double new_lse = top + std::log(std::exp(old_lse - top) + std::exp(sink - top));
      const float factor = float(std::exp(old_lse - new_lse));
      const std::int64_t offset = i * o.strides[1] + n * o.strides[2];
      core::load_row(o.data, o.dtype, offset, o.shape[3], row.data());
      for (float& x : row) x *= factor;
      core::store_row(o.data, o.dtype, offset, o.shape[3], row.data());
      at = float(new_lse);
    }
  }
}

// A sequence with queries and no key: O rows 0, LSE −inf (docs/design.md §2), written directly; with sinks the
// LSE is the sink's logit.
void write_unseen_rows(const VarlenForwardArgs& a, const SequenceSpan& s) {
  const std::size_t elem = size_of(a.o.dtype);
  for (std::int64_t i = 0; i < s.q_len; ++i)
    for (std::int64_t n = 0; n < a.o.shape[1]; ++n)
      std::memset(bytes_at(a.o, (s.q_begin + i) * a.o.strides[0] + n * a.o.strides[1]), 0,
                  std::size_t(a.o.shape[2]) * elem);
  if (a.lse.empty()) return;
  auto* lse = static_cast<float*>(a.lse.data);
  for (std::int64_t n = 0; n < a.lse.shape[0]; ++n)
    for (std::int64_t i = 0; i < s.q_len; ++i)
      lse[n * a.lse.strides[0] + (s.q_begin + i) * a.lse.strides[1]] =
          a.sinks.empty() ? -std::numeric_limits<float>::infinity()
                          : static_cast<const float*>(a.sinks.data)[n * a.sinks.strides[0]];
}

// The GPU kernels that run packed and paged batches, and which one a path name runs (docs/serving.md): flash-sm80
// the split-KV kernel, flash-sm90 the sm_90a kernel, flash the one core/dispatch_policy.h prefers, or the other
// where only that one takes the call; cudnn cuDNN's ragged and paged SDPA; auto as flash, but cudnn first where
// the policy prefers it (a paged prefill).
enum class GpuKernel { split_kv, sm90, cudnn };

struct GpuRoute {
  std::optional<std::string> refusal;
  GpuKernel kernel = GpuKernel::split_kv;
};

#if ATTNLAB_WITH_CUDA
// 128-row blocks of (sequence, query head) that hold a row: from the host lengths when the layout has them, else
// from max_seqlen_q for every sequence.
std::int64_t query_blocks(const VarlenForwardArgs& a, const VarlenLayout& l) {
  if (l.sequences.empty()) return (a.max_seqlen_q + 127) / 128 * l.B * l.N;
  std::int64_t blocks = 0;
  for (const SequenceSpan& s : l.sequences) blocks += (s.q_len + 127) / 128 * l.N;
  return blocks;
}
#endif

GpuRoute gpu_route(Context& ctx, const std::string& path, const VarlenForwardArgs& a, const VarlenLayout& l) {
  const bool split_kv_name = path == "flash-sm80", sm90_name = path == "flash-sm90";
  if (!split_kv_name && !sm90_name && path != "auto" && path != "flash" && path != "cudnn")
    return {fmt::format("path {}: packed and paged layouts on the GPU run on path flash (flash-sm80's split-KV "
                        "kernel, flash-sm90's kernel) and cudnn, on the CPU on cpu-naive and cpu-flash "
                        "(docs/serving.md)",
                        path)};
#if ATTNLAB_WITH_CUDA
  if (auto why = cuda::cuda_unavailable()) return {fmt::format("path {}: {}", path, *why)};
  if (path == "cudnn") {
    if (auto why = cuda::cudnn::varlen_refusal(ctx.impl(), a, l)) return {fmt::format("path cudnn: {}", *why)};
    return {std::nullopt, GpuKernel::cudnn};
  }
  const Tuning& tuning = ctx.impl().tuning;
  if (sm90_name) {
    if (auto why = cuda::sm90::varlen_refusal(a, l, tuning)) return {fmt::format("path {}: {}", path, *why)};
    return {std::nullopt, GpuKernel::sm90};
  }
  std::optional<std::string> split_kv_why = cuda::serving::split_kv_refusal(a, l, tuning);
  if (split_kv_name) {
    if (split_kv_why) return {fmt::format("path {}: {}", path, *split_kv_why)};
    return {std::nullopt, GpuKernel::split_kv};
  }
  const core::VarlenTraits traits{l.paged, a.max_seqlen_q, query_blocks(a, l),
                                  cuda::device_properties(a.q.device_index).sm_count};
  if (path == "auto" && core::varlen_prefers_cudnn(traits) && !cuda::cudnn::varlen_refusal(ctx.impl(), a, l))
    return {std::nullopt, GpuKernel::cudnn};
  const std::optional<std::string> sm90_why = cuda::sm90::varlen_refusal(a, l, tuning);
  if (!sm90_why && (core::varlen_prefers_sm90(traits) || split_kv_why)) return {std::nullopt, GpuKernel::sm90};
  if (split_kv_why) return {fmt::format("path {}: {}; flash-sm90: {}", path, *split_kv_why, *sm90_why)};
  return {std::nullopt, GpuKernel::split_kv};
#else
  (void)ctx, (void)a, (void)l;
  return {fmt::format("path {}: this build has no CUDA", path)};
#endif
}

// Why `path` cannot run the batch, or nullopt; nothing written. Every sequence's call differs from the others
// only in its lengths, which no CPU path's rules depend on, so the first sequence with queries and keys answers
// for all; a batch without one asks a one-row call of the same kind.
std::optional<std::string> refusal(Context& ctx, const std::string& path, const VarlenForwardArgs& a,
                                   const VarlenLayout& l) {
  if (l.device == Device::cuda) return gpu_route(ctx, path, a, l).refusal;
  for (std::int64_t b = 0; b < l.B; ++b) {
    const SequenceSpan& s = l.sequences[std::size_t(b)];
    if (s.q_len > 0 && s.kv_len > 0) return why_not(ctx, path, SequenceCall(a, b, s).args);
  }
  std::vector<std::byte> q(std::size_t(l.N * l.Hqk) * size_of(l.dtype)), o(std::size_t(l.N * l.Hv) * size_of(l.dtype));
  std::vector<std::byte> k(std::size_t(l.K * l.Hqk) * size_of(l.dtype)), v(std::size_t(l.K * l.Hv) * size_of(l.dtype));
  ForwardArgs one;
  one.q = TensorView::contiguous(q.data(), l.dtype, {1, 1, l.N, l.Hqk});
  one.k = TensorView::contiguous(k.data(), l.dtype, {1, 1, l.K, l.Hqk});
  one.v = TensorView::contiguous(v.data(), l.dtype, {1, 1, l.K, l.Hv});
  one.o = TensorView::contiguous(o.data(), l.dtype, {1, 1, l.N, l.Hv});
  one.options = a.options;
  return why_not(ctx, path, one);
}

}  // namespace

std::optional<std::string> why_not(Context& ctx, const std::string& path, const VarlenForwardArgs& args) {
  const VarlenLayout layout = core::validate(args);
  return refusal(ctx, path, args, layout);
}

std::size_t workspace_size(Context& ctx, const VarlenForwardArgs& args) {
  const VarlenLayout layout = core::validate(args);
  if (layout.device != Device::cuda) return 0;
  const GpuRoute route = gpu_route(ctx, args.options.path, args, layout);
  if (route.refusal) core::fail(ErrorCode::unsupported, "{}", *route.refusal);
#if ATTNLAB_WITH_CUDA
  if (route.kernel == GpuKernel::sm90) return cuda::sm90::varlen_workspace_bytes(args, layout, ctx.impl().tuning);
  if (route.kernel == GpuKernel::cudnn) return cuda::cudnn::varlen_workspace_bytes(ctx.impl(), args, layout);
  return cuda::serving::split_kv_workspace_bytes(args, layout, ctx.impl().tuning);
#else
  return 0;
#endif
}

RunInfo forward(Context& ctx, const VarlenForwardArgs& args) {
  const VarlenLayout layout = core::validate(args);
  if (layout.device == Device::cuda) {
    const GpuRoute route = gpu_route(ctx, args.options.path, args, layout);
    if (route.refusal) core::fail(ErrorCode::unsupported, "{}", *route.refusal);
#if ATTNLAB_WITH_CUDA
    Context::Impl& impl = ctx.impl();
    impl.device_allocations = 0;
    impl.last_workspace_bytes = 0;
    if (route.kernel == GpuKernel::sm90) {
      cuda::sm90::run_varlen(ctx, args, layout);
      return RunInfo{"flash-sm90", impl.last_workspace_bytes, impl.device_allocations};
    }
    if (route.kernel == GpuKernel::cudnn) {
      cuda::cudnn::run_varlen(impl, args, layout);
      return RunInfo{"cudnn", impl.last_workspace_bytes, impl.device_allocations};
    }
    cuda::serving::run_split_kv(ctx, args, layout);
    return RunInfo{"flash-sm80", impl.last_workspace_bytes, impl.device_allocations};
#endif
  }
  if (auto why = refusal(ctx, args.options.path, args, layout)) core::fail(ErrorCode::unsupported, "{}", *why);
  RunInfo info{args.options.path, 0, 0};
  std::vector<float> own_lse;  // the sequence's LSE when sinks need it and the caller asked for none
  for (std::int64_t b = 0; b < layout.B; ++b) {
    const SequenceSpan& s = layout.sequences[std::size_t(b)];
    if (s.q_len == 0) continue;
    if (s.kv_len == 0) {
      write_unseen_rows(args, s);
      continue;
    }
    SequenceCall call(args, b, s);
    if (!args.sinks.empty() && call.args.lse.empty()) {
      own_lse.assign(std::size_t(layout.N * s.q_len), 0.0f);
      call.args.lse = TensorView::contiguous(own_lse.data(), DType::f32, {1, layout.N, s.q_len});
    }
    RunInfo ran;
    if (!args.sinks.empty() && layout.dtype != DType::f32) {
      const WideCall wide(call.args);
      ran = forward(ctx, wide.args);
      apply_sinks(args, s, wide.args.o, call.args.lse);
      wide.store();
    } else {
      ran = forward(ctx, call.args);
      if (!args.sinks.empty()) apply_sinks(args, s, call.args.o, call.args.lse);
    }
    info.path = ran.path;
    info.workspace_bytes = std::max(info.workspace_bytes, ran.workspace_bytes);
  }
  return info;
}

void append_kv(Context& ctx, const AppendKVArgs& args) {
  const core::AppendLayout l = core::validate(args);
  if (l.device == Device::cuda) {
#if ATTNLAB_WITH_CUDA
    cuda::append_kv_on_device(ctx, args, l);
    return;
#else
    core::fail(ErrorCode::unsupported, "append_kv: this build has no CUDA");
#endif
  }
  (void)ctx;
  const std::size_t elem = size_of(l.dtype);
  const TensorView& kc = l.paged ? args.paged->k_cache : args.k_cache;
  const TensorView& vc = l.paged ? args.paged->v_cache : args.v_cache;
  for (std::int64_t b = 0; b < l.B; ++b) {
    const SequenceSpan& s = l.sequences[std::size_t(b)];
    for (std::int64_t t = 0; t < s.q_len; ++t) {
      const std::int64_t pos = s.kv_len + t;
      for (const auto& [cache, fresh, H] : {std::tuple{&kc, &args.k_new, l.Hqk}, std::tuple{&vc, &args.v_new, l.Hv}}) {
        char* row = l.paged ? paged_row(*args.paged, *cache, b, pos)
                            : bytes_at(*cache, b * cache->strides[0] + pos * cache->strides[1]);
        const std::int64_t src = l.packed_new ? (s.q_begin + t) * fresh->strides[0]
                                              : b * fresh->strides[0] + t * fresh->strides[1];
        const int head_dim = l.packed_new ? 1 : 2;
        for (std::int64_t kh = 0; kh < l.K; ++kh)
          std::memcpy(row + kh * cache->strides[2] * std::int64_t(elem),
                      bytes_at(*fresh, src + kh * fresh->strides[head_dim]), std::size_t(H) * elem);
      }
    }
  }
}

}  // namespace attnlab
