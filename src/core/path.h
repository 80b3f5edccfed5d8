// The path interface and the registry. A path (cpu-naive, cpu-flash, cuda-naive, cudnn, flash, ...) declares what
// it supports; src/core chooses among paths only through this interface, so adding a path touches its own folder
// and one registration line in builtin_paths.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/attention.h"
#include "core/problem.h"

namespace attnlab::core {

class Path {
 public:
  virtual ~Path() = default;
  virtual std::string_view name() const = 0;
  virtual Device device() const = 0;
  virtual std::string summary() const = 0;
  // Why this path cannot run on this machine at all (no GPU, library too old, ...), or nullopt.
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // Why this path cannot run this (validated) problem, or nullopt. Must not launch or allocate anything.
  virtual std::optional<std::string> why_not(const Problem& problem) const = 0;
  // Order under "auto": among paths that can run a problem, the highest rank runs. The problem is given so that a
  // path can rank itself by size (flash leads on small calls, where it has the lowest per-call cost).
  virtual int auto_rank(const Problem& problem) const = 0;
  // Run. Called only after why_not() returned nullopt. Writes outputs only once it cannot fail any more
  // (allocations first), so a failing call leaves outputs untouched.
  virtual void run(Context::Impl& ctx, const Problem& problem) const = 0;
  // why_not() and, where it has none, run(): the reason, or nullopt once the call has run. A path whose checks
  // and launch share work (flash: its tuning variables, limits and kernel parameters) overrides this to do it
  // once per call, the cost that matters on small calls. It still refuses before it writes or launches anything.
  virtual std::optional<std::string> run_if_able(Context::Impl& ctx, const Problem& problem) const {
    if (auto why = why_not(problem)) return why;
    run(ctx, problem);
    return std::nullopt;
  }
};

// All paths compiled into this build, in registration order.
const std::vector<const Path*>& registered_paths();
const Path* find_path(std::string_view name);

}  // namespace attnlab::core
