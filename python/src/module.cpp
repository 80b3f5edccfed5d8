// attnlab's Python extension (_attnlab): the C++ API over DLPack arrays, through nanobind. It owns no tensor
// memory: python/attnlab/__init__.py allocates outputs with the caller's array library and passes every array
// here as a view (nb::ndarray: NumPy, PyTorch, CuPy, JAX buffers, CPU or CUDA, any strides). The GIL is released
// for the call itself. Errors come back as attnlab.Error carrying the library's code and message.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "arrays.h"
#include "attnlab/attention.h"
#include "attnlab/version.h"
#include "serving.h"
#if ATTNLAB_JAX_FFI
#include "jax_ffi.h"
#endif

namespace nb = nanobind;
using attnlab_python::Array;
using attnlab_python::optional_view;
using attnlab_python::options;
using attnlab_python::run_with_workspace;
using attnlab_python::thread_context;
using attnlab_python::view_of;

namespace {

attnlab::ForwardArgs forward_args(const Array& q, const Array& k, const Array& v, const Array& o,
                                  const std::optional<Array>& lse, std::optional<float> scale, bool causal,
                                  bool bottom_right, std::int64_t window_left, std::int64_t window_right,
                                  const std::optional<Array>& q_seqlens, const std::optional<Array>& kv_seqlens,
                                  const std::optional<Array>& bias, const std::optional<Array>& mask,
                                  const std::string& path) {
  attnlab::ForwardArgs a;
  a.q = view_of(q, "query"), a.k = view_of(k, "key"), a.v = view_of(v, "value"), a.o = view_of(o, "out");
  a.lse = optional_view(lse, "lse");
  a.options = options(scale, causal, bottom_right, window_left, window_right, q_seqlens, kv_seqlens, bias, mask, path);
  return a;
}

// forward(q, k, v, o, lse, ...) → the path that ran. `stream` is a cudaStream_t as an integer (0 = legacy default);
// `workspace` as lend_workspace takes it.
std::string forward(const Array& q, const Array& k, const Array& v, const Array& o, const std::optional<Array>& lse,
                    std::optional<float> scale, bool causal, bool bottom_right, std::int64_t window_left,
                    std::int64_t window_right, const std::optional<Array>& q_seqlens,
                    const std::optional<Array>& kv_seqlens, const std::optional<Array>& bias,
                    const std::optional<Array>& mask, const std::string& path, std::uintptr_t stream,
                    nb::handle workspace) {
  attnlab::ForwardArgs a = forward_args(q, k, v, o, lse, scale, causal, bottom_right, window_left, window_right,
                                        q_seqlens, kv_seqlens, bias, mask, path);
  return run_with_workspace(a, stream, workspace, [](attnlab::Context& ctx, const attnlab::ForwardArgs& args) {
    return attnlab::forward(ctx, args).path;
  });
}

// The scratch bytes that call would need from a caller workspace (attnlab::workspace_size).
std::size_t forward_workspace_size(const Array& q, const Array& k, const Array& v, const Array& o,
                                   const std::optional<Array>& lse, std::optional<float> scale, bool causal,
                                   bool bottom_right, std::int64_t window_left, std::int64_t window_right,
                                   const std::optional<Array>& q_seqlens, const std::optional<Array>& kv_seqlens,
                                   const std::optional<Array>& bias, const std::optional<Array>& mask,
                                   const std::string& path, std::uintptr_t stream) {
  const attnlab::ForwardArgs a = forward_args(q, k, v, o, lse, scale, causal, bottom_right, window_left, window_right,
                                              q_seqlens, kv_seqlens, bias, mask, path);
  attnlab::Context& ctx = thread_context();
  nb::gil_scoped_release release;
  ctx.set_stream(reinterpret_cast<void*>(stream));
  return attnlab::workspace_size(ctx, a);
}

attnlab::BackwardArgs backward_args(const Array& q, const Array& k, const Array& v, const Array& o,
                                    const Array& d_o, const Array& lse, const Array& dq, const Array& dk,
                                    const Array& dv, std::optional<float> scale, bool causal, bool bottom_right,
                                    std::int64_t window_left, std::int64_t window_right,
                                    const std::optional<Array>& q_seqlens, const std::optional<Array>& kv_seqlens,
                                    const std::optional<Array>& bias, const std::optional<Array>& mask,
                                    const std::string& path) {
  attnlab::BackwardArgs a;
  a.q = view_of(q, "query"), a.k = view_of(k, "key"), a.v = view_of(v, "value"), a.o = view_of(o, "out");
  a.d_o = view_of(d_o, "d_out"), a.lse = view_of(lse, "lse");
  a.dq = view_of(dq, "d_query"), a.dk = view_of(dk, "d_key"), a.dv = view_of(dv, "d_value");
  a.options = options(scale, causal, bottom_right, window_left, window_right, q_seqlens, kv_seqlens, bias, mask, path);
  return a;
}

std::string backward(const Array& q, const Array& k, const Array& v, const Array& o, const Array& d_o,
                     const Array& lse, const Array& dq, const Array& dk, const Array& dv, std::optional<float> scale,
                     bool causal, bool bottom_right, std::int64_t window_left, std::int64_t window_right,
                     const std::optional<Array>& q_seqlens, const std::optional<Array>& kv_seqlens,
                     const std::optional<Array>& bias, const std::optional<Array>& mask, const std::string& path,
                     std::uintptr_t stream, nb::handle workspace) {
  attnlab::BackwardArgs a = backward_args(q, k, v, o, d_o, lse, dq, dk, dv, scale, causal, bottom_right, window_left,
                                          window_right, q_seqlens, kv_seqlens, bias, mask, path);
  return run_with_workspace(a, stream, workspace, [](attnlab::Context& ctx, const attnlab::BackwardArgs& args) {
    return attnlab::backward(ctx, args).path;
  });
}

std::size_t backward_workspace_size(const Array& q, const Array& k, const Array& v, const Array& o, const Array& d_o,
                                    const Array& lse, const Array& dq, const Array& dk, const Array& dv,
                                    std::optional<float> scale, bool causal, bool bottom_right,
                                    std::int64_t window_left, std::int64_t window_right,
                                    const std::optional<Array>& q_seqlens, const std::optional<Array>& kv_seqlens,
                                    const std::optional<Array>& bias, const std::optional<Array>& mask,
                                    const std::string& path, std::uintptr_t stream) {
  const attnlab::BackwardArgs a = backward_args(q, k, v, o, d_o, lse, dq, dk, dv, scale, causal, bottom_right,
                                                window_left, window_right, q_seqlens, kv_seqlens, bias, mask, path);
  attnlab::Context& ctx = thread_context();
  nb::gil_scoped_release release;
  ctx.set_stream(reinterpret_cast<void*>(stream));
  return attnlab::workspace_size(ctx, a);
}

}  // namespace

