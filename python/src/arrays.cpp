// DLPack arrays as the library's views, the calls' shared options, and the calling thread's context (arrays.h).
#include "arrays.h"

#include <cstdint>
#include <string>

namespace attnlab_python {
namespace {

attnlab::DType dtype_of(const Array& a, const char* name) {
  const nb::dlpack::dtype d = a.dtype();
  const auto code = nb::dlpack::dtype_code(d.code);
  if (d.lanes == 1) {
    if (code == nb::dlpack::dtype_code::Float && d.bits == 32) return attnlab::DType::f32;
    if (code == nb::dlpack::dtype_code::Float && d.bits == 16) return attnlab::DType::f16;
    if (code == nb::dlpack::dtype_code::Bfloat && d.bits == 16) return attnlab::DType::bf16;
    if (code == nb::dlpack::dtype_code::Int && d.bits == 32) return attnlab::DType::i32;
    if ((code == nb::dlpack::dtype_code::Bool || code == nb::dlpack::dtype_code::UInt) && d.bits == 8)
      return attnlab::DType::u8;
  }
  throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                       std::string(name) + ": element type (DLPack code " + std::to_string(int(d.code)) + ", " +
                           std::to_string(int(d.bits)) + " bits) unsupported; use float32, float16, bfloat16 (int32 " +
                           "lengths, bool masks)");
}

}  // namespace

attnlab::TensorView view_of(const Array& a, const char* name) {
  attnlab::TensorView v;
  if (a.ndim() > std::size_t(attnlab::kMaxRank))
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                         std::string(name) + " has " + std::to_string(a.ndim()) + " dimensions; at most 4");
  v.data = a.data();
  v.dtype = dtype_of(a, name);
  if (a.device_type() == nb::device::cpu::value) {
    v.device = attnlab::Device::cpu;
  } else if (a.device_type() == nb::device::cuda::value) {
    v.device = attnlab::Device::cuda;
    v.device_index = a.device_id();
  } else {
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                         std::string(name) + ": DLPack device type " + std::to_string(a.device_type()) +
                             " unsupported; CPU or CUDA arrays");
  }
  v.rank = int(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) {
    v.shape[i] = std::int64_t(a.shape(i));
    v.strides[i] = a.stride(i);
  }
  return v;
}

attnlab::TensorView optional_view(const std::optional<Array>& a, const char* name) {
  return a ? view_of(*a, name) : attnlab::TensorView{};
}

attnlab::Options options(std::optional<float> scale, bool causal, bool bottom_right, std::int64_t window_left,
                         std::int64_t window_right, const std::optional<Array>& q_seqlens,
                         const std::optional<Array>& kv_seqlens, const std::optional<Array>& bias,
                         const std::optional<Array>& mask, const std::string& path) {
  attnlab::Options o;
  o.scale = scale;
  o.mask.causal = causal;
  o.mask.align = bottom_right ? attnlab::MaskAlign::bottom_right : attnlab::MaskAlign::top_left;
  o.mask.window_left = window_left;
  o.mask.window_right = window_right;
  o.q_seqlens = optional_view(q_seqlens, "query_seq_lengths");
  o.kv_seqlens = optional_view(kv_seqlens, "key_value_seq_lengths");
  o.bias = optional_view(bias, "bias");
  o.bool_mask = optional_view(mask, "mask");
  o.path = path;
  return o;
}

attnlab::Context& thread_context() {
  thread_local attnlab::Context ctx;
  return ctx;
}

}  // namespace attnlab_python
