#include "fp8_cell.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "tensors.h"

namespace lab {

namespace {

// The C++ `attnlab fp8` prints (fp8_snippet.inc), compiled here against the public API so that the printed code
// keeps building as the API changes. Never called.
[[maybe_unused]] void snippet_compiles(attnlab::TensorView q, attnlab::TensorView k, attnlab::TensorView v,
                                       attnlab::TensorView q8, attnlab::TensorView k8, attnlab::TensorView v8,
                                       attnlab::TensorView o8, attnlab::TensorView o) {
#include "fp8_snippet.inc"
}

constexpr std::uint16_t kBf16Nan = 0x7fc0;
constexpr std::uint8_t kE4m3Nan = 0xff;  // S.1111.111: e4m3 has no infinity, this is NaN

std::vector<std::byte> bf16_bytes(std::int64_t count, std::uint16_t value) {
  std::vector<std::byte> bytes(std::size_t(count) * 2);
  for (std::size_t i = 0; i < std::size_t(count); ++i) std::memcpy(bytes.data() + 2 * i, &value, 2);
  return bytes;
}

std::vector<float> download(const gpu::DeviceBuffer& buffer, std::int64_t count, attnlab::DType dtype) {
  std::vector<std::byte> host(std::size_t(count) * attnlab::size_of(dtype));
  buffer.download(host.data(), host.size());
  return decode(host.data(), count, dtype);
}

}  // namespace

const char* fp8_tensor_name(attnlab::Fp8Tensor tensor) {
  switch (tensor) {
    case attnlab::Fp8Tensor::q: return "q";
    case attnlab::Fp8Tensor::k: return "k";
    case attnlab::Fp8Tensor::v: return "v";
    case attnlab::Fp8Tensor::s: return "s (P)";
    case attnlab::Fp8Tensor::o: return "o";
    default: return "?";
  }
}

Fp8Cell::Fp8Cell(const Fp8Shape& shape, std::uint64_t seed)
    : shape_(shape),
      count_(element_count({shape.B, shape.T, shape.N, shape.H})),
      q_(std::size_t(count_) * 2), k_(std::size_t(count_) * 2), v_(std::size_t(count_) * 2),
      q8_(std::size_t(count_)), k8_(std::size_t(count_)), v8_(std::size_t(count_)), o8_(std::size_t(count_)),
      o_ref_(std::size_t(count_) * 2), o_deq_(std::size_t(count_) * 2),
      qd_(std::size_t(count_) * 2), kd_(std::size_t(count_) * 2), vd_(std::size_t(count_) * 2),
      od_(std::size_t(count_) * 2),
      recipe_(ctx_, attnlab::DelayedScalingRecipe{}, attnlab::Device::cuda, 0) {
  // The codelab draws Q, K, V in bf16 (jax.random.normal(..., dtype=jnp.bfloat16)): the same values feed the bf16
  // call and the quantization, so the comparison sees FP8's rounding only.
  gpu::DeviceBuffer* buffers[] = {&q_, &k_, &v_};
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    inputs_[i] = random_normal(count_, seed, i);
    round_to(inputs_[i], attnlab::DType::bf16);
    const std::vector<std::byte> bytes = encode(inputs_[i], attnlab::DType::bf16);
    buffers[i]->upload(bytes.data(), bytes.size());
  }
}

Fp8Cell::~Fp8Cell() {
  try {
    gpu::synchronize();  // the recipe's destructor frees state the stream's work may still use
  } catch (...) {
    // A sticky device error is reported by the call that caused it; a destructor stays quiet.
  }
}

attnlab::TensorView Fp8Cell::view(const gpu::DeviceBuffer& buffer, attnlab::DType dtype) const {
  return attnlab::TensorView::contiguous(buffer.data(), dtype, {shape_.B, shape_.T, shape_.N, shape_.H},
                                         attnlab::Device::cuda, 0);
}

attnlab::ForwardArgs Fp8Cell::fp8_args(const std::string& path) const {
  attnlab::ForwardArgs a;
  // The recipe's formats: e4m3 for every forward tensor (E4M3 and HYBRID alike).
  a.q = view(q8_, recipe_.dtype(attnlab::Fp8Tensor::q));
  a.k = view(k8_, recipe_.dtype(attnlab::Fp8Tensor::k));
  a.v = view(v8_, recipe_.dtype(attnlab::Fp8Tensor::v));
  a.o = view(o8_, recipe_.dtype(attnlab::Fp8Tensor::o));
  a.options.mask.causal = shape_.causal;
  a.options.path = path;
  a.fp8 = recipe_.forward_scales();
  return a;
}

