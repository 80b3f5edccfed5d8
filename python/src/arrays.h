// What the extension's bindings share (module.cpp, serving.cpp): DLPack arrays as the library's views, the
// calling thread's context, and a caller's workspace lent to a call.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <optional>

#include "attnlab/attention.h"
#include "attnlab/serving.h"  // workspace_size(ctx, VarlenForwardArgs) for lend_workspace

namespace attnlab_python {

namespace nb = nanobind;
using Array = nb::ndarray<>;

// A DLPack array as the library's view: its pointer, dtype, device and element strides. `name` names it in errors.
attnlab::TensorView view_of(const Array& a, const char* name);
// An absent array as an empty view.
attnlab::TensorView optional_view(const std::optional<Array>& a, const char* name);

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

}  // namespace attnlab_python
