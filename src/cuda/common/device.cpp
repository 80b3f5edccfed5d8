#include "cuda/common/device.h"

#include <cuda_runtime.h>

#include <vector>

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

namespace {

DeviceProperties read_properties(int index) {
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  DeviceProperties p;
  p.index = index;
  p.name = prop.name;
  p.cc_major = prop.major;
  p.cc_minor = prop.minor;
  p.sm_count = prop.multiProcessorCount;
  p.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  p.shared_memory_per_sm = prop.sharedMemPerMultiprocessor;
  p.l2_bytes = std::size_t(prop.l2CacheSize);
  p.global_memory_bytes = prop.totalGlobalMem;
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, index) != cudaSuccess) cudaGetLastError();
  p.memory_pools = pools != 0;
  cudaDriverGetVersion(&p.driver_version);
  cudaRuntimeGetVersion(&p.runtime_version);
  return p;
}

}  // namespace

// Every call asks for its device's properties, so they are read once, for every device at the first request,
// into a table that is never written again: a lookup is an index (and is safe from any thread).
const DeviceProperties& device_properties(int index) {
  if (auto why = cuda_unavailable()) core::fail(ErrorCode::unsupported, "{}", *why);
  static const std::vector<DeviceProperties> table = [] {
    std::vector<DeviceProperties> all;
    for (int i = 0, n = device_count(); i < n; ++i) all.push_back(read_properties(i));
    return all;
  }();
  if (index < 0 || index >= int(table.size()))
    core::invalid("CUDA device index {} is outside [0, {})", index, table.size());
  return table[std::size_t(index)];
}

DeviceGuard::DeviceGuard(int index) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != index) check_cuda(cudaSetDevice(index), "cudaSetDevice");
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

}  // namespace attnlab::cuda
