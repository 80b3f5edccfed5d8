// The serving calls (include/attnlab/serving.h). On the CPU a packed or paged batch runs one sequence at a time:
// each sequence is a padded call of batch 1 (attnlab::forward) whose views point into the packed tensors, with a
// paged sequence's keys gathered from its pages into a host buffer first. The per-sequence call is the reference
// the GPU kernels for these layouts will be checked against; until they exist, GPU tensors are refused by name
// (docs/serving.md). append_kv copies rows on the CPU here and on the GPU in cuda/serving/append_kv.cu.
#include "attnlab/serving.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "attnlab/version.h"  // ATTNLAB_WITH_CUDA

#include "core/error.h"
#include "core/validate_serving.h"

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

// A sequence with queries and no key: O rows 0, LSE −inf (docs/design.md §2), written directly.
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
      lse[n * a.lse.strides[0] + (s.q_begin + i) * a.lse.strides[1]] = -std::numeric_limits<float>::infinity();
}

// Why `path` cannot run the batch, or nullopt; nothing written. Every sequence's call differs from the others
// only in its lengths, which no CPU path's rules depend on, so the first sequence with queries and keys answers
// for all; a batch without one asks a one-row call of the same kind.
std::optional<std::string> refusal(Context& ctx, const std::string& path, const VarlenForwardArgs& a,
                                   const VarlenLayout& l) {
  if (l.device == Device::cuda)
    return fmt::format("path {}: packed and paged layouts run on the CPU paths so far (cpu-naive, cpu-flash, "
                       "one sequence at a time); the GPU kernels for them are not built yet (docs/serving.md)",
                       path);
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

RunInfo forward(Context& ctx, const VarlenForwardArgs& args) {
  const VarlenLayout layout = core::validate(args);
  if (auto why = refusal(ctx, args.options.path, args, layout)) core::fail(ErrorCode::unsupported, "{}", *why);
  RunInfo info{args.options.path, 0, 0};
  for (std::int64_t b = 0; b < layout.B; ++b) {
    const SequenceSpan& s = layout.sequences[std::size_t(b)];
    if (s.q_len == 0) continue;
    if (s.kv_len == 0) {
      write_unseen_rows(args, s);
      continue;
    }
    const RunInfo ran = forward(ctx, SequenceCall(args, b, s).args);
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
