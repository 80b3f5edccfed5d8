// forward() / backward(): validate, choose a path (forced or auto), run it, report which one ran.
#include <algorithm>
#include <array>
#include <cstddef>
#include <new>
#include <string>

#include "attnlab/version.h"
#include "core/context_impl.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/path.h"
#include "core/validate.h"

namespace attnlab {
namespace {

std::string known_paths() {
  std::string s = "auto";
  for (const core::Path* p : core::registered_paths()) s += ", " + std::string(p->name());
  return s;
}

const char* direction_name(core::Direction d) { return d == core::Direction::forward ? "forward" : "backward"; }

// What rules `path` out before its own rules are asked: another device, or not usable on this machine.
std::optional<std::string> reason_before_rules(const core::Path& path, const core::Problem& problem) {
  if (path.device() != problem.device)
    return fmt::format("it runs on {} tensors, these are on {}", to_string(path.device()), to_string(problem.device));
  return path.unavailable();
}

// The reason `path` cannot run `problem`, or nullopt.
std::optional<std::string> reason_against(const core::Path& path, const core::Problem& problem) {
  if (auto why = reason_before_rules(path, problem)) return why;
  return path.why_not(problem);
}

const core::Path& named_path(const std::string& name) {
  const core::Path* path = core::find_path(name);
  if (path == nullptr) core::invalid("unknown path '{}': this build has {}", name, known_paths());
  return *path;
}

// Highest rank first, registration order among equals.
struct Ranked {
  std::array<const core::Path*, 16> paths{};
  std::size_t size = 0;
};

Ranked ranked_paths(const core::Problem& problem) {
  struct Candidate {
    int rank;
    std::size_t order;  // registration order breaks ties
    const core::Path* path;
  };
  const auto& paths = core::registered_paths();
  std::array<Candidate, 16> candidates{};
  const std::size_t n = paths.size();
  if (n > candidates.size()) core::fail(ErrorCode::internal, "auto: more than {} registered paths", candidates.size());
  for (std::size_t i = 0; i < n; ++i) candidates[i] = {paths[i]->auto_rank(problem), i, paths[i]};
  std::sort(candidates.begin(), candidates.begin() + std::ptrdiff_t(n), [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.order < b.order;
  });
  Ranked ranked;
  for (std::size_t i = 0; i < n; ++i) ranked.paths[ranked.size++] = candidates[i].path;
  return ranked;
}

[[noreturn]] void fail_no_path(const core::Problem& problem) {
  std::string reasons;
  for (const core::Path* path : core::registered_paths())
    if (auto why = reason_against(*path, problem)) reasons += fmt::format("\n  {}: {}", path->name(), *why);
  core::fail(ErrorCode::unsupported, "auto: no path in this build can run this {} call:{}",
             direction_name(problem.direction), reasons);
}

// The forced path, or under auto the highest-ranked one that accepts the call. `attempt(path)` is a path's reason
// against the call, or nullopt once it accepted (why_not asks; run runs). Under auto the first acceptance wins, so
// a call asks only the paths ranked above the one that takes it (a refusal can cost as much as the call: cudnn
// builds a plan).
template <class Attempt>
const core::Path& first_accepting(const std::string& name, const core::Problem& problem, Attempt attempt) {
  if (name != "auto") {
    const core::Path& path = named_path(name);
    if (auto why = attempt(path))
      core::fail(ErrorCode::unsupported, "{}: cannot run this {} call: {}", name, direction_name(problem.direction),
                 *why);
    return path;
  }
  const Ranked ranked = ranked_paths(problem);
  for (std::size_t i = 0; i < ranked.size; ++i)
    if (!attempt(*ranked.paths[i])) return *ranked.paths[i];
  fail_no_path(problem);
}

// The path that would run `problem`, without running it.
const core::Path& choose(const std::string& name, const core::Problem& problem) {
  return first_accepting(name, problem, [&](const core::Path& path) { return reason_against(path, problem); });
}

// Runs `path` when it can (its rules checked and the call made in one pass: Path::run_if_able); else its reason.
std::optional<std::string> try_path(Context& ctx, const core::Path& path, const core::Problem& problem) {
  if (auto why = reason_before_rules(path, problem)) return why;
  ctx.impl().last_workspace_bytes = 0;
  try {
    return path.run_if_able(ctx.impl(), problem);
  } catch (const std::bad_alloc&) {
    core::fail(ErrorCode::out_of_memory, "{}: out of host memory for its workspace", path.name());
  }
}

RunInfo run(Context& ctx, const core::Problem& problem, const std::string& path_name) {
  const core::Path& path =
      first_accepting(path_name, problem, [&](const core::Path& p) { return try_path(ctx, p, problem); });
  return RunInfo{std::string(path.name()), ctx.impl().last_workspace_bytes};
}

}  // namespace

RunInfo forward(Context& ctx, const ForwardArgs& args) {
  const core::Problem problem = core::validate(args);
  return run(ctx, problem, args.options.path);
}

RunInfo backward(Context& ctx, const BackwardArgs& args) {
  const core::Problem problem = core::validate(args);
  return run(ctx, problem, args.options.path);
}

std::optional<std::string> why_not(const std::string& path_name, const ForwardArgs& args) {
  const core::Problem problem = core::validate(args);
  try {
    choose(path_name, problem);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unsupported) return std::string(e.what());
    throw;
  }
  return std::nullopt;
}

std::vector<PathInfo> list_paths() {
  std::vector<PathInfo> out;
  for (const core::Path* p : core::registered_paths()) {
    auto why = p->unavailable();
    out.push_back({std::string(p->name()), p->device(), !why.has_value(), why.value_or(""), p->summary()});
  }
  return out;
}

BuildInfo build_info() {
  BuildInfo info;
  info.version = ATTNLAB_VERSION_STRING;
  info.cuda = ATTNLAB_WITH_CUDA != 0;
  info.compiler = fmt::format("{} {}", ATTNLAB_CXX_COMPILER_ID, ATTNLAB_CXX_COMPILER_VERSION);
  info.cpu_isa = core::cpu_isa_name();
  return info;
}

}  // namespace attnlab
