// attnlab::quantize / dequantize (include/attnlab/fp8.h): the views' rules, checked before anything is written, and
// the CPU loop. CUDA tensors go to one kernel (src/cuda/fp8/convert_kernels.cu) that rounds through the same
// src/core/fp8.h, so both devices write the same bytes.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "attnlab/fp8.h"
#include "attnlab/version.h"
#include "core/context_impl.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/numeric.h"
#if ATTNLAB_WITH_CUDA
#include "cuda/fp8/convert_kernels.h"
#endif

namespace attnlab {
namespace {

bool is_float(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }
bool is_fp8(DType d) { return d == DType::e4m3 || d == DType::e5m2; }

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* call, const char* name) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) core::invalid("{}: {}: size arithmetic overflows 64 bits", call, name);
  return r;
}

struct ByteRange {
  std::uintptr_t begin = 0, end = 0;
};

// Rank, extents, strides, contiguity, pointer and alignment of one view; the byte range it spans (empty for a view
// of no elements, which may have a null pointer).
ByteRange check_view(const char* call, const char* name, const TensorView& t) {
  if (t.rank < 1 || t.rank > kMaxRank)
    core::invalid("{}: {} must have rank 1..{}, got {}", call, name, kMaxRank, t.rank);
  bool no_elements = false;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0) core::invalid("{}: {}.shape[{}] must be ≥ 0, got {}", call, name, d, t.shape[d]);
    if (t.strides[d] < 0) core::invalid("{}: {}.strides[{}] must be ≥ 0, got {}", call, name, d, t.strides[d]);
    no_elements = no_elements || t.shape[d] == 0;
  }
  const int last = t.rank - 1;
  if (t.strides[last] != 1 && t.shape[last] > 1)
    core::invalid("{}: {}: the last dimension must be contiguous (stride 1), got stride {}", call, name,
                  t.strides[last]);
  if (no_elements) return {};
  if (t.data == nullptr) core::invalid("{}: {}.data is null", call, name);
  const std::size_t elem = size_of(t.dtype);
  const auto begin = reinterpret_cast<std::uintptr_t>(t.data);
  if (begin % elem != 0) core::invalid("{}: {}.data is not aligned to its element size ({} bytes)", call, name, elem);
  std::int64_t reach = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (__builtin_add_overflow(reach, checked_mul(t.shape[d] - 1, t.strides[d], call, name), &reach))
      core::invalid("{}: {}: size arithmetic overflows 64 bits", call, name);
  }
  const std::int64_t bytes = checked_mul(reach + 1, std::int64_t(elem), call, name);
  if (begin + std::uintptr_t(bytes) < begin)
    core::invalid("{}: {}: the tensor's address range wraps around", call, name);
  return {begin, begin + std::uintptr_t(bytes)};
}

// Two indices of the output sharing one element would be written twice, in no defined order on the GPU.
void check_distinct_elements(const char* call, const TensorView& t) {
  std::array<std::pair<std::int64_t, std::int64_t>, kMaxRank> dims{};  // (stride, extent) of extents > 1
  int n = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] <= 1) continue;
    // Insertion by stride: at most four entries (std::sort here trips GCC 12's -Warray-bounds).
    int at = n++;
    for (; at > 0 && dims[std::size_t(at - 1)].first > t.strides[d]; --at)
      dims[std::size_t(at)] = dims[std::size_t(at - 1)];
    dims[std::size_t(at)] = {t.strides[d], t.shape[d]};
  }
  std::int64_t reach = 0;  // the largest offset the smaller-stride dimensions reach
  for (int i = 0; i < n; ++i) {
    const auto [stride, extent] = dims[std::size_t(i)];
    if (stride <= reach) core::invalid("{}: out: its strides make distinct elements share memory", call);
    reach += stride * (extent - 1);
  }
}