std::optional<std::string> Fp8Cell::why_not_fp8(const std::string& path) {
  return attnlab::why_not(ctx_, path, fp8_args(path));
}

std::vector<float> Fp8Cell::bf16_attention(const gpu::DeviceBuffer& q, const gpu::DeviceBuffer& k,
                                           const gpu::DeviceBuffer& v, gpu::DeviceBuffer& o) {
  const std::vector<std::byte> poison = bf16_bytes(count_, kBf16Nan);
  o.upload(poison.data(), poison.size());
  attnlab::ForwardArgs a;
  a.q = view(q, attnlab::DType::bf16);
  a.k = view(k, attnlab::DType::bf16);
  a.v = view(v, attnlab::DType::bf16);
  a.o = view(o, attnlab::DType::bf16);
  a.options.mask.causal = shape_.causal;
  a.options.path = ref_path_;
  attnlab::forward(ctx_, a);
  gpu::synchronize();  // a kernel's error surfaces here, not in a later call
  return download(o, count_, attnlab::DType::bf16);
}

void Fp8Cell::run_bf16(const std::string& path) {
  ref_path_ = path;
  ref_ = bf16_attention(q_, k_, v_, o_ref_);
  ref_max_abs_ = ref_mean_abs_ = 0;
  for (float x : ref_) {
    ref_max_abs_ = std::max(ref_max_abs_, double(std::fabs(x)));
    ref_mean_abs_ += std::fabs(x);
  }
  ref_mean_abs_ /= double(ref_.size());
  if (!std::isfinite(ref_max_abs_))
    throw attnlab::Error(attnlab::ErrorCode::internal,
                         fmt::format("{}: the bf16 output has NaN or infinite elements", path));
}

void Fp8Cell::enqueue_step(const std::string& path, bool dequantize) {
  const attnlab::TensorView q = view(q_, attnlab::DType::bf16), k = view(k_, attnlab::DType::bf16),
                            v = view(v_, attnlab::DType::bf16);
  const auto to_fp8 = [&](const attnlab::TensorView& in, const gpu::DeviceBuffer& out, attnlab::Fp8Tensor t) {
    const attnlab::Fp8TensorScaling s = recipe_.tensor(t);
    attnlab::quantize(ctx_, in, view(out, recipe_.dtype(t)), s.scale, s.amax);
  };
  to_fp8(q, q8_, attnlab::Fp8Tensor::q);
  to_fp8(k, k8_, attnlab::Fp8Tensor::k);
  to_fp8(v, v8_, attnlab::Fp8Tensor::v);
  attnlab::forward(ctx_, fp8_args(path));
  // Dequantized before the update: the update replaces scale_inv with the next step's.
  if (dequantize)
    attnlab::dequantize(ctx_, view(o8_, recipe_.dtype(attnlab::Fp8Tensor::o)), view(o_deq_, attnlab::DType::bf16),
                        recipe_.tensor(attnlab::Fp8Tensor::o).scale_inv);
  recipe_.update(ctx_, attnlab::Fp8Pass::forward);
}

