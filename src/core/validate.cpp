// Every precondition of docs/design.md §2, checked before any path sees a call. Each failure names the rule it broke.
#include "core/validate.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor_checks.h"
#include "core/validate_fp8.h"

namespace attnlab::core {
namespace {

bool is_attention_dtype(DType d) { return is_float_dtype(d) || d == DType::e4m3 || d == DType::e5m2; }

ByteRange check_seqlens(const char* name, const TensorView& t, const TensorView& q, std::int64_t B,
                        std::int64_t max_len, const char* max_name) {
  const ByteRange range = check_tensor(name, t, 1, "(B)");
  if (t.dtype != DType::i32) invalid("{} must be i32, got {}", name, to_string(t.dtype));
  if (t.shape[0] != B) invalid("{} must have shape (B) = ({}), got ({})", name, B, t.shape[0]);
  if (t.device == Device::cuda) {
    check_same_place(name, t, q);
    return range;  // device values cannot be read before launch; kernels clamp them
  }
  const auto* values = static_cast<const std::int32_t*>(t.data);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t len = values[b * t.strides[0]];
    if (len < 0 || len > max_len)
      invalid("{}[{}] = {} is outside [0, {}] ({})", name, b, len, max_len, max_name);
  }
  return range;
}

// Bias or boolean mask: (B|1, N|1, T, S).
ByteRange check_bias(const char* name, const TensorView& t, const Problem& p) {
  const Dims& d = p.dims;
  ByteRange r = check_tensor(name, t, 4, "(B|1, N|1, T, S)");
  check_same_place(name, t, p.q);
  if ((t.shape[0] != 1 && t.shape[0] != d.B) || (t.shape[1] != 1 && t.shape[1] != d.N) || t.shape[2] != d.T ||
      t.shape[3] != d.S)
    invalid("{} must have shape (B|1, N|1, T, S) = ({}|1, {}|1, {}, {}), got ({}, {}, {}, {})", name, d.B, d.N, d.T,
            d.S, t.shape[0], t.shape[1], t.shape[2], t.shape[3]);
  return r;
}

// Checks shared by forward and backward; fills dims, dtype, device, scale and options.
Problem check_common(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                     const Options& options, RangeList& inputs) {
  Problem p;
  inputs.push_back({"q", check_tensor("q", q, 4, "(B, T, N, Hqk)"), q.device});
  inputs.push_back({"k", check_tensor("k", k, 4, "(B, S, K, Hqk)"), k.device});
  inputs.push_back({"v", check_tensor("v", v, 4, "(B, S, K, Hv)"), v.device});
  check_tensor("o", o, 4, "(B, T, N, Hv)");
  check_same_place("k", k, q);
  check_same_place("v", v, q);
  check_same_place("o", o, q);

  if (!is_attention_dtype(q.dtype)) invalid("q has dtype {}: use f32, f16, bf16, e4m3 or e5m2", to_string(q.dtype));
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    invalid("q, k and v must share one dtype, got {}, {}, {}", to_string(q.dtype), to_string(k.dtype),
            to_string(v.dtype));

  Dims& d = p.dims;
  d.B = q.shape[0];
  d.T = q.shape[1];
  d.N = q.shape[2];
  d.Hqk = q.shape[3];
  d.S = k.shape[1];
  d.K = k.shape[2];
  d.Hv = v.shape[3];
  if (k.shape[0] != d.B) invalid("k.shape[0] (B = {}) must equal q.shape[0] (B = {})", k.shape[0], d.B);
  if (v.shape[0] != d.B) invalid("v.shape[0] (B = {}) must equal q.shape[0] (B = {})", v.shape[0], d.B);
  if (k.shape[3] != d.Hqk) invalid("k.shape[3] (Hqk = {}) must equal q.shape[3] (Hqk = {})", k.shape[3], d.Hqk);
  if (v.shape[1] != d.S) invalid("v.shape[1] (S = {}) must equal k.shape[1] (S = {})", v.shape[1], d.S);
  if (v.shape[2] != d.K) invalid("v.shape[2] (K = {}) must equal k.shape[2] (K = {})", v.shape[2], d.K);
  if (d.N % d.K != 0)
    invalid("query heads N = {} must be a multiple of KV heads K = {} (N % K == 0 for GQA/MQA)", d.N, d.K);
  if (o.shape[0] != d.B || o.shape[1] != d.T || o.shape[2] != d.N || o.shape[3] != d.Hv)
    invalid("o must have shape (B, T, N, Hv) = ({}, {}, {}, {}), got ({}, {}, {}, {})", d.B, d.T, d.N, d.Hv,
            o.shape[0], o.shape[1], o.shape[2], o.shape[3]);

  p.dtype = q.dtype;
  p.device = q.device;
  p.device_index = q.device_index;
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = o;

  const float scale = options.scale.value_or(float(1.0 / std::sqrt(double(d.Hqk))));
  if (!std::isfinite(scale)) invalid("scale must be finite, got {}", scale);
  p.scale = scale;
  if (!std::isfinite(options.softcap) || options.softcap < 0)
    invalid("softcap must be finite and ≥ 0 (0 = off), got {}", options.softcap);
  p.softcap = options.softcap;

  const MaskOptions& m = options.mask;
  if (m.align != MaskAlign::top_left && m.align != MaskAlign::bottom_right) invalid("mask.align is not a MaskAlign");
  if (m.window_left < -1) invalid("mask.window_left must be ≥ 0, or −1 for unbounded; got {}", m.window_left);
  if (m.window_right < -1) invalid("mask.window_right must be ≥ 0, or −1 for unbounded; got {}", m.window_right);
  p.mask = m;

  if (!options.q_seqlens.empty()) {
    inputs.push_back({"q_seqlens", check_seqlens("q_seqlens", options.q_seqlens, q, d.B, d.T, "T"),
                      options.q_seqlens.device});
    p.q_seqlens = options.q_seqlens;
  }
  if (!options.kv_seqlens.empty()) {
    inputs.push_back({"kv_seqlens", check_seqlens("kv_seqlens", options.kv_seqlens, q, d.B, d.S, "S"),
                      options.kv_seqlens.device});
    p.kv_seqlens = options.kv_seqlens;
  }
  if (!options.bias.empty() && !options.bool_mask.empty())
    invalid("give at most one of bias and bool_mask (fold the mask into the bias as −inf)");
  if (!options.bias.empty()) {
    inputs.push_back({"bias", check_bias("bias", options.bias, p), q.device});
    if (options.bias.dtype != DType::f32 && options.bias.dtype != q.dtype)
      invalid("bias must be f32 or the inputs' dtype {}, got {}", to_string(q.dtype), to_string(options.bias.dtype));
    p.bias = options.bias;
  }
  if (!options.bool_mask.empty()) {
    inputs.push_back({"bool_mask", check_bias("bool_mask", options.bool_mask, p), q.device});
    if (options.bool_mask.dtype != DType::u8)
      invalid("bool_mask must be u8 (non-zero = visible), got {}", to_string(options.bool_mask.dtype));
    p.bool_mask = options.bool_mask;
  }
  return p;
}

ByteRange check_lse(const char* name, const TensorView& lse, const Problem& p) {
  ByteRange r = check_tensor(name, lse, 3, "(B, N, T)");
  check_same_place(name, lse, p.q);
  if (lse.dtype != DType::f32) invalid("{} must be f32, got {}", name, to_string(lse.dtype));
  const Dims& d = p.dims;
  if (lse.shape[0] != d.B || lse.shape[1] != d.N || lse.shape[2] != d.T)
    invalid("{} must have shape (B, N, T) = ({}, {}, {}), got ({}, {}, {})", name, d.B, d.N, d.T, lse.shape[0],
            lse.shape[1], lse.shape[2]);
  return r;
}

void check_like(const char* name, const TensorView& t, const TensorView& like, const char* like_name,
                bool same_dtype = true) {
  for (int dim = 0; dim < 4; ++dim)
    if (t.shape[dim] != like.shape[dim])
      invalid("{} must have the shape of {} ({}, {}, {}, {}), got ({}, {}, {}, {})", name, like_name, like.shape[0],
              like.shape[1], like.shape[2], like.shape[3], t.shape[0], t.shape[1], t.shape[2], t.shape[3]);
  if (same_dtype && t.dtype != like.dtype)
    invalid("{} must have the dtype of {} ({}), got {}", name, like_name, to_string(like.dtype), to_string(t.dtype));
}

// Paths carve a caller workspace into 256-byte aligned pieces (the alignment cudaMalloc gives, and the largest any
// kernel or library here asks of its scratch), so the block itself must start on that boundary.
std::optional<DeviceBuffer> check_workspace(const std::optional<DeviceBuffer>& w) {
  if (!w) return std::nullopt;
  if (w->data == nullptr && w->bytes > 0) invalid("workspace.data is null but workspace.bytes = {}", w->bytes);
  if (reinterpret_cast<std::uintptr_t>(w->data) % 256 != 0)
    invalid("workspace.data must be 256-byte aligned (as cudaMalloc returns it), got {}", w->data);
  return w;
}

}  // namespace

