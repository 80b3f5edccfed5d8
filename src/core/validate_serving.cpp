// The preconditions of the serving calls (validate_serving.h).
#include "core/validate_serving.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/tensor_checks.h"

namespace attnlab::core {
namespace {

// An int32 vector of `extent` entries on `like`'s device; its host values, or empty when it is on the device.
std::vector<std::int64_t> int_vector(const char* name, const TensorView& t, std::int64_t extent, const char* layout,
                                     const TensorView& like, RangeList& inputs) {
  inputs.push_back({name, check_tensor(name, t, 1, layout), t.device});
  check_same_place(name, t, like);
  if (t.dtype != DType::i32) invalid("{} must be i32, got {}", name, to_string(t.dtype));
  if (t.shape[0] != extent) invalid("{} must have shape {} = ({}), got ({})", name, layout, extent, t.shape[0]);
  std::vector<std::int64_t> values;
  if (t.device == Device::cuda) return values;
  const auto* p = static_cast<const std::int32_t*>(t.data);
  for (std::int64_t i = 0; i < extent; ++i) values.push_back(p[i * t.strides[0]]);
  return values;
}

// Offsets (B + 1): 0 first, non-decreasing, the last within `rows`; every length within `max_len`.
void check_offsets(const char* name, const std::vector<std::int64_t>& cu, std::int64_t rows, const char* rows_name,
                   std::int64_t max_len, const char* max_name) {
  if (cu.empty()) return;
  if (cu[0] != 0) invalid("{}[0] must be 0, got {}", name, cu[0]);
  for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
    if (cu[b + 1] < cu[b]) invalid("{} must not decrease: {}[{}] = {} < {}[{}] = {}", name, name, b + 1, cu[b + 1], name, b, cu[b]);
    if (cu[b + 1] - cu[b] > max_len)
      invalid("sequence {} has {} rows by {}, more than {} = {}", b, cu[b + 1] - cu[b], name, max_name, max_len);
  }
  if (cu.back() > rows) invalid("{}[B] = {} is more than the {} rows of {}", name, cu.back(), rows, rows_name);
}

void check_options(const Options& o) {
  if (!o.q_seqlens.empty() || !o.kv_seqlens.empty())
    invalid("options.q_seqlens and kv_seqlens must stay empty: packed and paged layouts carry their own lengths");
  if (!o.bias.empty() || !o.bool_mask.empty())
    invalid("options.bias and bool_mask are not taken with packed or paged layouts (their (T, S) shape is per "
            "sequence)");
  if (o.scale && !std::isfinite(*o.scale)) invalid("scale must be finite, got {}", *o.scale);
  if (!std::isfinite(o.softcap) || o.softcap < 0)
    invalid("softcap must be finite and ≥ 0 (0 = off), got {}", o.softcap);
  if (o.mask.window_left < -1 || o.mask.window_right < -1)
    invalid("mask windows must be ≥ 0, or −1 for unbounded; got {}, {}", o.mask.window_left, o.mask.window_right);
}

// A paged cache: k_cache (pages, page_size, K, Hqk), v_cache alike with Hv, block table (B, P), lengths (B); host
// lengths within P · page_size and `max_len`, and the block table's entries for the pages a sequence uses within
// [0, pages). Fills the paging fields and the host lengths. The caches join `inputs` unless the call writes them
// (append_kv).
void check_paged(const PagedKV& c, std::int64_t B, const TensorView& like, std::int64_t max_len, RangeList& inputs,
                 bool caches_are_inputs, std::int64_t& pages, std::int64_t& page_size, std::int64_t& per_sequence,
                 std::vector<std::int64_t>& lengths) {
  const ByteRange kc = check_tensor("paged.k_cache", c.k_cache, 4, "(pages, page_size, K, Hqk)");
  const ByteRange vc = check_tensor("paged.v_cache", c.v_cache, 4, "(pages, page_size, K, Hv)");
  if (caches_are_inputs) {
    inputs.push_back({"paged.k_cache", kc, c.k_cache.device});
    inputs.push_back({"paged.v_cache", vc, c.v_cache.device});
  }
  check_same_place("paged.k_cache", c.k_cache, like);
  check_same_place("paged.v_cache", c.v_cache, like);
  pages = c.k_cache.shape[0], page_size = c.k_cache.shape[1];
  for (int d = 0; d < 3; ++d)
    if (c.v_cache.shape[d] != c.k_cache.shape[d])
      invalid("paged.v_cache.shape[{}] = {} must equal paged.k_cache.shape[{}] = {} (same pages, page size and K)", d,
              c.v_cache.shape[d], d, c.k_cache.shape[d]);
  const ByteRange table = check_tensor("paged.block_table", c.block_table, 2, "(B, pages per sequence)");
  inputs.push_back({"paged.block_table", table, c.block_table.device});
  check_same_place("paged.block_table", c.block_table, like);
  if (c.block_table.dtype != DType::i32) invalid("paged.block_table must be i32, got {}", to_string(c.block_table.dtype));
  if (c.block_table.shape[0] != B)
    invalid("paged.block_table.shape[0] = {} must equal the batch's B = {}", c.block_table.shape[0], B);
  per_sequence = c.block_table.shape[1];
  lengths = int_vector("paged.seqlens", c.seqlens, B, "(B)", like, inputs);
  const std::int64_t capacity = checked_mul(per_sequence, page_size, "paged.block_table");
  const bool host_table = c.block_table.device == Device::cpu;
  const auto* entries = static_cast<const std::int32_t*>(c.block_table.data);
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    const std::int64_t len = lengths[b];
    if (len < 0 || len > capacity || len > max_len)
      invalid("paged.seqlens[{}] = {} is outside [0, {}] (pages per sequence · page_size = {} · {}{})", b, len,
              std::min(capacity, max_len), per_sequence, page_size,
              max_len < capacity ? fmt::format(", and the call's maximum {}", max_len) : std::string());
    if (!host_table) continue;
    for (std::int64_t i = 0; i * page_size < len; ++i) {
      const std::int64_t page =
          entries[std::int64_t(b) * c.block_table.strides[0] + i * c.block_table.strides[1]];
      if (page < 0 || page >= pages)
        invalid("paged.block_table[{}][{}] = {} names no page (the cache has {})", b, i, page, pages);
    }
  }
}

}  // namespace

