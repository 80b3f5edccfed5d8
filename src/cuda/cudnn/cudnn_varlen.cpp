// Packed and paged batches on cuDNN (cudnn_varlen.h). The graph is cuDNN's SDPA forward with the padding mask, a
// ragged Q and O (row offsets per sequence), and either ragged K and V or paged caches read through page tables
// (cudnn-frontend 1.23, node/sdpa_support_surface.h: paged caches with ragged queries from cuDNN 9.7). Its sizes are
// the batch's maximum lengths rounded up to powers of two, so that a decode loop, whose longest context grows by a
// token a step, reuses one graph for every length up to the next power of two: the lengths cuDNN masks by are the
// sequences' own.
#include "cuda/cudnn/cudnn_varlen.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "cuda/common/call_scratch.h"
#include "cuda/common/device.h"
#include "cuda/common/scratch_layout.h"
#include "cuda/cudnn/cudnn_cache.h"
#include "cuda/cudnn/cudnn_plan.h"
#include "cuda/cudnn/serving_kernels.h"

namespace attnlab::cuda::cudnn {
namespace {

constexpr int kMinServingVersion = 90700;

std::int64_t power_of_two_at_least(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// A packed (rows, heads, dim) tensor or a cache (pages, page_size, heads, dim) read by cuDNN in 16-byte pieces (and
// TMA on Hopper): unit stride in the head dim, every other stride a positive multiple of 16 bytes, 16-byte aligned.
std::optional<std::string> row_layout_rule(const char* name, const TensorView& t) {
  if (t.strides[t.rank - 1] != 1) return fmt::format("{}'s head dim must have stride 1 for cuDNN", name);
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.shape[d] > 1 && (t.strides[d] <= 0 || t.strides[d] % 8 != 0))
      return fmt::format("{}.strides[{}] = {} must be a positive multiple of 8 elements (16 bytes) for cuDNN", name, d,
                         t.strides[d]);
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0)
    return fmt::format("{}.data must be 16-byte aligned for cuDNN", name);
  return std::nullopt;
}

// The stride of dimension d, or what a packed layout would have where the dimension has one entry (never used to
// address anything; cuDNN refuses odd ones).
std::int64_t stride_or_packed(const TensorView& t, int d) {
  if (t.shape[d] > 1) return t.strides[d];
  std::int64_t inner = 1;
  for (int e = d + 1; e < t.rank; ++e) inner *= t.shape[e];
  return (inner + 7) / 8 * 8;
}

// cuDNN's (batch, heads, rows, dim) strides of a packed (rows, heads, dim) tensor read at ragged row offsets: the
// batch stride is never used, T rows of the tensor stand for it.
GraphSpec::Strides ragged_strides(const TensorView& t, std::int64_t T) {
  const std::int64_t row = stride_or_packed(t, 0);
  return {T * row, stride_or_packed(t, 1), row, 1};
}

// A cache (pages, page_size, heads, dim) as cuDNN's (pages, heads, page_size, dim).
GraphSpec::Strides cache_strides(const TensorView& t) {
  return {stride_or_packed(t, 0), stride_or_packed(t, 2), stride_or_packed(t, 1), 1};
}

struct VarlenPlan {
  GraphSpec spec;
  std::int64_t table_entries = 0;  // the block table's copy: B · pages per sequence, when paged
  // Decode (every sequence at most one query): Q gathered into a padded (B, N, Hqk) buffer and O written to a
  // (B, N, Hv) one, and packed keys read as a cache of one-row pages, so that cuDNN runs its decode kernels (a
  // ragged Q, or ragged keys, run on its prefill kernels, one block per head: 11–12× slower at S = 32k,
  // docs/perf-notes-serving.md).
  bool gathered = false;
};

std::optional<std::string> make_varlen_plan(const VarlenForwardArgs& a, const core::VarlenLayout& l, const Runtime& rt,
                                            VarlenPlan& plan) {
  if (l.dtype != DType::f16 && l.dtype != DType::bf16)
    return fmt::format("packed and paged layouts take f16 and bf16 on cuDNN, got {}", to_string(l.dtype));
  if (rt.cc < 80) return fmt::format("needs compute capability ≥ 8.0, this GPU has {}.{}", rt.cc / 10, rt.cc % 10);
  if (rt.cudnn_version < kMinServingVersion)
    return fmt::format("packed and paged layouts need cuDNN ≥ 9.7 (this runtime is {})",
                       version_string(rt.cudnn_version));
  if (!a.sinks.empty())
    return std::string("attention sinks are not taken with packed or paged layouts on cuDNN (its sink token has no "
                       "decode kernel); use path flash");
  if (a.options.softcap > 0.0f)
    return std::string("softcap with packed or paged layouts is unsupported by cuDNN (a score modifier switches off "
                       "the padding mask these layouts need); use path flash");
  if (l.B > 65535) return fmt::format("at most 65535 sequences a call on cuDNN, got {}", l.B);
  const TensorView& k = a.paged ? a.paged->k_cache : a.k;
  const TensorView& v = a.paged ? a.paged->v_cache : a.v;
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"q", &a.q}, {"o", &a.o},
                                {a.paged ? "paged.k_cache" : "k", &k}, {a.paged ? "paged.v_cache" : "v", &v}})
    if (auto why = row_layout_rule(name, *t)) return why;

  if (a.paged && l.pages == 0) return std::string("a paged cache without pages has no key to read on cuDNN");

  plan = VarlenPlan{};
  GraphSpec& spec = plan.spec;
  // The graph's lengths: the call's bounds, clamped to the rows the tensors hold (a loose bound costs nothing),
  // then rounded up to powers of two.
  const std::int64_t key_rows = a.paged ? l.pages_per_sequence * l.page_size : a.k.shape[0];
  auto bound = [](std::int64_t asked, std::int64_t rows) {
    return power_of_two_at_least(std::clamp<std::int64_t>(asked, 1, std::max<std::int64_t>(rows, 1)));
  };
  const std::int64_t T = bound(a.max_seqlen_q, l.total_q);
  std::int64_t S = bound(a.max_seqlen_k, key_rows);
  if (a.paged) S = std::max<std::int64_t>(1, std::min(S, key_rows));
  // cuDNN's ragged offsets and lengths are int32 elements.
  const bool gathered = T == 1;
  const bool keys_as_pages = gathered && !a.paged && a.k.shape[0] > 0;
  const bool ragged_kv = !a.paged && !keys_as_pages;
  const std::pair<const char*, std::int64_t> extents[] = {
      {"q", gathered ? 0 : l.total_q * a.q.strides[0]}, {"o", gathered ? 0 : l.total_q * a.o.strides[0]},
      {"k", ragged_kv ? a.k.shape[0] * a.k.strides[0] : 0}, {"v", ragged_kv ? a.v.shape[0] * a.v.strides[0] : 0},
      {"the keys", keys_as_pages ? a.k.shape[0] : 0}, {"the maximum lengths", T + S}};
  for (const auto& [name, extent] : extents)
    if (extent > INT_MAX)
      return fmt::format("{} spans {} elements; cuDNN's ragged offsets and lengths are 32-bit", name, extent);

  core::Problem padded;  // the padded forward problem the batch stands for: head-dim rules and the mask's band
  padded.direction = core::Direction::forward;
  padded.dtype = l.dtype;
  padded.dims = core::Dims{l.B, T, S, l.N, l.K, l.Hqk, l.Hv};
  padded.mask = a.options.mask;
  if (auto why = head_dims_and_band(padded, rt, spec)) return why;

  spec.direction = core::Direction::forward;
  spec.dtype = l.dtype;
  spec.device_cc = rt.cc;
  spec.B = l.B, spec.T = T, spec.S = S, spec.N = l.N, spec.K = l.K, spec.Hqk = l.Hqk, spec.Hv = l.Hv;
  plan.gathered = gathered;
  if (plan.gathered) {
    spec.q = {l.N * l.Hqk, l.Hqk, l.N * l.Hqk, 1};
    spec.o = {l.N * l.Hv, l.Hv, l.N * l.Hv, 1};
  } else {
    spec.q = ragged_strides(a.q, T);
    spec.o = ragged_strides(a.o, T);
    spec.ragged_q = true;
  }
  if (a.paged) {
    spec.k = cache_strides(k);
    spec.v = cache_strides(v);
    spec.paged = true;
    // cuDNN takes a table of exactly ⌈S / page_size⌉ pages a sequence: the first columns of the caller's.
    spec.pages = l.pages, spec.page_size = l.page_size, spec.pages_per_sequence = (S + l.page_size - 1) / l.page_size;
    plan.table_entries = l.B * spec.pages_per_sequence;
  } else if (keys_as_pages) {
    // k (total_k, K, H) as (pages, K, 1, H): a page per row. The graph's page count is total_k rounded up to a power
    // of two, so that a packed K that grows from call to call keeps its graph; the table's entries, clamped below
    // total_k by the prepare kernel, are the only rows read.
    spec.k = {stride_or_packed(k, 0), stride_or_packed(k, 1), k.shape[2], 1};
    spec.v = {stride_or_packed(v, 0), stride_or_packed(v, 1), v.shape[2], 1};
    spec.paged = true;
    spec.pages = power_of_two_at_least(k.shape[0]), spec.page_size = 1, spec.pages_per_sequence = S;
    plan.table_entries = l.B * S;
  } else {
    spec.k = ragged_strides(k, S);
    spec.v = ragged_strides(v, S);
    spec.ragged_kv = true;
  }
  spec.padding = true;
  spec.stats = !a.lse.empty();
  spec.scale = a.options.scale.value_or(float(1.0 / std::sqrt(double(l.Hqk))));  // as core/validate.cpp
  return std::nullopt;
}

