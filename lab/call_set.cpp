#include "call_set.h"

#include <algorithm>

#include <fmt/format.h>

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

attnlab::Fp8ForwardScales CallSet::fp8_scales(attnlab::Device device) {
  // Each scalar 256 bytes from the next, so every pointer is as aligned as a tensor's would be.
  constexpr std::size_t kSlot = 256 / sizeof(float);
  enum Slot { descale_q, descale_k, descale_v, scale_s, descale_s, amax_s, scale_o, amax_o, count };
  // Q, K, V hold the values themselves: descale 1. P lies in [0, 1], so scale_s = 448 (e4m3's largest value) is
  // where TransformerEngine's recipe settles for it (fp8_max / amax with amax = 1); O of unit-variance V stays
  // within a few units, so scale_o = 1. The values do not change the work a call does, only its rounding.
  std::vector<float> values(kSlot * count, 0.0f);
  values[kSlot * descale_q] = values[kSlot * descale_k] = values[kSlot * descale_v] = 1.0f;
  values[kSlot * scale_s] = 448.0f;
  values[kSlot * descale_s] = 1.0f / 448.0f;
  values[kSlot * scale_o] = 1.0f;
  buffers.push_back(std::make_unique<Buffer>(device, values.size() * sizeof(float)));
  Buffer& b = *buffers.back();
  b.fill(encode(values, attnlab::DType::f32));
  float* base = static_cast<float*>(b.data());
  attnlab::Fp8ForwardScales s;
  s.descale_q = base + kSlot * descale_q;
  s.descale_k = base + kSlot * descale_k;
  s.descale_v = base + kSlot * descale_v;
  s.scale_s = base + kSlot * scale_s;
  s.descale_s = base + kSlot * descale_s;
  s.amax_s = base + kSlot * amax_s;
  s.scale_o = base + kSlot * scale_o;
  s.amax_o = base + kSlot * amax_o;
  return s;
}

std::unique_ptr<CallSet> make_set(const Workload& w, attnlab::Device device, const std::string& path,
                                  std::uint64_t seed) {
  auto set = std::make_unique<CallSet>();
  const auto dt = w.dtype;
  if (is_fp8(dt) && w.backward)
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                         fmt::format("backward with {} inputs: the lab times FP8 forward calls only",
                                     attnlab::to_string(dt)));
  attnlab::Options options;
  options.path = path;
  options.mask.causal = w.causal;
  options.softcap = w.softcap;
  set->fwd.q = set->make(device, dt, {w.B, w.T, w.N, w.Hqk}, seed);
  set->fwd.k = set->make(device, dt, {w.B, w.S, w.K, w.Hqk}, seed);
  set->fwd.v = set->make(device, dt, {w.B, w.S, w.K, w.Hv}, seed);
  set->fwd.o = set->make(device, dt, {w.B, w.T, w.N, w.Hv});
  set->fwd.options = options;
  if (is_fp8(dt)) set->fwd.fp8 = set->fp8_scales(device);
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
