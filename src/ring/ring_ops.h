// The element work of a ring call besides attention itself, on one rank's device: packing its K/V slice for the
// exchange, merging block outputs through their LSE, accumulating block gradients, storing the results. A CPU
// version (loops) and a CUDA version (kernels ordered on a stream; ring_ops_cuda.cu).
// Dense buffers: a (B, T, width) f32 or input-dtype tensor, row t of batch b at (b·T + t)·width.
#pragma once

#include <cstdint>
#include <memory>

#include "attnlab/attention.h"

namespace attnlab::ring {

class Ops {
 public:
  virtual ~Ops() = default;
  // The strided 4-D view `src` copied into `dst` densely.
  virtual void pack(void* dst, const TensorView& src) = 0;
  virtual void fill(float* dst, std::int64_t count, float value) = 0;
  // Rows [row_begin, row_begin + rows) of every (b, n): the block output o_part (B, T, N, Hv, dtype) with its
  // lse_part (B, N, T) merged into o_acc (B, T, N, Hv, f32) and lse_acc (B, N, T), o_acc kept normalized:
  //   L = log(e^lse_acc + e^lse_part),  o_acc = o_acc·e^(lse_acc − L) + o_part·e^(lse_part − L)
  // A block row with lse_part = −inf (no visible key) changes nothing.
  virtual void merge(float* o_acc, float* lse_acc, const void* o_part, DType dtype, const float* lse_part,
                     std::int64_t B, std::int64_t T, std::int64_t N, std::int64_t Hv, std::int64_t row_begin,
                     std::int64_t rows) = 0;
  // acc (B, T, width, f32) += part (B, T, width, dtype) over rows [row_begin, row_begin + rows).
  virtual void accumulate(float* acc, const void* part, DType dtype, std::int64_t B, std::int64_t T,
                          std::int64_t width, std::int64_t row_begin, std::int64_t rows) = 0;
  // The dense f32 tensor `src` of dst's shape rounded into the strided view `dst` (rank 3 or 4; f32, f16, bf16).
  virtual void store(const TensorView& dst, const float* src) = 0;
};

std::unique_ptr<Ops> make_cpu_ops();
// Kernels on GPU `device_index`, ordered on `stream`. Throws ErrorCode::unsupported in a build without CUDA.
std::unique_ptr<Ops> make_cuda_ops(int device_index, void* stream);

// CUDA stream ordering for the ring (ring_cuda_sync.cpp; every function throws ErrorCode::unsupported in a build
// without CUDA). Events are created without timing unless asked.
namespace gpu {
void* event_create(int device_index, bool timing = false);
void event_destroy(void* event) noexcept;
void record(void* event, void* stream);
void wait(void* stream, void* event);
float elapsed_ms(void* start, void* end);  // waits for `end`
void copy_async(void* dst, const void* src, std::size_t bytes, void* stream);
void set_device(int device_index);
int current_device();  // −1 when it cannot be read
void synchronize(void* stream);

// Restores the calling thread's current GPU when a ring call or a shift ends (they change it per rank): the
// caller's threads are theirs.
class DeviceScope {
 public:
  explicit DeviceScope(bool on_gpu) : previous_(on_gpu ? current_device() : -1) {}
  ~DeviceScope() {
    if (previous_ >= 0) try {
        set_device(previous_);
      } catch (...) {  // teardown of a failed call: its own error is the one to report
      }
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_;
};

// An event owned for the lifetime of one ring call or communicator.
class Event {
 public:
  Event() = default;
  Event(int device_index, bool timing = false) : event_(event_create(device_index, timing)) {}
  ~Event() { event_destroy(event_); }
  Event(Event&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  Event& operator=(Event&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  void* get() const { return event_; }

 private:
  void* event_ = nullptr;
};
}  // namespace gpu

}  // namespace attnlab::ring
