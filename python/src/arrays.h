// What the extension's bindings share (module.cpp, serving.cpp): DLPack arrays as the library's views, the
// calling thread's context, and a caller's workspace lent to a call.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>
#include <string>

#include "attnlab/attention.h"
#include "attnlab/serving.h"  // workspace_size(ctx, VarlenForwardArgs) for lend_workspace

namespace attnlab_python {

namespace nb = nanobind;
using Array = nb::ndarray<>;

// A DLPack array as the library's view: its pointer, dtype, device and element strides. `name` names it in errors.
attnlab::TensorView view_of(const Array& a, const char* name);
// An absent array as an empty view.
attnlab::TensorView optional_view(const std::optional<Array>& a, const char* name);

// The options every call shares, from the bindings' arguments (absent arrays stay empty views).
attnlab::Options options(std::optional<float> scale, bool causal, bool bottom_right, std::int64_t window_left,
                         std::int64_t window_right, const std::optional<Array>& q_seqlens,
                         const std::optional<Array>& kv_seqlens, const std::optional<Array>& bias,
                         const std::optional<Array>& mask, const std::string& path);

// One context per thread: a context is used by one thread at a time (attention.h), and its workspace and cuDNN
// graphs are what make a repeated call cheap.
attnlab::Context& thread_context();

// A caller's scratch as the call's workspace: GPU paths then take all their scratch from it and allocate nothing
// (attention.h, ForwardArgs::workspace). `workspace` is None (the context's own workspace serves), a uint8 array of
// the call's device, or a callable allocate(nbytes) → such an array, called only when the call needs bytes. The
// callable form asks the size here, so a caller imports its arrays once per call instead of once for the size
// and once for the call. `held` keeps the array alive until the call has been issued.
template <class Args>
void lend_workspace(attnlab::Context& ctx, Args& a, nb::handle workspace, std::optional<Array>& held) {
  if (workspace.is_none()) return;
  if (PyCallable_Check(workspace.ptr())) {
    const std::size_t bytes = attnlab::workspace_size(ctx, a);
    a.workspace = attnlab::DeviceBuffer{nullptr, 0};
    if (bytes == 0) return;
    held = nb::cast<Array>(workspace(bytes));
  } else {
    held = nb::cast<Array>(workspace);
  }
  a.workspace = attnlab::DeviceBuffer{held->data(), held->nbytes()};
}

// Runs call(ctx, a) on the calling thread's context, on `stream` (a cudaStream_t as an integer, 0 = legacy
// default), with `workspace` lent as lend_workspace takes it, the GIL released for the call itself.
template <class Args, class Call>
std::string run_with_workspace(Args& a, std::uintptr_t stream, nb::handle workspace, Call call) {
  attnlab::Context& ctx = thread_context();
  ctx.set_stream(reinterpret_cast<void*>(stream));
  std::optional<Array> held;
  lend_workspace(ctx, a, workspace, held);
  nb::gil_scoped_release release;
  return call(ctx, a);
}

}  // namespace attnlab_python
