// The element work of a ring call besides attention itself, on one rank's device: packing its K/V slice for the
// exchange, merging block outputs through their LSE, accumulating block gradients, storing the results. A CPU
// version (loops) and a CUDA version (kernels ordered on a stream; ring_ops_cuda.cu). The first block of a row
// sets its accumulator and the last writes the output, so a row costs one pass per block and nothing else.
#pragma once

#include <cstdint>
#include <memory>

#include "attnlab/attention.h"

namespace attnlab::ring {

// A range of rows of a rank's slice, in every (batch, head): rows [begin, begin + count) of a dense tensor of
// `total` rows per batch, `heads` × H elements a row.
struct Rows {
  std::int64_t B = 0, total = 0, heads = 0, H = 0, begin = 0, count = 0;
};

class Ops {
 public:
  virtual ~Ops() = default;
  // The strided 4-D view `src` copied into `dst` densely.
  virtual void pack(void* dst, const TensorView& src) = 0;
  // A block's output o_part (dense (B, total, N, Hv), dtype) with its lse_part (B, N, total) merged into the
  // accumulator o_acc (the same, f32) and lse_acc, kept normalized:
  //   L = log(e^lse_acc + e^lse_part),  o = o_acc·e^(lse_acc − L) + o_part·e^(lse_part − L)
  // first: the accumulator holds nothing for these rows yet (it is set, not read). out (the rows' last block): o
  // goes to the strided view *out rounded to its dtype, and L to *out_lse when given, instead of the accumulator.
  // A block row with lse_part = −inf (no visible key) changes nothing.
  virtual void merge(float* o_acc, float* lse_acc, const void* o_part, DType dtype, const float* lse_part,
                     const Rows& rows, bool first, const TensorView* out, const TensorView* out_lse) = 0;
  // acc (dense (B, total, heads, H), f32) += part (the same, dtype) over the rows; first: acc = part. out: the
  // sum goes to the strided (B, total, heads, H) view *out rounded to its dtype instead of acc.
  virtual void accumulate(float* acc, const void* part, DType dtype, const Rows& rows, bool first,
                          const TensorView* out) = 0;
  // The dense f32 tensor `src` of dst's shape rounded into the strided view `dst` (rank 3 or 4; f32, f16, bf16).
  virtual void store(const TensorView& dst, const float* src) = 0;
};

std::unique_ptr<Ops> make_cpu_ops();
// Kernels on GPU `device_index`, ordered on `stream`. Throws ErrorCode::unsupported in a build without CUDA.
std::unique_ptr<Ops> make_cuda_ops(int device_index, void* stream);

// CUDA stream ordering for the ring (ring_ops_cuda.cu; in a build without CUDA ring_ops_nocuda.cpp's functions
// throw ErrorCode::unsupported). Events are created without timing unless asked.
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
