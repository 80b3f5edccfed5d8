// The generic tensor checks (tensor_checks.h).
#include "core/tensor_checks.h"

#include <algorithm>
#include <utility>

namespace attnlab::core {
namespace {

bool intersects(const ByteRange& a, const ByteRange& b) { return a.begin < b.end && b.begin < a.end; }

}  // namespace

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* name) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) invalid("{}: size arithmetic overflows 64 bits", name);
  return r;
}
std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* name) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) invalid("{}: size arithmetic overflows 64 bits", name);
  return r;
}

// Generic checks for one tensor argument: rank, pointer, positive extents, strides, alignment, size arithmetic.
ByteRange check_tensor(const char* name, const TensorView& t, int rank, const char* layout) {
  if (t.rank != rank) invalid("{} must have rank {} {}, got rank {}", name, rank, layout, t.rank);
  if (t.data == nullptr) invalid("{}.data is null", name);
  for (int d = 0; d < rank; ++d) {
    if (t.shape[d] < 1) invalid("{}.shape[{}] must be ≥ 1 {}, got {}", name, d, layout, t.shape[d]);
    if (t.strides[d] < 0) invalid("{}.strides[{}] must be ≥ 0, got {}", name, d, t.strides[d]);
  }
  if (t.strides[rank - 1] != 1 && t.shape[rank - 1] > 1)
    invalid("{}: the last dimension must be contiguous (stride 1), got stride {}", name, t.strides[rank - 1]);
  const std::size_t elem = size_of(t.dtype);
  if (elem == 0) invalid("{}: unknown dtype", name);
  if (reinterpret_cast<std::uintptr_t>(t.data) % elem != 0)
    invalid("{}.data is not aligned to its element size ({} bytes)", name, elem);
  std::int64_t last = 0;  // largest element offset
  for (int d = 0; d < rank; ++d) last = checked_add(last, checked_mul(t.shape[d] - 1, t.strides[d], name), name);
  const std::int64_t bytes = checked_mul(checked_add(last, 1, name), std::int64_t(elem), name);
  const auto begin = reinterpret_cast<std::uintptr_t>(t.data);
  if (begin + std::uintptr_t(bytes) < begin) invalid("{}: the tensor's address range wraps around", name);
  return {begin, begin + std::uintptr_t(bytes)};
}

// Runs on every call, so without heap allocations (like RangeList): the host's cost per call is part of a small
// call's time.
void check_no_self_overlap(const char* name, const TensorView& t) {
  std::array<std::pair<std::int64_t, std::int64_t>, kMaxRank> dims;  // (stride, extent)
  int n = 0;
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] > 1) dims[std::size_t(n++)] = {t.strides[d], t.shape[d]};
  for (int i = 1; i < n; ++i)  // insertion sort of at most kMaxRank entries (std::sort trips GCC 12's -Warray-bounds)
    for (int j = i; j > 0 && dims[std::size_t(j)] < dims[std::size_t(j - 1)]; --j)
      std::swap(dims[std::size_t(j)], dims[std::size_t(j - 1)]);
  std::int64_t reach = 0;  // largest offset reachable by the smaller-stride dimensions
  for (int i = 0; i < n; ++i) {
    const auto [stride, extent] = dims[std::size_t(i)];
    if (stride <= reach) invalid("{}: output strides make distinct elements share memory", name);
    reach += stride * (extent - 1);
  }
}

// Outputs must not overlap inputs or each other: a path may write an output before it has read every input.
void check_no_aliasing(const RangeList& inputs, const RangeList& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (const auto& in : inputs)
      if (in.device == outputs[i].device && intersects(in.range, outputs[i].range))
        invalid("{} overlaps {} in memory: outputs must not alias inputs", outputs[i].name, in.name);
    for (std::size_t j = i + 1; j < outputs.size(); ++j)
      if (intersects(outputs[i].range, outputs[j].range))
        invalid("{} overlaps {} in memory: outputs must not alias each other", outputs[i].name, outputs[j].name);
  }
}

void check_same_place(const char* name, const TensorView& t, const TensorView& q) {
  if (t.device != q.device || (t.device == Device::cuda && t.device_index != q.device_index))
    invalid("{} is on {}:{} but q is on {}:{}: all tensors of a call must be on one device", name,
            to_string(t.device), t.device_index, to_string(q.device), q.device_index);
}

}  // namespace attnlab::core
