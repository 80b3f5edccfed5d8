#include "gpu.h"

#include <chrono>
#include <utility>

#include <fmt/format.h>

#include <attnlab/attention.h>

#if ATTNLAB_LAB_CUDA
#include <cuda_runtime_api.h>
#endif

namespace lab::gpu {

#if ATTNLAB_LAB_CUDA

namespace {
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw attnlab::Error(attnlab::ErrorCode::device_error,
                         fmt::format("{}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status)));
}
std::string version_string(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }
}  // namespace

bool compiled_in() { return true; }

Inventory inventory() {
  Inventory inv;
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) inv.runtime_version = version_string(runtime);
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) inv.driver_version = version_string(driver);
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // Without an NVIDIA driver the runtime reports "driver version is insufficient"; say what that means here.
    inv.problem = inv.driver_version.empty() ? "no NVIDIA driver found (no GPU on this machine?)"
                                             : fmt::format("no usable GPU: {}", cudaGetErrorString(status));
    cudaGetLastError();  // the failed query stays the "last error"; clear it so later calls start clean
    return inv;
  }
  if (count == 0) inv.problem = "no CUDA GPU found";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = prop.name;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.sm_count = prop.multiProcessorCount;
    d.memory_bytes = prop.totalGlobalMem;
    d.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
    d.l2_bytes = std::size_t(prop.l2CacheSize);
    inv.devices.push_back(std::move(d));
  }
  return inv;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) : bytes_(bytes), device_(device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw attnlab::Error(attnlab::ErrorCode::out_of_memory,
                         fmt::format("cannot allocate {:.1f} MiB on GPU {}", double(bytes) / (1 << 20), device));
  }
  check(status, "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), device_(other.device_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  check(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the GPU");
}

void DeviceBuffer::download(void* host, std::size_t bytes) const {
  check(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the GPU");
}

CallTimes time_calls(const std::function<void(int)>& fn, int first, int calls, int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  float ms = 0.0f;
  CallTimes times;
  try {
    check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    const auto issue = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn(first + i);
    times.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - issue).count();
    check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  times.device_ms = ms;
  return times;
}

void synchronize(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

Stream::Stream(int device, bool blocking) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, blocking ? cudaStreamDefault : cudaStreamNonBlocking),
        "cudaStreamCreateWithFlags");
  stream_ = s;
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void Stream::synchronize() const {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
}

void copy_on_device(void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync");
}

namespace {
std::string describe(cudaError_t status) {
  return fmt::format("{} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
}
}  // namespace

GraphCapture::GraphCapture(int device) : device_(device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  stream_ = s;
}

GraphCapture::~GraphCapture() {
  release_graph();
  if (stream_ != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
}

void GraphCapture::release_graph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  exec_ = graph_ = nullptr;
}

std::optional<std::string> GraphCapture::capture(const std::function<void()>& calls) {
  check(cudaSetDevice(device_), "cudaSetDevice");
  release_graph();
  const auto stream = static_cast<cudaStream_t>(stream_);
  // Thread-local mode: a call this thread makes that a capture cannot record (cudaMalloc, a synchronous
  // cudaMemcpy, a stream or device synchronize) fails and invalidates the capture, instead of running outside it.
  cudaError_t status = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("cudaStreamBeginCapture: {}", describe(status));
  }
  std::optional<std::string> failure;
  try {
    calls();
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception during capture";
  }
  // Always end the capture, whatever happened above: that takes the stream out of capture mode. An invalidated
  // capture ends with an error and no graph.
  cudaGraph_t graph = nullptr;
  status = cudaStreamEndCapture(stream, &graph);
  if (!failure && status != cudaSuccess) failure = fmt::format("cudaStreamEndCapture: {}", describe(status));
  if (!failure && graph == nullptr) failure = "the capture recorded nothing";
  if (failure) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) == cudaSuccess && capturing != cudaStreamCaptureStatusNone) {
      cudaGraph_t rest = nullptr;  // not expected after EndCapture; belt and braces
      if (cudaStreamEndCapture(stream, &rest) == cudaSuccess && rest != nullptr) cudaGraphDestroy(rest);
    }
    cudaGetLastError();  // capture errors are not sticky; clear them so the next call starts clean
    return failure;
  }
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  status = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  if (status != cudaSuccess) {
    cudaGetLastError();
    release_graph();
    return fmt::format("cudaGraphInstantiate: {}", describe(status));
  }
  exec_ = exec;
  return std::nullopt;
}

void GraphCapture::launch() {
  if (exec_ == nullptr)
    throw attnlab::Error(attnlab::ErrorCode::internal, "GraphCapture::launch before a successful capture");
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream_)), "cudaGraphLaunch");
}

#else  // no CUDA in this build

namespace {
[[noreturn]] void no_cuda() {
  throw attnlab::Error(attnlab::ErrorCode::unsupported,
                       "no CUDA support compiled in (configure with -DATTNLAB_CUDA=ON, or the 'cuda' preset)");
}
}  // namespace

bool compiled_in() { return false; }
Inventory inventory() { return Inventory{{}, "", "", "no CUDA support compiled in"}; }
DeviceBuffer::DeviceBuffer(std::size_t, int) { no_cuda(); }
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept = default;
void DeviceBuffer::upload(const void*, std::size_t) { no_cuda(); }
void DeviceBuffer::download(void*, std::size_t) const { no_cuda(); }
CallTimes time_calls(const std::function<void(int)>&, int, int, int) { no_cuda(); }
void synchronize(int) { no_cuda(); }
void copy_on_device(void*, const void*, std::size_t) { no_cuda(); }
Stream::Stream(int, bool) { no_cuda(); }
Stream::~Stream() = default;
void Stream::synchronize() const { no_cuda(); }
GraphCapture::GraphCapture(int) { no_cuda(); }
GraphCapture::~GraphCapture() = default;
std::optional<std::string> GraphCapture::capture(const std::function<void()>&) { no_cuda(); }
void GraphCapture::launch() { no_cuda(); }
void GraphCapture::release_graph() {}

#endif

}  // namespace lab::gpu