// Where each piece of a call's scratch lies (byte offsets into one block).
struct Layout {
  std::size_t graph = 0, ints = 0, stats = 0, q = 0, o = 0, total = 0;
};

Layout layout_of(const VarlenPlan& plan, const Entry& entry) {
  const GraphSpec& s = plan.spec;
  ScratchLayout carve(kPathName);
  Layout l;
  l.graph = carve.add(entry.workspace);
  l.ints = carve.add(serving_int_words(s.B, plan.table_entries), sizeof(std::int32_t));
  l.stats = s.stats ? carve.add(std::size_t(s.B * s.N * s.T), sizeof(float)) : 0;
  if (plan.gathered) {
    l.q = carve.add(std::size_t(s.B * s.N * s.Hqk), size_of(s.dtype));
    l.o = carve.add(std::size_t(s.B * s.N * s.Hv), size_of(s.dtype));
  }
  l.total = carve.size();
  return l;
}

struct Call {
  std::optional<std::string> reason;  // set when the call cannot run; nothing else is then
  VarlenPlan plan;
  GraphLookup graph;
  Layout layout;
};

// Runs `fn(call)` with the context's cudnn state locked and the call's device current, after every check a call
// can fail before its launch, for the refusal and the run alike.
template <class Fn>
void with_graph(Context::Impl& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l, Fn&& fn) {
  Call call;
  if ((call.reason = cuda_unavailable())) return fn(call);
  if ((call.reason = library_unavailable())) return fn(call);
  if ((call.reason = make_varlen_plan(a, l, runtime_for(a.q.device_index), call.plan))) return fn(call);
  DeviceGuard guard(a.q.device_index);
  call.graph = find_graph(ctx, a.q.device_index, call.plan.spec, ctx.tuning);
  if ((call.reason = call.graph.reason)) return fn(call);
  call.layout = layout_of(call.plan, *call.graph.entry);
  const core::Problem owner = scratch_owner(a.q.device_index, a.workspace);
  call.reason = scratch_refusal(ctx, owner, call.layout.total, call.graph.stream);
  fn(call);
}

