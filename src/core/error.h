// Building errors that name the rule that failed: fail(ErrorCode, "q.shape[3] (Hqk = {}) must equal ...", ...).
#pragma once

#include <fmt/format.h>

#include "attnlab/attention.h"

namespace attnlab::core {

template <class... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

template <class... Args>
[[noreturn]] void invalid(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(ErrorCode::invalid_argument, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace attnlab::core
