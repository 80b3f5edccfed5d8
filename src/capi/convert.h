// Conversions between the C ABI's plain structs (attnlab.h) and the C++ API's types (attention.h).
//
// The C side carries enums as int32_t, so every enum value is range-checked here and a bad one is reported with
// the field it came from ("options.bias.dtype: 9 is not an attnlab_dtype ..."). Everything else (shapes, strides,
// pointers, dtype combinations) is left to the core's validation, which checks C and C++ callers alike.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "attnlab/attention.h"
#include "attnlab/attnlab.h"
#include "core/error.h"

namespace attnlab::capi {

inline DType to_dtype(std::int32_t value, const std::string& field) {
  if (value < ATTNLAB_F32 || value > ATTNLAB_U8)
    core::invalid("{}: {} is not an attnlab_dtype (ATTNLAB_F32 = {} .. ATTNLAB_U8 = {})", field, value,
                  int(ATTNLAB_F32), int(ATTNLAB_U8));
  return static_cast<DType>(value);
}

inline Device to_device(std::int32_t value, const std::string& field) {
  if (value != ATTNLAB_CPU && value != ATTNLAB_CUDA)
    core::invalid("{}: {} is not an attnlab_device (ATTNLAB_CPU = {}, ATTNLAB_CUDA = {})", field, value,
                  int(ATTNLAB_CPU), int(ATTNLAB_CUDA));
  return static_cast<Device>(value);
}

inline MaskAlign to_mask_align(std::int32_t value, const std::string& field) {
  if (value != ATTNLAB_TOP_LEFT && value != ATTNLAB_BOTTOM_RIGHT)
    core::invalid("{}: {} is not an attnlab_mask_align (ATTNLAB_TOP_LEFT = {}, ATTNLAB_BOTTOM_RIGHT = {})", field,
                  value, int(ATTNLAB_TOP_LEFT), int(ATTNLAB_BOTTOM_RIGHT));
  return static_cast<MaskAlign>(value);
}

// rank 0 with data NULL is an absent tensor (the default TensorView).
inline TensorView to_cxx(const attnlab_tensor& t, const std::string& name) {
  TensorView v;
  if (t.rank == 0 && t.data == nullptr) return v;
  if (t.rank < 0 || t.rank > kMaxRank) core::invalid("{}.rank must be in 0..{}, got {}", name, kMaxRank, t.rank);
  v.data = t.data;
  v.dtype = to_dtype(t.dtype, name + ".dtype");
  v.device = to_device(t.device, name + ".device");
  v.device_index = t.device_index;
  v.rank = t.rank;
  for (int d = 0; d < t.rank; ++d) {
    v.shape[d] = t.shape[d];
    v.strides[d] = t.strides[d];
  }
  return v;
}

inline Options to_cxx(const attnlab_options& o) {
  Options out;
  if (o.has_scale != 0) out.scale = o.scale;
  out.softcap = o.softcap;
  out.mask.causal = o.causal != 0;
  out.mask.align = to_mask_align(o.mask_align, "options.mask_align");
  out.mask.window_left = o.window_left;
  out.mask.window_right = o.window_right;
  out.q_seqlens = to_cxx(o.q_seqlens, "options.q_seqlens");
  out.kv_seqlens = to_cxx(o.kv_seqlens, "options.kv_seqlens");
  out.bias = to_cxx(o.bias, "options.bias");
  out.bool_mask = to_cxx(o.bool_mask, "options.bool_mask");
  out.path = o.path == nullptr ? std::string("auto") : std::string(o.path);
  return out;
}

inline ForwardArgs to_cxx(const attnlab_forward_args& a) {
  ForwardArgs out;
  out.q = to_cxx(a.q, "q");
  out.k = to_cxx(a.k, "k");
  out.v = to_cxx(a.v, "v");
  out.o = to_cxx(a.o, "o");
  out.lse = to_cxx(a.lse, "lse");
  out.options = to_cxx(a.options);
  return out;
}

inline BackwardArgs to_cxx(const attnlab_backward_args& a) {
  BackwardArgs out;
  out.q = to_cxx(a.q, "q");
  out.k = to_cxx(a.k, "k");
  out.v = to_cxx(a.v, "v");
  out.o = to_cxx(a.o, "o");
  out.d_o = to_cxx(a.d_o, "d_o");
  out.lse = to_cxx(a.lse, "lse");
  out.dq = to_cxx(a.dq, "dq");
  out.dk = to_cxx(a.dk, "dk");
  out.dv = to_cxx(a.dv, "dv");
  out.options = to_cxx(a.options);
  return out;
}

// The defaults of attnlab::Options, as C fields.
inline attnlab_options default_options() {
  const Options d;
  attnlab_options o{};
  o.has_scale = d.scale.has_value() ? 1 : 0;
  o.scale = d.scale.value_or(0.0f);
  o.softcap = d.softcap;
  o.causal = d.mask.causal ? 1 : 0;
  o.mask_align = static_cast<std::int32_t>(d.mask.align);
  o.window_left = d.mask.window_left;
  o.window_right = d.mask.window_right;
  o.path = nullptr;  // "auto"
  return o;
}

// attnlab_tensor_contiguous: fills `t` with what was asked first, then checks it, so a rejected request still
// leaves a tensor that the call using it rejects with the same field named.
inline void contiguous(attnlab_tensor& t, void* data, std::int32_t dtype, std::int32_t device, std::int32_t rank,
                       const std::int64_t* shape) {
  t = attnlab_tensor{};
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = rank;
  if (rank < 1 || rank > kMaxRank)
    core::invalid("attnlab_tensor_contiguous: rank must be in 1..{}, got {}", kMaxRank, rank);
  to_dtype(dtype, "attnlab_tensor_contiguous: dtype");
  to_device(device, "attnlab_tensor_contiguous: device");
  if (shape == nullptr) core::invalid("attnlab_tensor_contiguous: shape is NULL");
  std::copy(shape, shape + rank, t.shape);
  std::int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    if (__builtin_mul_overflow(stride, std::max<std::int64_t>(shape[d], 1), &stride)) {
      std::fill(t.strides, t.strides + d, std::int64_t(-1));  // unusable, so a call using it is rejected too
      core::invalid("attnlab_tensor_contiguous: the strides of this shape overflow 64 bits");
    }
  }
}

}  // namespace attnlab::capi
