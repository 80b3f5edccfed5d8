// The path interface and the registry. A path (cpu-naive, cpu-flash, cuda-naive, cudnn, flash, ...) declares what
// it supports; src/core chooses among paths only through this interface and the dispatch policy
// (dispatch_policy.h), so adding a path touches its own folder, one registration line in builtin_paths.cpp and,
// for `auto` to prefer it anywhere, one row of the policy.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/attention.h"
#include "core/context_impl.h"
#include "core/problem.h"

namespace attnlab::core {

// A path's answer for one call on one context, without running it.
struct Verdict {
  std::optional<std::string> reason;  // why the path cannot run the call, or nullopt
  std::size_t workspace_bytes = 0;    // device scratch the call needs (what a caller workspace must hold)
};

class Path {
 public:
  virtual ~Path() = default;
  virtual std::string_view name() const = 0;
  virtual Device device() const = 0;
  virtual std::string summary() const = 0;
  // Why this path cannot run on this machine at all (no GPU, library too old, ...), or nullopt.
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // The path's rules: why it cannot run this (validated) problem, or nullopt. Needs no context: nothing is built,
  // allocated or launched.
  virtual std::optional<std::string> why_not(const Problem& problem) const = 0;
  // The call's own verdict on `ctx`: the rules, then whatever the call itself would find before launching (cudnn:
  // whether cuDNN builds its graph, built and cached in ctx), and the scratch it needs. Launches nothing.
  virtual Verdict plan(Context::Impl& ctx, const Problem& problem) const { return {why_not(problem), 0}; }
  // The call in one pass: the same checks as plan(), then the launch. Returns the reason and leaves everything
  // untouched when the path refuses (a caller workspace too small for it included); writes outputs only once the
  // call cannot fail any more.
  virtual std::optional<std::string> run_if_able(Context::Impl& ctx, const Problem& problem) const = 0;
};

// A path whose checks and run share nothing: run_if_able is why_not() then run().
class SimplePath : public Path {
 public:
  std::optional<std::string> run_if_able(Context::Impl& ctx, const Problem& problem) const final {
    if (auto why = why_not(problem)) return why;
    run(ctx, problem);
    return std::nullopt;
  }

 protected:
  virtual void run(Context::Impl& ctx, const Problem& problem) const = 0;
};

// The reason a caller workspace is too small for `needed` bytes, or nullopt (also when none was given).
std::optional<std::string> workspace_shortfall(const Problem& problem, std::size_t needed);

// All paths compiled into this build, in registration order.
const std::vector<const Path*>& registered_paths();
const Path* find_path(std::string_view name);

}  // namespace attnlab::core
