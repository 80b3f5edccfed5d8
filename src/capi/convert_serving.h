// The serving structs of the C ABI (attnlab.h, ABI 4 and 5) as the C++ API's (attnlab/serving.h): their released layouts
// and the conversions, on the pattern of convert.h.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "attnlab/attnlab.h"
#include "attnlab/serving.h"
#include "capi/convert.h"

namespace attnlab::capi {

#define ATTNLAB_LAYOUT_END(S, last_field) \
  ::attnlab::capi::layout_size<S>(offsetof(S, last_field) + sizeof(S{}.last_field))
template <>
struct Layouts<attnlab_paged_kv> {
  static constexpr const char* name = "attnlab_paged_kv";
  static constexpr const char* init = "attnlab_paged_kv_init";
  static constexpr std::array<Layout, 1> known{{{4, ATTNLAB_LAYOUT_END(attnlab_paged_kv, seqlens)}}};
};
template <>
struct Layouts<attnlab_varlen_forward_args> {
  static constexpr const char* name = "attnlab_varlen_forward_args";
  static constexpr const char* init = "attnlab_varlen_forward_args_init";
  static constexpr std::array<Layout, 2> known{{{4, ATTNLAB_LAYOUT_END(attnlab_varlen_forward_args, workspace_bytes)},
                                                {5, ATTNLAB_LAYOUT_END(attnlab_varlen_forward_args, sinks)}}};
};
template <>
struct Layouts<attnlab_append_kv_args> {
  static constexpr const char* name = "attnlab_append_kv_args";
  static constexpr const char* init = "attnlab_append_kv_args_init";
  static constexpr std::array<Layout, 1> known{{{4, ATTNLAB_LAYOUT_END(attnlab_append_kv_args, paged)}}};
};
#undef ATTNLAB_LAYOUT_END

#define ATTNLAB_CHECK_SERVING_LAYOUTS(S)                                                                       \
  static_assert(offsetof(S, struct_size) == 0 && std::is_same_v<decltype(S{}.struct_size), std::size_t>,       \
                #S ": struct_size must be the first field, a size_t");                                         \
  static_assert(Layouts<S>::known.back().size == sizeof(S),                                                   \
                #S " has fields past its newest known layout: add a layout here and bump ATTNLAB_ABI_VERSION"); \
  static_assert(layouts_grow<S>(), #S ": layouts must grow in ABI version and size, up to ATTNLAB_ABI_VERSION")
ATTNLAB_CHECK_SERVING_LAYOUTS(attnlab_paged_kv);
ATTNLAB_CHECK_SERVING_LAYOUTS(attnlab_varlen_forward_args);
ATTNLAB_CHECK_SERVING_LAYOUTS(attnlab_append_kv_args);
#undef ATTNLAB_CHECK_SERVING_LAYOUTS
static_assert(Layouts<attnlab_varlen_forward_args>::known.back().abi == ATTNLAB_ABI_VERSION,
              "ATTNLAB_ABI_VERSION must be the version of the newest layout (attnlab_varlen_forward_args' 5)");
#if defined(__x86_64__)
static_assert(Layouts<attnlab_paged_kv>::known[0].size == 360, "attnlab_paged_kv's ABI 4 layout changed");
static_assert(Layouts<attnlab_varlen_forward_args>::known[0].size == 680, "attnlab_varlen_forward_args' ABI 4");
static_assert(Layouts<attnlab_varlen_forward_args>::known[1].size == 768, "attnlab_varlen_forward_args' ABI 5");
static_assert(Layouts<attnlab_append_kv_args>::known[0].size == 544, "attnlab_append_kv_args' ABI 4 layout");
#endif

// `given` NULL: no paged cache.
inline std::optional<PagedKV> to_cxx(const attnlab_paged_kv* given, const std::string& where) {
  if (given == nullptr) return std::nullopt;
  const attnlab_paged_kv c = accept(given, where + "args->paged: ");
  return PagedKV{to_cxx(c.k_cache, "paged.k_cache"), to_cxx(c.v_cache, "paged.v_cache"),
                 to_cxx(c.block_table, "paged.block_table"), to_cxx(c.seqlens, "paged.seqlens")};
}

inline VarlenForwardArgs to_cxx(const attnlab_varlen_forward_args* given, const char* function) {
  const std::string where = std::string(function) + ": ";
  const attnlab_varlen_forward_args a = accept(given, where);
  VarlenForwardArgs out;
  out.q = to_cxx(a.q, "q");
  out.cu_seqlens_q = to_cxx(a.cu_seqlens_q, "cu_seqlens_q");
  out.max_seqlen_q = a.max_seqlen_q;
  out.k = to_cxx(a.k, "k");
  out.v = to_cxx(a.v, "v");
  out.cu_seqlens_k = to_cxx(a.cu_seqlens_k, "cu_seqlens_k");
  out.max_seqlen_k = a.max_seqlen_k;
  out.paged = to_cxx(a.paged, where);
  out.o = to_cxx(a.o, "o");
  out.lse = to_cxx(a.lse, "lse");
  out.options = to_cxx(a.options, where);
  out.workspace = workspace_to_cxx(a.has_workspace, a.workspace, a.workspace_bytes);
  out.sinks = to_cxx(a.sinks, "sinks");  // absent (zeroed) for an ABI 4 caller
  return out;
}

inline AppendKVArgs to_cxx(const attnlab_append_kv_args* given, const char* function) {
  const std::string where = std::string(function) + ": ";
  const attnlab_append_kv_args a = accept(given, where);
  AppendKVArgs out;
  out.k_new = to_cxx(a.k_new, "k_new");
  out.v_new = to_cxx(a.v_new, "v_new");
  out.cu_seqlens_new = to_cxx(a.cu_seqlens_new, "cu_seqlens_new");
  out.k_cache = to_cxx(a.k_cache, "k_cache");
  out.v_cache = to_cxx(a.v_cache, "v_cache");
  out.seqlens = to_cxx(a.seqlens, "seqlens");
  out.paged = to_cxx(a.paged, where);
  return out;
}

}  // namespace attnlab::capi
