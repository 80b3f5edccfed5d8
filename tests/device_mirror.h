// Running a harness case on the GPU: device copies of the host tensors, the call's views rewritten to point at
// them, and the outputs copied back into the host tensors so every host-side check applies unchanged.
#pragma once

#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "test_support.h"

namespace attnlab_test {

// Why GPU tests cannot run here ("" when they can): no CUDA support compiled in, or no usable device.
std::string gpu_unavailable();

// Skips the current test, visibly, when no GPU can be used.
#define ATTNLAB_REQUIRE_GPU()                                                         \
  do {                                                                                \
    const std::string why_no_gpu = ::attnlab_test::gpu_unavailable();                 \
    if (!why_no_gpu.empty()) GTEST_SKIP() << "GPU test skipped: " << why_no_gpu;      \
  } while (0)

class DeviceMirror {
 public:
  DeviceMirror() = default;
  ~DeviceMirror();
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;

  // A device copy of `t` (same strides, same bytes, padding included); an empty view for an undefined tensor.
  TensorView upload(const HostTensor& t);
  // Copies the device bytes of `t` (uploaded before) back into it: outputs, and padding to check it is untouched.
  void download(HostTensor& t);
  // Waits for the device and fails the test on an asynchronous error.
  void synchronize();

 private:
  struct Entry {
    const void* host;
    void* device;
    std::size_t bytes;
  };
  std::vector<Entry> entries_;
};

}  // namespace attnlab_test
