// The CUDA device of a call: presence, compute capability, and the device guard paths run under.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <optional>
#include <string>

namespace attnlab::cuda {

struct DeviceProperties {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::size_t shared_memory_per_block_optin = 0;
  std::size_t shared_memory_per_sm = 0;  // all blocks resident on one SM together (H200: 228 KB, A100: 164 KB)
  std::size_t l2_bytes = 0;
  std::size_t global_memory_bytes = 0;
  bool memory_pools = false;  // cudaMallocAsync / cudaFreeAsync work on this device
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;  // the CUDA runtime attnlab was built with
};

// Why no CUDA device can be used (no driver, no device, ...), or nullopt when at least one can.
std::optional<std::string> cuda_unavailable();
int device_count();
const DeviceProperties& device_properties(int index);

// Makes `index` current for a scope and restores the previous device afterwards. Throws when the runtime fails:
// for calls. Destructors use on_device_quietly().
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Runs `fn` with `device` current and restores the previous device, ignoring every CUDA error (and clearing the
// last one): for teardown, which must not throw — after a sticky error, or while the process exits and the
// runtime is already going away.
template <class Fn>
void on_device_quietly(int device, Fn&& fn) noexcept {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (device >= 0 && device != previous) cudaSetDevice(device);
  fn();
  if (previous >= 0 && device != previous) cudaSetDevice(previous);
  cudaGetLastError();
}

// Whether `stream` is capturing a CUDA graph (false when the query itself fails: the launch will report that).
bool capturing(cudaStream_t stream);

}  // namespace attnlab::cuda
