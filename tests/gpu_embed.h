// What the embedding tests (test_gpu_embed*.cpp) share: attnlab used the way an engine embeds it, on a stream of its
// own, with device buffers the test owns and fills in stream order, CUDA graphs, caller workspaces. The harness
// (harness.h) still makes the inputs and judges the outputs; only the memory and the ordering are done here.
#pragma once

#include "attnlab/version.h"

#if ATTNLAB_WITH_CUDA

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "device_mirror.h"
#include "harness.h"

namespace attnlab_test::embed {

// The GPU paths, and those of them with a backward.
inline const std::vector<std::string> kForwardPaths = {"cuda-naive", "cudnn", "flash"};
inline const std::vector<std::string> kBackwardPaths = {"cuda-naive", "cudnn"};

// A test per GPU path (the parameter); skips visibly without a GPU.
class PathTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ATTNLAB_REQUIRE_GPU(); }
  const std::string& path() const { return GetParam(); }
};
std::string path_param_name(const ::testing::TestParamInfo<std::string>& info);  // "cuda-naive" → "cuda_naive"

// Throws (gtest reports the exception as a failure of the test) when a CUDA call of the test itself fails.
void cuda_ok(cudaError_t status, const char* what);

// The stream these tests run attnlab on: cudaStreamNonBlocking, so it waits for nothing on the legacy stream and
// the legacy stream waits for nothing on it. Created once for the process and never destroyed (destroying it at
// exit could run after the CUDA runtime has gone).
cudaStream_t nonblocking_stream();

// cudaMalloc'd memory, freed with the object.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A device tensor laid out like a host tensor (same strides, same bytes), moved in the order of a stream.
// Undefined host tensor → empty view, and every transfer is a no-op.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  explicit DeviceTensor(const HostTensor& like);  // allocates; copies nothing
  TensorView view() const { return view_; }
  void upload(const HostTensor& t, cudaStream_t s);  // t's bytes → device, on s (pageable: staged before return)
  void poison(cudaStream_t s);                       // 0xFF bytes on s: NaN in f32/f16/bf16
  void download(HostTensor& t, cudaStream_t s);      // device → t's bytes, on s; returns when they are there

 private:
  DeviceMemory memory_;
  TensorView view_;
};

// How a call passes its per-batch lengths.
enum class Seqlens { host, device };

// Device copies of every forward tensor of a harness case.
struct DeviceForward {
  DeviceTensor q, k, v, o, lse, q_lens, kv_lens;
  explicit DeviceForward(const Tensors& like);
  void upload_inputs(const Tensors& t, cudaStream_t s);  // q, k, v and the lengths
  void poison_outputs(cudaStream_t s);
  void download_outputs(Tensors& t, cudaStream_t s);
  // The case's arguments with every tensor on the device; lengths from t's host buffers or from the device copies.
  attnlab::ForwardArgs args(const Case& c, const Tensors& t, Seqlens lengths) const;
};

// Device copies of the gradients' tensors.
struct DeviceGrads {
  DeviceTensor d_o, dq, dk, dv;
  explicit DeviceGrads(const GradTensors& like);
  void poison_outputs(cudaStream_t s);
  void download_outputs(GradTensors& g, cudaStream_t s);
};

// The backward call matching forward arguments `f` (its q, k, v, o, lse and options), with the gradients of `g`.
attnlab::BackwardArgs backward_args_for(const attnlab::ForwardArgs& f, const DeviceGrads& g);

// Per-batch lengths of one call.
struct Lengths {
  std::vector<std::int32_t> q, kv;
};
// `count` distinct patterns for the case's shape: the first full (T and S everywhere), the second with a batch of
// no queries and a batch of no keys (B ≥ 2), the others drawn at random in [1, T] × [1, S].
std::vector<Lengths> length_patterns(const Case& c, Rng& rng, int count);
Lengths random_lengths(const Case& c, Rng& rng);
// The case with these lengths (what the reference is computed for).
Case with_lengths(Case c, const Lengths& l);
// Rewrites the host length buffers of `t` in place (the buffers a call was given stay the same memory).
void write_lengths(Tensors& t, const Lengths& l);

// A bf16 case on the GPU with dense tensors.
Case embed_case(const std::string& path, std::int64_t B, std::int64_t T, std::int64_t S, std::int64_t N,
                std::int64_t K, std::int64_t H = 64);

// Holds a stream at a host callback until release() (or until `limit_seconds` pass), so that every call issued
// meanwhile is only queued: a call that waits for its stream or the device inside (a synchronization) would wait
// for the gate, which then times out — timed_out() says so once the stream has passed it. Queued calls also make
// any late read of host memory see what the host wrote last. The destructor releases the gate and waits for the
// stream.
class StreamGate {
 public:
  StreamGate(cudaStream_t s, int limit_seconds);
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  void release() { released_ = true; }
  bool timed_out() const { return timed_out_; }

 private:
  static void CUDART_CB hold(void* gate);
  cudaStream_t stream_;
  int limit_seconds_;
  std::atomic<bool> released_{false}, timed_out_{false};
};

// A captured and instantiated CUDA graph, destroyed with the object.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void launch(cudaStream_t s) const;
  bool empty() const { return exec_ == nullptr; }

  // Captures what `body` enqueues on `s` (global capture mode: any unsafe CUDA call in the process fails the
  // capture). When body throws, the capture is ended and whatever graph came back destroyed, then the exception is
  // rethrown, so the stream is usable again.
  static void capture(Graph& into, cudaStream_t s, const std::function<void()>& body);

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// The attnlab::Error `body` throws: its code and message (thrown = false when it throws nothing; any other
// exception goes on to the test, which fails).
struct Refusal {
  bool thrown = false;
  attnlab::ErrorCode code = attnlab::ErrorCode::ok;
  std::string message;
};
Refusal refusal_of(const std::function<void()>& body);

// True when the device tensor still holds the poison byte for byte (nothing wrote to it); `scratch` is a host
// tensor of its layout, overwritten.
bool still_poisoned(DeviceTensor& d, HostTensor& scratch, cudaStream_t s);

}  // namespace attnlab_test::embed

#endif  // ATTNLAB_WITH_CUDA
