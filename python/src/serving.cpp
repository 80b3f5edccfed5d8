// The serving calls over DLPack arrays (serving.h): python/attnlab/serving.py allocates the outputs and passes
// every array here as a view; the GIL is released for the call itself.
#include "serving.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "arrays.h"
#include "attnlab/serving.h"

namespace attnlab_python {
namespace {

// varlen_forward(...) → the path that ran. Keys are packed (key, value, cu_seqlens_k) or paged (k_cache, v_cache,
// block_table, cache_seqlens); the library checks which is given. `stream` is a cudaStream_t as an integer.
std::string varlen_forward(const Array& q, const Array& o, const std::optional<Array>& lse, const Array& cu_q,
                           std::int64_t max_q, const std::optional<Array>& k, const std::optional<Array>& v,
                           const std::optional<Array>& cu_k, std::int64_t max_k,
                           const std::optional<Array>& k_cache, const std::optional<Array>& v_cache,
                           const std::optional<Array>& block_table, const std::optional<Array>& cache_seqlens,
                           const std::optional<Array>& sinks, std::optional<float> scale, float softcap,
                           bool causal, bool bottom_right, std::int64_t window_left, std::int64_t window_right,
                           const std::string& path, std::uintptr_t stream, nb::handle workspace) {
  attnlab::VarlenForwardArgs a;
  a.q = view_of(q, "query"), a.o = view_of(o, "out"), a.lse = optional_view(lse, "lse");
  a.cu_seqlens_q = view_of(cu_q, "cu_seqlens_q"), a.max_seqlen_q = max_q;
  a.k = optional_view(k, "key"), a.v = optional_view(v, "value");
  a.cu_seqlens_k = optional_view(cu_k, "cu_seqlens_k"), a.max_seqlen_k = max_k;
  if (k_cache || v_cache || block_table || cache_seqlens)
    a.paged = attnlab::PagedKV{optional_view(k_cache, "k_cache"), optional_view(v_cache, "v_cache"),
                               optional_view(block_table, "block_table"),
                               optional_view(cache_seqlens, "cache_seqlens")};
  a.sinks = optional_view(sinks, "sinks");
  // The layout carries the lengths; bias and boolean masks have no meaning across sequences (serving.h).
  a.options = options(scale, causal, bottom_right, window_left, window_right, std::nullopt, std::nullopt,
                      std::nullopt, std::nullopt, path);
  a.options.softcap = softcap;
  return run_with_workspace(a, stream, workspace, [](attnlab::Context& ctx, const attnlab::VarlenForwardArgs& args) {
    return attnlab::forward(ctx, args).path;
  });
}

// append_kv(...): new rows padded (B, T_new, K, H) or packed with cu_seqlens_new, into a contiguous cache
// (k_cache, v_cache, cache_seqlens) or a paged one (block_table given).
void append_kv(const Array& k_new, const Array& v_new, const std::optional<Array>& cu_new, const Array& k_cache,
               const Array& v_cache, const Array& cache_seqlens, const std::optional<Array>& block_table,
               std::uintptr_t stream) {
  attnlab::AppendKVArgs a;
  a.k_new = view_of(k_new, "k_new"), a.v_new = view_of(v_new, "v_new");
  a.cu_seqlens_new = optional_view(cu_new, "cu_seqlens_new");
  if (block_table) {
    a.paged = attnlab::PagedKV{view_of(k_cache, "k_cache"), view_of(v_cache, "v_cache"),
                               view_of(*block_table, "block_table"), view_of(cache_seqlens, "cache_seqlens")};
  } else {
    a.k_cache = view_of(k_cache, "k_cache"), a.v_cache = view_of(v_cache, "v_cache");
    a.seqlens = view_of(cache_seqlens, "cache_seqlens");
  }
  attnlab::Context& ctx = thread_context();
  ctx.set_stream(reinterpret_cast<void*>(stream));
  nb::gil_scoped_release release;
  attnlab::append_kv(ctx, a);
}

}  // namespace

void bind_serving(nb::module_& m) {
  m.def("varlen_forward", &varlen_forward, nb::arg("query"), nb::arg("out"), nb::arg("lse").none(),
        nb::arg("cu_seqlens_q"), nb::arg("max_seqlen_q"), nb::arg("key").none(), nb::arg("value").none(),
        nb::arg("cu_seqlens_k").none(), nb::arg("max_seqlen_k"), nb::arg("k_cache").none(),
        nb::arg("v_cache").none(), nb::arg("block_table").none(), nb::arg("cache_seqlens").none(),
        nb::arg("sinks").none(), nb::arg("scale").none(), nb::arg("softcap"), nb::arg("causal"),
        nb::arg("bottom_right"), nb::arg("window_left"), nb::arg("window_right"), nb::arg("path"),
        nb::arg("stream"), nb::arg("workspace").none() = nb::none());
  m.def("append_kv", &append_kv, nb::arg("k_new"), nb::arg("v_new"), nb::arg("cu_seqlens_new").none(),
        nb::arg("k_cache"), nb::arg("v_cache"), nb::arg("cache_seqlens"), nb::arg("block_table").none(),
        nb::arg("stream"));
}

}  // namespace attnlab_python
