// A CUDA library handle (cuBLAS, cuDNN) for one device, created on first use and destroyed without throwing. The
// libraries allocate device memory when a handle is made, so creating one counts as a device allocation of the
// call (RunInfo::device_allocations).
#pragma once

#include "cuda/common/device.h"

namespace attnlab::cuda {

// Library: struct { using Handle = ...; static const char* name; static int create(Handle*); static void
// destroy(Handle) noexcept; static const char* error(int status); } — create returns 0 on success.
template <class Library>
class LibraryHandle {
 public:
  using Handle = typename Library::Handle;
  LibraryHandle() = default;
  ~LibraryHandle() { reset(); }
  LibraryHandle(const LibraryHandle&) = delete;
  LibraryHandle& operator=(const LibraryHandle&) = delete;

  // The handle for `device` (current): made on first use, or anew when the last call was on another device. Not
  // while `stream` captures a graph: the library would allocate inside the capture.
  Handle get(int device, cudaStream_t stream, int& allocations, const char* who) {
    if (handle_ != nullptr && device_ != device) reset();
    if (handle_ == nullptr) {
      if (capturing(stream))
        core::fail(ErrorCode::unsupported,
                   "{}: the context's {} handle would be created while the stream is capturing a CUDA graph; run "
                   "the call once before capturing",
                   who, Library::name);
      Handle h = nullptr;
      if (const int status = Library::create(&h); status != 0)
        core::fail(status == Library::kOutOfMemory ? ErrorCode::out_of_memory : ErrorCode::device_error,
                   "{}: creating the {} handle failed: {}", who, Library::name, Library::error(status));
      handle_ = h;
      device_ = device;
      ++allocations;
    }
    return handle_;
  }
  int device() const { return handle_ != nullptr ? device_ : -1; }

  void reset() noexcept {
    if (handle_ == nullptr) return;
    on_device_quietly(device_, [&] { Library::destroy(handle_); });
    handle_ = nullptr;
    device_ = -1;
  }

 private:
  Handle handle_ = nullptr;
  int device_ = -1;
};

}  // namespace attnlab::cuda
