#include "device_mirror.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "attnlab/version.h"

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace attnlab_test {
namespace {

// Bytes from the first element of a view to the end of its last one.
std::size_t view_span_bytes(const HostTensor& t) {
  std::int64_t last = 0;
  for (int d = 0; d < t.rank(); ++d) last += (t.shape()[std::size_t(d)] - 1) * t.strides()[std::size_t(d)];
  return std::size_t(last + 1) * elem_size(t.dtype());
}

#if ATTNLAB_WITH_CUDA
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}
#endif

}  // namespace

std::string gpu_unavailable() {
#if ATTNLAB_WITH_CUDA
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device (") + cudaGetErrorString(status) + ")";
  }
  if (count == 0) return "no CUDA device";
  return "";
#else
  return "attnlab was built without CUDA";
#endif
}

DeviceMirror::~DeviceMirror() {
#if ATTNLAB_WITH_CUDA
  for (const Entry& e : entries_) cudaFree(e.device);
#endif
}

TensorView DeviceMirror::upload(const HostTensor& t) {
  if (!t.defined()) return {};
  TensorView view = t.view();
#if ATTNLAB_WITH_CUDA
  const std::size_t bytes = view_span_bytes(t);
  void* device = nullptr;
  check(cudaMalloc(&device, bytes), "cudaMalloc");
  entries_.push_back({t.data(), device, bytes});
  check(cudaMemcpy(device, t.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  view.data = device;
  view.device = Device::cuda;
  int current = 0;
  check(cudaGetDevice(&current), "cudaGetDevice");
  view.device_index = current;  // the current device, where cudaMalloc placed it
#else
  throw std::runtime_error("DeviceMirror: built without CUDA");
#endif
  return view;
}

void DeviceMirror::download(HostTensor& t) {
  if (!t.defined()) return;
#if ATTNLAB_WITH_CUDA
  for (const Entry& e : entries_) {
    if (e.host != t.data()) continue;
    check(cudaMemcpy(t.data(), e.device, e.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return;
  }
#endif
  throw std::runtime_error("DeviceMirror::download: tensor was not uploaded");
}

void DeviceMirror::synchronize() {
#if ATTNLAB_WITH_CUDA
  const cudaError_t status = cudaDeviceSynchronize();
  ASSERT_EQ(status, cudaSuccess) << "asynchronous CUDA error: " << cudaGetErrorString(status);
#endif
}

}  // namespace attnlab_test
