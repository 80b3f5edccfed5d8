#include "call_set.h"

#include <algorithm>

namespace lab {

Buffer::Buffer(attnlab::Device device, std::size_t bytes) {
  if (device == attnlab::Device::cuda)
    gpu_ = std::make_unique<gpu::DeviceBuffer>(bytes);
  else
    host_.resize(bytes);
}

void Buffer::fill(const std::vector<std::byte>& bytes) {
  if (gpu_)
    gpu_->upload(bytes.data(), bytes.size());
  else
    std::copy(bytes.begin(), bytes.end(), host_.begin());
}

attnlab::TensorView CallSet::make(attnlab::Device device, attnlab::DType dtype, const Shape& shape,
                                  std::optional<std::uint64_t> seed) {
  const std::int64_t count = element_count(shape);
  buffers.push_back(std::make_unique<Buffer>(device, std::size_t(count) * attnlab::size_of(dtype)));
  Buffer& b = *buffers.back();
  if (seed) b.fill(encode(random_normal(count, *seed, buffers.size()), dtype));
  attnlab::TensorView view;
  view.data = b.data();
  view.dtype = dtype;
  view.device = device;
  view.rank = int(shape.size());
  std::int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.shape[d] = shape[d];
    view.strides[d] = stride;
    stride *= shape[d];
  }
  return view;
}

std::unique_ptr<CallSet> make_set(const Workload& w, attnlab::Device device, const std::string& path,
                                  std::uint64_t seed) {
  auto set = std::make_unique<CallSet>();
  const auto dt = w.dtype;
  attnlab::Options options;
  options.path = path;
  options.mask.causal = w.causal;
  set->fwd.q = set->make(device, dt, {w.B, w.T, w.N, w.Hqk}, seed);
  set->fwd.k = set->make(device, dt, {w.B, w.S, w.K, w.Hqk}, seed);
  set->fwd.v = set->make(device, dt, {w.B, w.S, w.K, w.Hv}, seed);
  set->fwd.o = set->make(device, dt, {w.B, w.T, w.N, w.Hv});
  set->fwd.options = options;
  if (w.backward) {
    set->fwd.lse = set->make(device, attnlab::DType::f32, {w.B, w.N, w.T});
    auto& b = set->bwd;
    b.q = set->fwd.q, b.k = set->fwd.k, b.v = set->fwd.v, b.o = set->fwd.o, b.lse = set->fwd.lse;
    b.d_o = set->make(device, dt, {w.B, w.T, w.N, w.Hv}, seed + 1);
    b.dq = set->make(device, dt, {w.B, w.T, w.N, w.Hqk});
    b.dk = set->make(device, dt, {w.B, w.S, w.K, w.Hqk});
    b.dv = set->make(device, dt, {w.B, w.S, w.K, w.Hv});
    b.options = options;
  }
  return set;
}

}  // namespace lab
