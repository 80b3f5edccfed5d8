// The checks every call makes of its tensor arguments, whatever the call: rank, pointer, extents, strides and
// alignment (check_tensor, which returns the bytes a view can touch), outputs without self-overlap, outputs that
// alias no input, one device for every tensor. Shared by validate.cpp (attention calls) and validate_serving.cpp
// (the serving calls of include/attnlab/serving.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "attnlab/attention.h"
#include "core/error.h"

namespace attnlab::core {

// The element types attention computes in (FP8 apart).
inline bool is_float_dtype(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

// Byte range [begin, end) a view can touch; computed with overflow checks.
struct ByteRange {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
};

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* name);
std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* name);

// Generic checks for one tensor argument: rank, pointer, positive extents, strides, alignment, size arithmetic.
ByteRange check_tensor(const char* name, const TensorView& t, int rank, const char* layout);

// An output must not have two indices sharing one element (e.g. a zero stride on a dimension of size > 1).
void check_no_self_overlap(const char* name, const TensorView& t);

struct NamedRange {
  const char* name;
  ByteRange range;
  Device device;
};

// The inputs or the outputs of one call: at most q, k, v, o, d_o, lse, the two length tensors and a bias or mask.
// Without heap allocations: the host's cost per call is part of a small call's time.
class RangeList {
 public:
  RangeList() = default;
  RangeList(std::initializer_list<NamedRange> ranges) {
    for (const NamedRange& r : ranges) push_back(r);
  }
  void push_back(const NamedRange& r) {
    if (size_ == items_.size()) fail(ErrorCode::internal, "validate: more than {} tensors in a call", items_.size());
    items_[size_++] = r;
  }
  const NamedRange* begin() const { return items_.data(); }
  const NamedRange* end() const { return items_.data() + size_; }
  std::size_t size() const { return size_; }
  const NamedRange& operator[](std::size_t i) const { return items_[i]; }

 private:
  std::array<NamedRange, 10> items_{};
  std::size_t size_ = 0;
};

// Outputs must not overlap inputs or each other: a path may write an output before it has read every input.
void check_no_aliasing(const RangeList& inputs, const RangeList& outputs);

// `t` must be on q's device (and device index).
void check_same_place(const char* name, const TensorView& t, const TensorView& q);

}  // namespace attnlab::core
