// One scratch allocation carved into 256-byte aligned pieces: first every piece is added (its offset returned),
// then the total is asked for once. Sizes that overflow 64 bits fail as out_of_memory naming the path: such a
// call could never get its memory, and the check must come before anything is allocated or launched.
#pragma once

#include <cstddef>

#include "core/error.h"

namespace attnlab::cuda {

class ScratchLayout {
 public:
  explicit ScratchLayout(const char* who) : who_(who) {}

  // The offset of a new piece of `bytes` (rounded up to 256).
  std::size_t add(std::size_t bytes) {
    const std::size_t at = size_;
    size_ = checked_add(size_, round_up(bytes));
    return at;
  }
  // `count` elements of `element_bytes` each.
  std::size_t add(std::size_t count, std::size_t element_bytes) { return add(checked_mul(count, element_bytes)); }
  std::size_t size() const { return size_; }

  std::size_t checked_mul(std::size_t a, std::size_t b) const {
    std::size_t r;
    if (__builtin_mul_overflow(a, b, &r)) overflow();
    return r;
  }
  std::size_t checked_add(std::size_t a, std::size_t b) const {
    std::size_t r;
    if (__builtin_add_overflow(a, b, &r)) overflow();
    return r;
  }

 private:
  std::size_t round_up(std::size_t bytes) const { return checked_add(bytes, 255) / 256 * 256; }
  [[noreturn]] void overflow() const { core::fail(ErrorCode::out_of_memory, "{}: workspace size overflows", who_); }

  const char* who_;
  std::size_t size_ = 0;
};

}  // namespace attnlab::cuda