VarlenLayout validate(const VarlenForwardArgs& a) {
  VarlenLayout l;
  RangeList inputs;
  inputs.push_back({"q", check_tensor("q", a.q, 3, "(total_q, N, Hqk)"), a.q.device});
  if (!is_float_dtype(a.q.dtype))
    invalid("q has dtype {}: packed and paged layouts take f32, f16 or bf16", to_string(a.q.dtype));
  l.dtype = a.q.dtype, l.device = a.q.device;
  l.total_q = a.q.shape[0], l.N = a.q.shape[1], l.Hqk = a.q.shape[2];
  if (a.max_seqlen_q < 0 || a.max_seqlen_k < 0)
    invalid("max_seqlen_q and max_seqlen_k must be ≥ 0, got {} and {}", a.max_seqlen_q, a.max_seqlen_k);
  const std::vector<std::int64_t> cu_q = int_vector("cu_seqlens_q", a.cu_seqlens_q, a.cu_seqlens_q.shape[0],
                                                    "(B + 1)", a.q, inputs);
  if (a.cu_seqlens_q.shape[0] < 2) invalid("cu_seqlens_q must have B + 1 ≥ 2 entries, got {}", a.cu_seqlens_q.shape[0]);
  l.B = a.cu_seqlens_q.shape[0] - 1;
  check_offsets("cu_seqlens_q", cu_q, l.total_q, "q", a.max_seqlen_q, "max_seqlen_q");

  std::vector<std::int64_t> cu_k, kv_lens;
  const TensorView* k = &a.k;
  const TensorView* v = &a.v;
  if (a.paged) {
    if (!a.k.empty() || !a.v.empty() || !a.cu_seqlens_k.empty())
      invalid("give the keys either packed (k, v, cu_seqlens_k) or paged, not both");
    check_paged(*a.paged, l.B, a.q, a.max_seqlen_k, inputs, true, l.pages, l.page_size, l.pages_per_sequence, kv_lens);
    l.paged = true;
    k = &a.paged->k_cache, v = &a.paged->v_cache;
    l.K = k->shape[2];
  } else {
    inputs.push_back({"k", check_tensor("k", a.k, 3, "(total_k, K, Hqk)"), a.k.device});
    inputs.push_back({"v", check_tensor("v", a.v, 3, "(total_k, K, Hv)"), a.v.device});
    check_same_place("k", a.k, a.q);
    check_same_place("v", a.v, a.q);
    if (a.v.shape[0] != a.k.shape[0] || a.v.shape[1] != a.k.shape[1])
      invalid("v must have k's rows and heads ({}, {}), got ({}, {})", a.k.shape[0], a.k.shape[1], a.v.shape[0],
              a.v.shape[1]);
    l.K = a.k.shape[1];
    cu_k = int_vector("cu_seqlens_k", a.cu_seqlens_k, l.B + 1, "(B + 1)", a.q, inputs);
    check_offsets("cu_seqlens_k", cu_k, a.k.shape[0], "k", a.max_seqlen_k, "max_seqlen_k");
  }
  const int last = k->rank - 1;
  if (k->dtype != l.dtype || v->dtype != l.dtype)
    invalid("q, k and v must share one dtype, got {}, {}, {}", to_string(l.dtype), to_string(k->dtype),
            to_string(v->dtype));
  if (k->shape[last] != l.Hqk) invalid("k's head dim {} must equal q's Hqk = {}", k->shape[last], l.Hqk);
  l.Hv = v->shape[last];
  if (l.N % l.K != 0)
    invalid("query heads N = {} must be a multiple of KV heads K = {} (N % K == 0 for GQA/MQA)", l.N, l.K);

  const ByteRange o = check_tensor("o", a.o, 3, "(total_q, N, Hv)");
  check_same_place("o", a.o, a.q);
  check_no_self_overlap("o", a.o);
  if (a.o.dtype != l.dtype) invalid("o must have the inputs' dtype {}, got {}", to_string(l.dtype), to_string(a.o.dtype));
  if (a.o.shape[0] != l.total_q || a.o.shape[1] != l.N || a.o.shape[2] != l.Hv)
    invalid("o must have shape (total_q, N, Hv) = ({}, {}, {}), got ({}, {}, {})", l.total_q, l.N, l.Hv,
            a.o.shape[0], a.o.shape[1], a.o.shape[2]);
  RangeList outputs = {{"o", o, a.o.device}};
  if (!a.lse.empty()) {
    outputs.push_back({"lse", check_tensor("lse", a.lse, 2, "(N, total_q)"), a.lse.device});
    check_same_place("lse", a.lse, a.q);
    check_no_self_overlap("lse", a.lse);
    if (a.lse.dtype != DType::f32) invalid("lse must be f32, got {}", to_string(a.lse.dtype));
    if (a.lse.shape[0] != l.N || a.lse.shape[1] != l.total_q)
      invalid("lse must have shape (N, total_q) = ({}, {}), got ({}, {})", l.N, l.total_q, a.lse.shape[0],
              a.lse.shape[1]);
  }
  if (!a.sinks.empty()) {
    inputs.push_back({"sinks", check_tensor("sinks", a.sinks, 1, "(N)"), a.sinks.device});
    check_same_place("sinks", a.sinks, a.q);
    if (a.sinks.dtype != DType::f32) invalid("sinks must be f32, got {}", to_string(a.sinks.dtype));
    if (a.sinks.shape[0] != l.N) invalid("sinks must have shape (N) = ({}), got ({})", l.N, a.sinks.shape[0]);
  }
  check_no_aliasing(inputs, outputs);
  check_options(a.options);
  if (a.workspace && reinterpret_cast<std::uintptr_t>(a.workspace->data) % 256 != 0)
    invalid("workspace.data must be 256-byte aligned (as cudaMalloc returns it), got {}", a.workspace->data);

  if (!cu_q.empty() && (a.paged ? !kv_lens.empty() : !cu_k.empty()))
    for (std::int64_t b = 0; b < l.B; ++b) {
      SequenceSpan s;
      s.q_begin = cu_q[std::size_t(b)], s.q_len = cu_q[std::size_t(b) + 1] - s.q_begin;
      if (a.paged) {
        s.kv_len = kv_lens[std::size_t(b)];
      } else {
        s.k_begin = cu_k[std::size_t(b)], s.kv_len = cu_k[std::size_t(b) + 1] - s.k_begin;
      }
      l.sequences.push_back(s);
    }
  return l;
}

