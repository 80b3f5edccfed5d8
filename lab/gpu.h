// The CUDA runtime as the lab uses it: which GPUs there are, and device memory for tensors. In a build without
// CUDA every function here answers "no GPU" and nothing links against the CUDA runtime.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace lab::gpu {

// True when this build can talk to GPUs at all (the CUDA paths were compiled in).
bool compiled_in();

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::size_t memory_bytes = 0;
  std::size_t shared_memory_per_block_optin = 0;  // the most a kernel may ask for (sm_89: ~99 KB, H200: 227 KB)
  std::size_t l2_bytes = 0;                        // inputs smaller than this are rotated when timing
};

struct Inventory {
  std::vector<DeviceInfo> devices;
  std::string driver_version;   // "13.0", empty when unknown
  std::string runtime_version;  // the CUDA runtime the lab was built with
  std::string problem;          // why no GPU is usable, when devices is empty
};
Inventory inventory();

// Device memory owned by the lab. Copies are synchronous so the caller can read results right after.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes, int device = 0);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  void* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;
};

// Device milliseconds for `calls` back-to-back calls fn(first), fn(first + 1), ...: CUDA events recorded on the
// legacy default stream (the stream of a Context nobody gave another) before the first and after the last call.
double time_calls_ms(const std::function<void(int)>& fn, int first, int calls, int device = 0);

// Waits for all work on the device (the library's calls are asynchronous on the context's stream).
void synchronize(int device = 0);

}  // namespace lab::gpu
