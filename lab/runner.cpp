#include "runner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace lab {

attnlab::TensorView LabTensor::view() {
  void* data = device == attnlab::Device::cuda ? device_copy.data() : static_cast<void*>(host.data());
  attnlab::TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = int(shape.size());
  std::int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

void LabTensor::store() {
  // Encode into the existing bytes when there are some: views handed out earlier keep pointing at valid memory.
  std::vector<std::byte> bytes = encode(values, dtype);
  if (host.size() == bytes.size()) std::copy(bytes.begin(), bytes.end(), host.begin());
  else host = std::move(bytes);
  if (device == attnlab::Device::cuda) {
    if (device_copy.data() == nullptr) device_copy = gpu::DeviceBuffer(host.size());
    device_copy.upload(host.data(), host.size());
  }
}

void LabTensor::load() {
  if (device == attnlab::Device::cuda) device_copy.download(host.data(), host.size());
  values = decode(host.data(), std::int64_t(values.size()), dtype);
}

namespace {

LabTensor make_tensor(const Shape& shape, const Case& c, attnlab::Device device, std::vector<float> values) {
  LabTensor t;
  t.shape = shape;
  t.dtype = c.dtype;
  t.device = device;
  t.values = std::move(values);
  round_to(t.values, c.dtype);
  t.store();
  return t;
}

}  // namespace

Runner::Runner(const Case& c) : case_(c) {
  ctx_.set_num_threads(c.threads);
  for (const Shape& s : {c.q_shape(), c.k_shape(), c.v_shape(), c.o_shape()})
    element_count(s);  // an impossible size throws here, before anything is allocated
  q_values_ = random_normal(element_count(c.q_shape()), c.seed, 0);
  k_values_ = random_normal(element_count(c.k_shape()), c.seed, 1);
  v_values_ = random_normal(element_count(c.v_shape()), c.seed, 2);
}

attnlab::Device Runner::device_of(const std::string& path) const {
  for (const attnlab::PathInfo& p : attnlab::list_paths())
    if (p.name == path) return p.device;
  return case_.device;
}

Runner::Tensors& Runner::tensors(attnlab::Device device) {
  std::unique_ptr<Tensors>& slot = on_[device == attnlab::Device::cuda ? 1 : 0];
  if (!slot) {
    auto t = std::make_unique<Tensors>();
    t->q = make_tensor(case_.q_shape(), case_, device, q_values_);
    t->k = make_tensor(case_.k_shape(), case_, device, k_values_);
    t->v = make_tensor(case_.v_shape(), case_, device, v_values_);
    t->o = make_tensor(case_.o_shape(), case_, device,
                       std::vector<float>(std::size_t(element_count(case_.o_shape())), 0.0f));
    slot = std::move(t);
  }
  return *slot;
}

attnlab::ForwardArgs Runner::args(const std::string& path, bool causal) {
  Tensors& t = tensors(device_of(path));
  attnlab::ForwardArgs a;
  a.q = t.q.view();
  a.k = t.k.view();
  a.v = t.v.view();
  a.o = t.o.view();
  a.options.mask.causal = causal;
  a.options.path = path;
  return a;
}

namespace {
// The library's reason a registered path cannot run on this machine at all, or nullopt. Checked before the lab
// allocates tensors on the path's device, which may not exist here.
std::optional<std::string> unavailable(const std::string& path) {
  for (const attnlab::PathInfo& p : attnlab::list_paths())
    if (p.name == path && !p.available) return fmt::format("{}: unavailable here: {}", path, p.unavailable);
  return std::nullopt;
}
}  // namespace

std::optional<std::string> Runner::why_not(const std::string& path) {
  if (auto why = unavailable(path)) return why;
  return attnlab::why_not(path, args(path, case_.causal));
}

PathOutcome Runner::run(const std::string& path, bool causal) {
  PathOutcome out;
  out.requested = path;
  out.device = device_of(path);
  if (auto why = unavailable(path)) {
    out.error = attnlab::ErrorCode::unsupported;
    out.message = *why;
    return out;
  }
  try {
    LabTensor& o = tensors(out.device).o;
    // Poison O so a path that skips elements cannot pass by leaving a previous path's (correct) values behind.
    std::fill(o.values.begin(), o.values.end(), std::numeric_limits<float>::quiet_NaN());
    o.store();
    const attnlab::ForwardArgs a = args(path, causal);
    const attnlab::RunInfo info = attnlab::forward(ctx_, a);
    if (out.device == attnlab::Device::cuda) gpu::synchronize();  // surface asynchronous kernel errors here
    out.ran = info.path;
    o.load();
    out.output = o.values;
  } catch (const attnlab::Error& e) {
    if (e.code() == attnlab::ErrorCode::invalid_argument) throw;
    out.error = e.code();
    out.message = e.what();
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::quiet_NaN();
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

bool allclose(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d <= atol + rtol * std::fabs(double(b[i])))) return false;  // written so that NaN fails
  }
  return true;
}

std::string refusal_reason(const std::string& path, const std::string& message) {
  for (const std::string& prefix : {path + ": cannot run this forward call: ", path + ": "})
    if (message.rfind(prefix, 0) == 0) return message.substr(prefix.size());
  return message;
}

}  // namespace lab