AppendLayout validate(const AppendKVArgs& a) {
  AppendLayout l;
  RangeList inputs;
  const bool packed = !a.cu_seqlens_new.empty();
  const int rank = packed ? 3 : 4;
  const char* k_layout = packed ? "(total_new, K, Hqk)" : "(B, T_new, K, Hqk)";
  const char* v_layout = packed ? "(total_new, K, Hv)" : "(B, T_new, K, Hv)";
  inputs.push_back({"k_new", check_tensor("k_new", a.k_new, rank, k_layout), a.k_new.device});
  inputs.push_back({"v_new", check_tensor("v_new", a.v_new, rank, v_layout), a.v_new.device});
  check_same_place("v_new", a.v_new, a.k_new);
  l.dtype = a.k_new.dtype, l.device = a.k_new.device, l.packed_new = packed;
  if (a.v_new.dtype != l.dtype)
    invalid("k_new and v_new must share one dtype, got {} and {}", to_string(l.dtype), to_string(a.v_new.dtype));
  for (int d = 0; d + 1 < rank; ++d)
    if (a.v_new.shape[d] != a.k_new.shape[d])
      invalid("v_new.shape[{}] = {} must equal k_new.shape[{}] = {}", d, a.v_new.shape[d], d, a.k_new.shape[d]);
  l.K = a.k_new.shape[rank - 2], l.Hqk = a.k_new.shape[rank - 1], l.Hv = a.v_new.shape[rank - 1];

  const TensorView* k_cache = &a.k_cache;
  const TensorView* v_cache = &a.v_cache;
  std::vector<std::int64_t> lengths;
  if (a.paged) {
    if (!a.k_cache.empty() || !a.v_cache.empty() || !a.seqlens.empty())
      invalid("give the cache either contiguous (k_cache, v_cache, seqlens) or paged, not both");
    l.B = a.paged->block_table.rank == 2 ? a.paged->block_table.shape[0] : 0;
    std::int64_t pages = 0, per_sequence = 0;
    check_paged(*a.paged, l.B, a.k_new, INT64_MAX, inputs, false, pages, l.page_size, per_sequence, lengths);
    l.paged = true;
    l.capacity = per_sequence * l.page_size;
    k_cache = &a.paged->k_cache, v_cache = &a.paged->v_cache;
  } else {
    check_tensor("k_cache", a.k_cache, 4, "(B, S_max, K, Hqk)");
    check_tensor("v_cache", a.v_cache, 4, "(B, S_max, K, Hv)");
    check_same_place("k_cache", a.k_cache, a.k_new);
    check_same_place("v_cache", a.v_cache, a.k_new);
    l.B = a.k_cache.shape[0], l.capacity = a.k_cache.shape[1];
    for (int d = 0; d < 3; ++d)
      if (a.v_cache.shape[d] != a.k_cache.shape[d])
        invalid("v_cache.shape[{}] = {} must equal k_cache.shape[{}] = {}", d, a.v_cache.shape[d], d,
                a.k_cache.shape[d]);
    lengths = int_vector("seqlens", a.seqlens, l.B, "(B)", a.k_new, inputs);
  }
  if (k_cache->dtype != l.dtype || v_cache->dtype != l.dtype)
    invalid("the cache's dtype ({}, {}) must be the new rows' {}", to_string(k_cache->dtype),
            to_string(v_cache->dtype), to_string(l.dtype));
  if (k_cache->shape[2] != l.K || k_cache->shape[3] != l.Hqk || v_cache->shape[3] != l.Hv)
    invalid("the cache's heads and head dims (K = {}, Hqk = {}, Hv = {}) must be the new rows' ({}, {}, {})",
            k_cache->shape[2], k_cache->shape[3], v_cache->shape[3], l.K, l.Hqk, l.Hv);
  check_no_self_overlap("k_cache", *k_cache);
  check_no_self_overlap("v_cache", *v_cache);
  const ByteRange kc = check_tensor("k_cache", *k_cache, 4, "(…, K, Hqk)");
  const ByteRange vc = check_tensor("v_cache", *v_cache, 4, "(…, K, Hv)");
  check_no_aliasing(inputs, RangeList{{"k_cache", kc, k_cache->device}, {"v_cache", vc, v_cache->device}});

  std::vector<std::int64_t> cu_new;
  if (packed) {
    cu_new = int_vector("cu_seqlens_new", a.cu_seqlens_new, l.B + 1, "(B + 1)", a.k_new, inputs);
    check_offsets("cu_seqlens_new", cu_new, a.k_new.shape[0], "k_new", INT64_MAX, "the cache's capacity");
  } else if (a.k_new.shape[0] != l.B) {
    invalid("k_new.shape[0] = {} must equal the cache's B = {}", a.k_new.shape[0], l.B);
  }
  if (lengths.empty() || (packed && cu_new.empty())) return l;  // device lengths: the kernel bounds its writes
  for (std::int64_t b = 0; b < l.B; ++b) {
    SequenceSpan s;
    s.q_begin = packed ? cu_new[std::size_t(b)] : 0;
    s.q_len = packed ? cu_new[std::size_t(b) + 1] - s.q_begin : a.k_new.shape[1];
    s.kv_len = lengths[std::size_t(b)];
    if (s.kv_len < 0 || s.kv_len + s.q_len > l.capacity)
      invalid("sequence {}: {} cached + {} new keys do not fit its cache of {}", b, s.kv_len, s.q_len, l.capacity);
    l.sequences.push_back(s);
  }
  if (l.paged && a.paged->block_table.device == Device::cpu) {
    // The pages the new rows land in must exist (check_paged checked those of the cached rows).
    const auto* entries = static_cast<const std::int32_t*>(a.paged->block_table.data);
    for (std::int64_t b = 0; b < l.B; ++b) {
      const SequenceSpan& s = l.sequences[std::size_t(b)];
      for (std::int64_t i = s.kv_len / l.page_size; i * l.page_size < s.kv_len + s.q_len; ++i) {
        const std::int64_t page =
            entries[b * a.paged->block_table.strides[0] + i * a.paged->block_table.strides[1]];
        if (page < 0 || page >= a.paged->k_cache.shape[0])
          invalid("paged.block_table[{}][{}] = {} names no page (the cache has {})", b, i, page,
                  a.paged->k_cache.shape[0]);
      }
    }
  }
  return l;
}

}  // namespace attnlab::core
