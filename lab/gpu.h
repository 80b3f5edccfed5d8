// The CUDA runtime as the lab uses it: which GPUs there are, and device memory for tensors. In a build without
// CUDA every function here answers "no GPU" and nothing links against the CUDA runtime.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
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

// `calls` back-to-back calls fn(first), fn(first + 1), ...: device milliseconds between CUDA events recorded on the
// legacy default stream (the stream of a Context nobody gave another) before the first and after the last call,
// and the host's milliseconds to issue them. When the host's time is the larger, the calls are launch-bound: the
// GPU waits for work and the device time measures the host.
struct CallTimes {
  double device_ms = 0, host_ms = 0;
};
CallTimes time_calls(const std::function<void(int)>& fn, int first, int calls, int device = 0);

// A CUDA graph of library calls, for timing replays (the launch floor). It owns a stream for the library to run on
// (a Context's set_stream), because the legacy default stream cannot be captured; the stream is a blocking one, so
// it orders with the legacy default stream that time_calls_ms records its events on.
class GraphCapture {
 public:
  explicit GraphCapture(int device = 0);
  ~GraphCapture();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

  void* stream() const { return stream_; }
  // Captures the work `calls` issues on stream() into a graph and instantiates it. Returns nullopt on success,
  // else why capture failed: `calls` threw (a CUDA call the capture does not allow, such as a synchronous copy or
  // an allocation, fails inside the library), or ending or instantiating the capture failed. Whatever happens, the
  // capture is ended before this returns: the stream is never left capturing.
  std::optional<std::string> capture(const std::function<void()>& calls);
  // One replay of the captured graph on stream() (asynchronous).
  void launch();

 private:
  void release_graph();
  int device_ = 0;
  void* stream_ = nullptr;  // cudaStream_t
  void* graph_ = nullptr;   // cudaGraph_t
  void* exec_ = nullptr;    // cudaGraphExec_t
};

// A CUDA stream of one GPU owned by the lab: non-blocking by default (cudaStreamNonBlocking: it does not wait for
// the legacy default stream; `attnlab ring` runs each rank's attention on one and its exchange on another), or
// blocking, so that events on the legacy default stream (time_calls) still bracket the work on it (`attnlab decode
// --stream own`).
class Stream {
 public:
  explicit Stream(int device = 0, bool blocking = false);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* get() const { return stream_; }  // cudaStream_t
  void synchronize() const;

 private:
  void* stream_ = nullptr;
};

// Waits for all work on the device (the library's calls are asynchronous on the context's stream).
void synchronize(int device = 0);

// `bytes` from device memory `src` to device memory `dst` on the legacy default stream, asynchronously: the copy
// engine's rate, the peer of a kernel that only moves bytes (append_kv in `attnlab decode --append`).
void copy_on_device(void* dst, const void* src, std::size_t bytes);

}  // namespace lab::gpu