Fp8Step Fp8Cell::step(const std::string& path) {
  if (ref_.empty())
    throw attnlab::Error(attnlab::ErrorCode::internal, "Fp8Cell::step before run_bf16: nothing to compare with");
  Fp8Step r;
  // The scales this step quantizes with: the previous step's update wrote them (scale 1 before the first).
  std::array<float, 5> scale_inv{};
  for (std::size_t i = 0; i < kForwardTensors.size(); ++i) {
    const attnlab::Fp8TensorState s = state(kForwardTensors[i]);
    r.scale_used[i] = s.scale;
    scale_inv[i] = s.scale_inv;
  }
  const float o_scale_inv = scale_inv[4];

  std::vector<std::byte> poison(static_cast<std::size_t>(count_), std::byte{kE4m3Nan});
  for (gpu::DeviceBuffer* b : {&q8_, &k8_, &v8_, &o8_}) b->upload(poison.data(), poison.size());
  poison = bf16_bytes(count_, kBf16Nan);
  o_deq_.upload(poison.data(), poison.size());

  enqueue_step(path);
  gpu::synchronize();

  // quantize(): each code against the lab's own e4m3(x · scale) (the product in f32, as docs/design.md §7 has
  // it). Then the FP8 call's inputs decoded (code · scale_inv, to bf16) for bf16 attention on exactly them.
  const gpu::DeviceBuffer* codes_of[] = {&q8_, &k8_, &v8_};
  gpu::DeviceBuffer* decoded_into[] = {&qd_, &kd_, &vd_};
  for (std::size_t t = 0; t < 3; ++t) {
    std::vector<std::uint8_t> got(static_cast<std::size_t>(count_));
    codes_of[t]->download(got.data(), got.size());
    std::vector<float> decoded(got.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] != f32_to_e4m3(inputs_[t][i] * r.scale_used[t])) ++r.quantize_mismatches;
      decoded[i] = e4m3_to_f32(got[i]) * scale_inv[t];
    }
    const std::vector<std::byte> bytes = encode(decoded, attnlab::DType::bf16);
    decoded_into[t]->upload(bytes.data(), bytes.size());
  }
  const std::vector<float> on_fp8_inputs = bf16_attention(qd_, kd_, vd_, od_);

  const std::vector<float> fp8 = download(o_deq_, count_, attnlab::DType::bf16);
  const std::vector<float> codes = download(o8_, count_, recipe_.dtype(attnlab::Fp8Tensor::o));
  double sum = 0, max_abs = 0, max_rel = 0, call_sum = 0, call_max = 0;
  bool nan = false;
  for (std::size_t i = 0; i < fp8.size(); ++i) {
    const double d = std::fabs(double(ref_[i]) - double(fp8[i]));
    const double c = std::fabs(double(on_fp8_inputs[i]) - double(fp8[i]));
    nan = nan || std::isnan(d) || std::isnan(c);
    max_abs = std::max(max_abs, d);
    sum += d;
    call_max = std::max(call_max, c);
    call_sum += c;
    // The lab's own decoding of the e4m3 O, with the scale_inv the dequantization was given.
    const double mine = double(codes[i]) * double(o_scale_inv);
    double deviation = std::numeric_limits<double>::infinity();  // NaN on either side, or 0 against non-zero
    if (!std::isnan(mine) && !std::isnan(fp8[i]))
      deviation = mine == 0 ? (fp8[i] == 0 ? 0.0 : deviation) : std::fabs(double(fp8[i]) - mine) / std::fabs(mine);
    max_rel = std::max(max_rel, deviation);
  }
  r.step = 0;  // the caller numbers the steps
  r.max_abs = nan ? std::numeric_limits<double>::quiet_NaN() : max_abs;
  r.mean_abs = nan ? std::numeric_limits<double>::quiet_NaN() : sum / double(fp8.size());
  r.call_max_abs = nan ? std::numeric_limits<double>::quiet_NaN() : call_max;
  r.call_mean_abs = nan ? std::numeric_limits<double>::quiet_NaN() : call_sum / double(fp8.size());
  r.dequant_max_rel = max_rel;
  // bf16 keeps 8 significant bits: rounding to it moves a value by at most 2^-8 of itself (the slack covers the
  // product's own f32 rounding).
  r.dequant_agrees = max_rel <= 0x1p-8 * (1 + 1e-6);
  return r;
}

attnlab::Fp8TensorState Fp8Cell::state(attnlab::Fp8Tensor tensor) { return recipe_.read(ctx_, tensor); }

double expected_scale(attnlab::Fp8Tensor tensor, const attnlab::Fp8TensorState& state, attnlab::DType format,
                      int margin, double previous, attnlab::AmaxAlgorithm algorithm) {
  if (state.amax_history.empty()) return previous;
  double amax = state.amax_history.back();
  if (algorithm == attnlab::AmaxAlgorithm::max) {
    amax = 0;
    for (float a : state.amax_history) amax = std::isnan(a) || std::isnan(amax) ? NAN : std::max(amax, double(a));
  }
  if (!(amax > 0) || !std::isfinite(amax)) return previous;
  const double fp8_max = format == attnlab::DType::e5m2 ? 57344.0 : 448.0;
  const double scale = std::min(fp8_max / amax / std::ldexp(1.0, margin), double(std::numeric_limits<float>::max()));
  return tensor == attnlab::Fp8Tensor::s ? std::min(scale, fp8_max / std::ldexp(1.0, margin)) : scale;
}

}  // namespace lab