void check_pair(const char* call, const TensorView& in, const TensorView& out, const void* scale,
                const char* scale_name) {
  const bool quantizing = std::string_view(call) == "quantize";
  if (quantizing ? !is_float(in.dtype) : !is_fp8(in.dtype))
    core::invalid("{}: in.dtype must be {}, got {}", call, quantizing ? "f32, f16 or bf16" : "e4m3 or e5m2",
                  to_string(in.dtype));
  if (quantizing ? !is_fp8(out.dtype) : !is_float(out.dtype))
    core::invalid("{}: out.dtype must be {}, got {}", call, quantizing ? "e4m3 or e5m2" : "f32, f16 or bf16",
                  to_string(out.dtype));
  const ByteRange in_range = check_view(call, "in", in);
  const ByteRange out_range = check_view(call, "out", out);
  if (in.rank != out.rank)
    core::invalid("{}: out must have in's shape: in has rank {}, out rank {}", call, in.rank, out.rank);
  for (int d = 0; d < in.rank; ++d)
    if (in.shape[d] != out.shape[d])
      core::invalid("{}: out must have in's shape: in.shape[{}] = {}, out.shape[{}] = {}", call, d, in.shape[d], d,
                    out.shape[d]);
  if (in.device != out.device || (in.device == Device::cuda && in.device_index != out.device_index))
    core::invalid("{}: in and out must be on one device: in is on {}:{}, out on {}:{}", call, to_string(in.device),
                  in.device_index, to_string(out.device), out.device_index);
  if (scale == nullptr) core::invalid("{}: {} is null: it must point at one f32 in {} memory", call, scale_name,
                                      in.device == Device::cuda ? "device" : "host");
  check_distinct_elements(call, out);
  if (in_range.begin < out_range.end && out_range.begin < in_range.end)
    core::invalid("{}: out overlaps in in memory: the output must not alias the input", call);
  if (in.device == Device::cuda && !ATTNLAB_WITH_CUDA)
    core::fail(ErrorCode::unsupported, "{}: the tensors are on cuda, but this libattnlab was built without CUDA", call);
}

core::Fp8Format format_of(DType dtype) { return dtype == DType::e5m2 ? core::Fp8Format::e5m2 : core::Fp8Format::e4m3; }

// Calls fn(in_offset, out_offset) for every element, in row-major order.
template <class Fn>
void for_each_element(const TensorView& in, const TensorView& out, Fn&& fn) {
  std::array<std::int64_t, kMaxRank> shape{1, 1, 1, 1}, is{0, 0, 0, 0}, os{0, 0, 0, 0};
  const int pad = kMaxRank - in.rank;
  for (int d = 0; d < in.rank; ++d) {
    shape[std::size_t(pad + d)] = in.shape[d];
    is[std::size_t(pad + d)] = in.strides[d];
    os[std::size_t(pad + d)] = out.strides[d];
  }
  for (std::int64_t i0 = 0; i0 < shape[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < shape[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < shape[2]; ++i2) {
        const std::int64_t in_row = i0 * is[0] + i1 * is[1] + i2 * is[2];
        const std::int64_t out_row = i0 * os[0] + i1 * os[1] + i2 * os[2];
        for (std::int64_t i3 = 0; i3 < shape[3]; ++i3) fn(in_row + i3, out_row + i3);
      }
}

void quantize_on_host(const TensorView& in, const TensorView& out, float scale, float* amax) {
  const core::Fp8Format format = format_of(out.dtype);
  auto* codes = static_cast<std::uint8_t*>(out.data);
  std::uint32_t bits = 0;  // max |x| as bits, as the kernel takes it: every NaN lies above +inf
  for_each_element(in, out, [&](std::int64_t i, std::int64_t o) {
    const float x = core::load_float(in.data, in.dtype, i);
    bits = std::max(bits, core::bits_of(x) & 0x7fffffffu);
    codes[o] = core::float_to_fp8(x * scale, format);
  });
  if (amax != nullptr) *amax = core::float_of(bits);
}

void dequantize_on_host(const TensorView& in, const TensorView& out, float scale_inv) {
  const core::Fp8Format format = format_of(in.dtype);
  const auto* codes = static_cast<const std::uint8_t*>(in.data);
  for_each_element(in, out, [&](std::int64_t i, std::int64_t o) {
    float v = core::fp8_to_float(codes[i], format) * scale_inv;
    // One NaN for both devices (their multiplies make different ones): quiet, with the code's sign.
    if (std::isnan(v)) v = core::float_of((std::uint32_t(codes[i] & 0x80u) << 24) | 0x7fc00000u);
    core::store_float(out.data, out.dtype, o, v);
  });
}

}  // namespace

void quantize(Context& ctx, const TensorView& in, const TensorView& out, const float* scale, float* amax) {
  check_pair("quantize", in, out, scale, "scale");
  if (in.device == Device::cpu) {
    if (in.numel() == 0) {
      if (amax != nullptr) *amax = 0.0f;
      return;
    }
    quantize_on_host(in, out, *scale, amax);
    return;
  }
#if ATTNLAB_WITH_CUDA
  cuda::fp8::quantize(in, out, scale, amax, ctx.impl().stream);
#endif
}

void dequantize(Context& ctx, const TensorView& in, const TensorView& out, const float* scale_inv) {
  check_pair("dequantize", in, out, scale_inv, "scale_inv");
  if (in.device == Device::cpu) {
    if (in.numel() > 0) dequantize_on_host(in, out, *scale_inv);
    return;
  }
#if ATTNLAB_WITH_CUDA
  cuda::fp8::dequantize(in, out, scale_inv, ctx.impl().stream);
#endif
}

}  // namespace attnlab