const std::int32_t* ints(const TensorView& t) { return static_cast<const std::int32_t*>(t.data); }

void enqueue(Context::Impl& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l, Call& call) {
  const GraphSpec& spec = call.plan.spec;
  const cudaStream_t stream = call.graph.stream;
  OrderedUse use(ctx, a.q.device_index, stream, kPathName);
  const core::Problem owner = scratch_owner(a.q.device_index, a.workspace);
  ScratchLease scratch(ctx, owner, call.layout.total, stream, kPathName, &use);
  char* base = scratch.data();

  ServingInputs in;
  in.B = l.B, in.T = spec.T, in.S = spec.S;
  in.cu_q = ints(a.cu_seqlens_q), in.cu_q_stride = a.cu_seqlens_q.strides[0];
  in.total_q = l.total_q;
  void* q_gathered = call.plan.gathered ? base + call.layout.q : nullptr;
  void* o_gathered = call.plan.gathered ? base + call.layout.o : nullptr;
  if (call.plan.gathered) {
    in.q = a.q.data, in.q_row = a.q.strides[0], in.q_head = a.q.strides[1];
    in.N = l.N, in.Hqk = l.Hqk, in.q_gathered = q_gathered;
  } else {
    in.q_row = spec.q[2], in.o_row = spec.o[2];
  }
  if (a.paged) {
    const PagedKV& c = *a.paged;
    in.seqlens = ints(c.seqlens), in.seqlens_stride = c.seqlens.strides[0];
    in.block_table = ints(c.block_table), in.table_b = c.block_table.strides[0], in.table_p = c.block_table.strides[1];
    in.pages = l.pages, in.page_size = l.page_size, in.pages_per_sequence = spec.pages_per_sequence;
  } else {
    in.cu_k = ints(a.cu_seqlens_k), in.cu_k_stride = a.cu_seqlens_k.strides[0];
    in.total_k = a.k.shape[0];
    if (spec.paged) {  // packed keys as one-row pages
      in.pages = a.k.shape[0], in.page_size = 1, in.pages_per_sequence = spec.pages_per_sequence;
    } else {
      in.k_row = spec.k[2], in.v_row = spec.v[2];
    }
  }
  in.out = carve_serving_ints(reinterpret_cast<std::int32_t*>(base + call.layout.ints), l.B, call.plan.table_entries);
  prepare_serving_inputs(in, stream);

  auto* stats = spec.stats ? reinterpret_cast<float*>(base + call.layout.stats) : nullptr;
  Pointers ptr{};
  ptr[Slot::q] = q_gathered != nullptr ? q_gathered : a.q.data;
  ptr[Slot::k] = a.paged ? a.paged->k_cache.data : a.k.data;
  ptr[Slot::v] = a.paged ? a.paged->v_cache.data : a.v.data;
  ptr[Slot::o] = o_gathered != nullptr ? o_gathered : a.o.data;
  ptr[Slot::stats] = stats;
  ptr[Slot::seq_len_q] = in.out.seq_len_q;
  ptr[Slot::seq_len_kv] = in.out.seq_len_kv;
  ptr[Slot::ragged_q] = in.out.q_offsets;
  ptr[Slot::ragged_o] = in.out.o_offsets;
  ptr[Slot::ragged_k] = in.out.k_offsets;
  ptr[Slot::ragged_v] = in.out.v_offsets;
  ptr[Slot::page_table_k] = in.out.page_table;
  ptr[Slot::page_table_v] = in.out.page_table;
  const Entry& entry = *call.graph.entry;
  void* graph_workspace = entry.workspace > 0 ? base + call.layout.graph : nullptr;
  if (auto error = execute(*entry.graph, call.graph.handle, ptr, graph_workspace))
    core::fail(ErrorCode::device_error, "cudnn: cuDNN failed to run the packed / paged forward graph: {}", *error);

  ServingFinish f;
  f.B = l.B, f.N = l.N, f.T = spec.T, f.Hv = l.Hv;
  f.mask = a.options.mask;
  f.cu_q = in.cu_q, f.cu_q_stride = in.cu_q_stride, f.total_q = l.total_q;
  f.seq_len_q = in.out.seq_len_q, f.seq_len_kv = in.out.seq_len_kv;
  f.o = a.o.data, f.o_row = a.o.strides[0], f.o_head = a.o.strides[1];
  f.o_gathered = o_gathered;
  if (!a.lse.empty()) {
    f.stats = stats;
    f.lse = static_cast<float*>(a.lse.data), f.lse_head = a.lse.strides[0], f.lse_row = a.lse.strides[1];
  }
  finish_serving_outputs(f, stream);
  if (use.capturing()) call.graph.entry->captured = true;
}

}  // namespace

std::optional<std::string> varlen_refusal(Context::Impl& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l) {
  std::optional<std::string> reason;
  with_graph(ctx, a, l, [&](const Call& call) { reason = call.reason; });
  return reason;
}

std::size_t varlen_workspace_bytes(Context::Impl& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l) {
  std::size_t bytes = 0;
  with_graph(ctx, a, l, [&](const Call& call) {
    if (call.reason) core::fail(ErrorCode::unsupported, "path cudnn: {}", *call.reason);
    bytes = call.layout.total;
  });
  return bytes;
}

void run_varlen(Context::Impl& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l) {
  with_graph(ctx, a, l, [&](Call& call) {
    if (call.reason) core::fail(ErrorCode::unsupported, "path cudnn: {}", *call.reason);
    if (a.max_seqlen_q == 0 || l.total_q == 0) return;  // no query rows: nothing to write
    enqueue(ctx, a, l, call);
  });
}

}  // namespace attnlab::cuda::cudnn
