#include "cuda/common/device.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>

#include "cuda/common/cuda_check.h"

namespace attnlab::cuda {

std::optional<std::string> cuda_unavailable() {
  static const std::optional<std::string> reason = []() -> std::optional<std::string> {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      cudaGetLastError();
      return fmt::format("no usable CUDA device ({})", cudaGetErrorString(status));
    }
    if (count == 0) return std::string("no CUDA device found");
    return std::nullopt;
  }();
  return reason;
}

int device_count() {
  if (cuda_unavailable()) return 0;
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  return count;
}

// Every call asks for its device's properties, so the common case reads one atomic pointer: the first call per
// device fills the cache under the mutex and publishes the entry (map nodes do not move).
const DeviceProperties& device_properties(int index) {
  constexpr int kFastDevices = 64;
  static std::array<std::atomic<const DeviceProperties*>, kFastDevices> published{};
  const bool fast = index >= 0 && index < kFastDevices;
  if (fast)
    if (const DeviceProperties* known = published[std::size_t(index)].load(std::memory_order_acquire)) return *known;
  static std::mutex mutex;
  static std::map<int, DeviceProperties> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(index);
  if (it != cache.end()) return it->second;
  if (auto why = cuda_unavailable()) core::fail(ErrorCode::unsupported, "{}", *why);
  if (index < 0 || index >= device_count())
    core::invalid("CUDA device index {} is outside [0, {})", index, device_count());
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  DeviceProperties p;
  p.index = index;
  p.name = prop.name;
  p.cc_major = prop.major;
  p.cc_minor = prop.minor;
  p.sm_count = prop.multiProcessorCount;
  p.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  p.l2_bytes = std::size_t(prop.l2CacheSize);
  p.global_memory_bytes = prop.totalGlobalMem;
  cudaDriverGetVersion(&p.driver_version);
  cudaRuntimeGetVersion(&p.runtime_version);
  const DeviceProperties& entry = cache.emplace(index, p).first->second;
  if (fast) published[std::size_t(index)].store(&entry, std::memory_order_release);
  return entry;
}

DeviceGuard::DeviceGuard(int index) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != index) check_cuda(cudaSetDevice(index), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

}  // namespace attnlab::cuda
