// TensorView helpers and dtype/device names.
#include <algorithm>
#include <cctype>
#include <string>

#include "core/error.h"

namespace attnlab {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
  }
  return "?";
}

std::string_view to_string(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::e4m3:
    case DType::e5m2:
    case DType::u8: return 1;
  }
  return 0;
}

DType parse_dtype(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (s == "f32" || s == "fp32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "e4m3" || s == "fp8" || s == "float8_e4m3fn") return DType::e4m3;
  if (s == "e5m2" || s == "float8_e5m2") return DType::e5m2;
  core::invalid("unknown dtype '{}': use f32, f16, bf16, e4m3 or e5m2", name);
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape, Device device,
                                  int device_index) {
  if (shape.size() == 0 || shape.size() > std::size_t(kMaxRank))
    core::invalid("TensorView::contiguous: rank {} is outside 1..{}", shape.size(), kMaxRank);
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_index = device_index;
  t.rank = int(shape.size());
  std::copy(shape.begin(), shape.end(), t.shape.begin());
  std::int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= std::max<std::int64_t>(t.shape[d], 1);
  }
  return t;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return rank == 0 ? 0 : n;
}

}  // namespace attnlab