Problem validate(const ForwardArgs& a) {
  RangeList inputs;
  Problem p = check_common(a.q, a.k, a.v, a.o, a.options, inputs);
  p.direction = Direction::forward;
  if (is_fp8_dtype(p.dtype) || a.fp8)
    check_fp8_forward(a, p);
  else if (a.o.dtype != p.dtype)
    invalid("o must have the inputs' dtype {}, got {}", to_string(p.dtype), to_string(a.o.dtype));
  RangeList outputs = {{"o", check_tensor("o", a.o, 4, "(B, T, N, Hv)"), a.o.device}};
  check_no_self_overlap("o", a.o);
  if (!a.lse.empty()) {
    outputs.push_back({"lse", check_lse("lse", a.lse, p), a.lse.device});
    check_no_self_overlap("lse", a.lse);
    p.lse = a.lse;
  }
  check_no_aliasing(inputs, outputs);
  p.workspace = check_workspace(a.workspace);
  return p;
}

Problem validate(const BackwardArgs& a) {
  RangeList inputs;
  Problem p = check_common(a.q, a.k, a.v, a.o, a.options, inputs);
  p.direction = Direction::backward;
  const bool fp8 = is_fp8_dtype(p.dtype) || a.fp8;
  if (!fp8 && a.o.dtype != p.dtype)
    invalid("o must have the inputs' dtype {}, got {}", to_string(p.dtype), to_string(a.o.dtype));
  inputs.push_back({"o", check_tensor("o", a.o, 4, "(B, T, N, Hv)"), a.o.device});
  inputs.push_back({"d_o", check_tensor("d_o", a.d_o, 4, "(B, T, N, Hv)"), a.d_o.device});
  check_same_place("d_o", a.d_o, a.q);
  check_like("d_o", a.d_o, a.o, "o", !fp8);
  if (a.lse.empty()) invalid("backward needs the forward call's lse (B, N, T)");
  inputs.push_back({"lse", check_lse("lse", a.lse, p), a.lse.device});

  RangeList outputs;
  const std::pair<const char*, const TensorView*> grads[] = {{"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv}};
  const std::pair<const char*, const TensorView*> likes[] = {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}};
  for (int i = 0; i < 3; ++i) {
    const auto [name, grad] = grads[i];
    outputs.push_back({name, check_tensor(name, *grad, 4, "(like its input)"), grad->device});
    check_same_place(name, *grad, a.q);
    check_like(name, *grad, *likes[i].second, likes[i].first, !fp8);
    check_no_self_overlap(name, *grad);
  }
  if (fp8) check_fp8_backward(a, p);
  check_no_aliasing(inputs, outputs);
  p.lse = a.lse;
  p.d_o = a.d_o;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  p.workspace = check_workspace(a.workspace);
  return p;
}

std::int64_t Problem::q_len(std::int64_t b) const {
  if (q_seqlens.empty()) return dims.T;
  return std::clamp<std::int64_t>(static_cast<const std::int32_t*>(q_seqlens.data)[b * q_seqlens.strides[0]], 0,
                                  dims.T);
}

std::int64_t Problem::kv_len(std::int64_t b) const {
  if (kv_seqlens.empty()) return dims.S;
  return std::clamp<std::int64_t>(static_cast<const std::int32_t*>(kv_seqlens.data)[b * kv_seqlens.strides[0]], 0,
                                  dims.S);
}

}  // namespace attnlab::core
