// One set of a timed call's tensors (Q, K, V, O, and for backward LSE, dO, dQ, dK, dV) on the path's device,
// filled with random values; bench_one and bench_graph rotate several sets when one would sit in the GPU's L2.
// An FP8 workload (e4m3 / e5m2) gets FP8 Q, K, V holding the random values themselves (quantized with scale 1), an
// FP8 O, and the call's FP8 scales as single floats on the same device (docs/design.md §7).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <attnlab/attention.h>

#include "bench_core.h"
#include "gpu.h"
#include "tensors.h"

namespace lab {

// One buffer on the host or the GPU.
class Buffer {
 public:
  Buffer(attnlab::Device device, std::size_t bytes);
  void* data() { return gpu_ ? gpu_->data() : static_cast<void*>(host_.data()); }
  void fill(const std::vector<std::byte>& bytes);

 private:
  std::unique_ptr<gpu::DeviceBuffer> gpu_;
  std::vector<std::byte> host_;
};

struct CallSet {
  std::vector<std::unique_ptr<Buffer>> buffers;
  attnlab::ForwardArgs fwd;
  attnlab::BackwardArgs bwd;

  // A dense tensor of `shape`, random when `seed` is given.
  attnlab::TensorView make(attnlab::Device device, attnlab::DType dtype, const Shape& shape,
                           std::optional<std::uint64_t> seed = std::nullopt);
  // The scales of an FP8 forward call whose inputs were quantized with scale 1, one float each on `device`.
  attnlab::Fp8ForwardScales fp8_scales(attnlab::Device device);
};

// The tensors of one call of `w` on `path`; forward args always, backward args too when w.backward. An FP8
// workload must be a forward one (throws attnlab::Error invalid_argument otherwise): the lab has no FP8 gradients.
std::unique_ptr<CallSet> make_set(const Workload& w, attnlab::Device device, const std::string& path,
                                  std::uint64_t seed);

}  // namespace lab