NB_MODULE(_attnlab, m) {
  m.doc() = "attnlab's C++ API over DLPack arrays (use the attnlab package, not this module)";
  m.attr("__version__") = ATTNLAB_VERSION_STRING;

  static nb::object error_type = nb::exception<attnlab::Error>(m, "Error", PyExc_ValueError);
  (void)error_type;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const attnlab::Error& e) {
      nb::object err = error_type(std::string(e.what()));
      err.attr("code") = int(e.code());
      PyErr_SetObject(error_type.ptr(), err.ptr());
    }
  });

  m.def(
      "paths",
      [] {
        std::vector<nb::dict> out;
        for (const attnlab::PathInfo& p : attnlab::list_paths()) {
          nb::dict d;
          d["name"] = p.name;
          d["device"] = std::string(attnlab::to_string(p.device));
          d["available"] = p.available;
          d["unavailable"] = p.unavailable;
          d["summary"] = p.summary;
          out.push_back(d);
        }
        return out;
      },
      "Every path of this build: name, device, whether it can run here (and why not), what it is.");
  m.def(
      "jax_handlers",
      [] {
        std::vector<nb::tuple> out;
#if ATTNLAB_JAX_FFI
        for (const attnlab_python::JaxHandler& h : attnlab_python::jax_handlers())
          out.push_back(nb::make_tuple(h.target, h.platform, nb::capsule(h.handler)));
#endif
        return out;
      },
      "The XLA FFI handlers (target, platform, capsule) of this build; empty when it was built without jaxlib.");
  // The options shared by every call, after its arrays.
  auto opts = [](auto&&... arrays) {
    return std::make_tuple(arrays..., nb::arg("scale").none(), nb::arg("causal"), nb::arg("bottom_right"),
                           nb::arg("window_left"), nb::arg("window_right"), nb::arg("q_seqlens").none(),
                           nb::arg("kv_seqlens").none(), nb::arg("bias").none(), nb::arg("mask").none(),
                           nb::arg("path"), nb::arg("stream"));
  };
  auto def = [&](const char* name, auto fn, auto args, auto... extra) {
    std::apply([&](auto... a) { m.def(name, fn, a..., extra...); }, args);
  };
  def("forward", &forward,
      opts(nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("out"), nb::arg("lse").none()),
      nb::arg("workspace").none() = nb::none());
  def("forward_workspace_size", &forward_workspace_size,
      opts(nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("out"), nb::arg("lse").none()));
  def("backward", &backward,
      opts(nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("out"), nb::arg("d_out"), nb::arg("lse"),
           nb::arg("d_query"), nb::arg("d_key"), nb::arg("d_value")),
      nb::arg("workspace").none() = nb::none());
  def("backward_workspace_size", &backward_workspace_size,
      opts(nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("out"), nb::arg("d_out"), nb::arg("lse"),
           nb::arg("d_query"), nb::arg("d_key"), nb::arg("d_value")));
  attnlab_python::bind_serving(m);
}
