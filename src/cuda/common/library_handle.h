// CUDA library handles (cuBLAS, cuDNN) of a context, one per device, each created on the first call that needs
// it and destroyed without throwing. The libraries allocate device memory when a handle is made, so creating one
// counts as a device allocation of the call (RunInfo::device_allocations), and is refused while the call's stream
// captures a graph (the allocation would happen inside the capture).
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/common/device.h"

namespace attnlab::cuda {

// Library: struct { using Handle = ...; static constexpr const char* name; static constexpr int kOutOfMemory;
// static int create(Handle*); static void destroy(Handle) noexcept; static const char* error(int status); }, with
// create returning 0 on success.
template <class Library>
class LibraryHandles {
 public:
  using Handle = typename Library::Handle;
  LibraryHandles() = default;
  ~LibraryHandles() {
    for (std::size_t d = 0; d < handles_.size(); ++d)
      if (handles_[d] != nullptr) on_device_quietly(int(d), [&] { Library::destroy(handles_[d]); });
  }
  LibraryHandles(const LibraryHandles&) = delete;
  LibraryHandles& operator=(const LibraryHandles&) = delete;

  bool has(int device) const { return std::size_t(device) < handles_.size() && handles_[device] != nullptr; }

  // Why the call cannot get its handle now: it would be created while `stream` captures a graph.
  std::optional<std::string> refusal(int device, cudaStream_t stream) const {
    if (has(device) || !capturing(stream)) return std::nullopt;
    return fmt::format("the context's {} handle for this GPU would be created while the stream is capturing a CUDA "
                       "graph; run the call once before capturing",
                       Library::name);
  }

  // The handle for `device` (current), made on first use (after refusal() said yes).
  Handle get(int device, int& allocations, const char* who) {
    if (has(device)) return handles_[device];
    if (handles_.size() <= std::size_t(device)) handles_.resize(std::size_t(device) + 1, nullptr);
    Handle h = nullptr;
    if (const int status = Library::create(&h); status != 0)
      core::fail(status == Library::kOutOfMemory ? ErrorCode::out_of_memory : ErrorCode::device_error,
                 "{}: creating the {} handle failed: {}", who, Library::name, Library::error(status));
    handles_[device] = h;
    ++allocations;
    return h;
  }

 private:
  std::vector<Handle> handles_;  // by device index; null where none was made
};

}  // namespace attnlab::cuda
