// forward() / backward() / why_not() / workspace_size(): validate, choose a path (forced, or auto through the
// dispatch policy), run it or ask it, report which one ran.
#include <array>
#include <cstddef>
#include <new>
#include <string>

#include "attnlab/version.h"
#include "core/context_impl.h"
#include "core/cpu_features.h"
#include "core/dispatch_policy.h"
#include "core/error.h"
#include "core/path.h"
#include "core/validate.h"

namespace attnlab {
namespace core {

std::optional<std::string> workspace_shortfall(const Problem& p, std::size_t needed) {
  if (!p.workspace || needed <= p.workspace->bytes) return std::nullopt;
  return fmt::format("needs {} bytes of workspace; the caller's holds {} (attnlab::workspace_size says what a call "
                     "needs)",
                     needed, p.workspace->bytes);
}

CallTraits call_traits(const Problem& p) {
  CallTraits t;
  t.device = p.device;
  t.direction = p.direction;
  t.dtype = p.dtype;
  const Dims& d = p.dims;
  t.flops = 4.0 * double(d.B) * double(d.N) * double(d.T) * double(d.S) * double(d.Hqk);
  t.cc = p.device == Device::cuda ? device_compute_capability(p.device_index) : 0;
  t.T = d.T, t.S = d.S, t.Hqk = d.Hqk, t.Hv = d.Hv;
  t.causal_only = p.mask.causal && p.mask.window_left < 0 && p.softcap <= 0.0f && p.bias.empty() &&
                  p.bool_mask.empty() && !p.has_seqlens();
  t.unmasked = !p.mask.causal && p.mask.window_left < 0 && p.mask.window_right < 0 && p.softcap <= 0.0f &&
               p.bias.empty() && p.bool_mask.empty() && !p.has_seqlens();
  return t;
}

}  // namespace core

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

const core::Path& named_path(const std::string& name) {
  const core::Path* path = core::find_path(name);
  if (path == nullptr) core::invalid("unknown path '{}': this build has {}", name, known_paths());
  return *path;
}

// auto's order for `problem`: the policy row's paths that this build has, then any other registered path (in
// registration order), so that a path the policy does not name yet is still tried last.
struct Order {
  std::array<const core::Path*, 16> paths{};
  std::size_t size = 0;
  void add(const core::Path* p) {
    for (std::size_t i = 0; i < size; ++i)
      if (paths[i] == p) return;
    if (size == paths.size()) core::fail(ErrorCode::internal, "auto: more than {} registered paths", paths.size());
    paths[size++] = p;
  }
};

Order auto_order(const core::Problem& problem) {
  Order order;
  for (std::string_view name : core::policy_row(core::call_traits(problem)).order)
    if (!name.empty())
      if (const core::Path* p = core::find_path(name)) order.add(p);
  for (const core::Path* p : core::registered_paths()) order.add(p);
  return order;
}

// The forced path, or under auto the first path of the policy's order that accepts the call. `attempt(path)` is
// a path's reason against the call, or nullopt once it accepted (why_not asks; run runs). The walk stops at the
// first acceptance, so a call asks only the paths ordered before the one that takes it.
template <class Attempt>
const core::Path& first_accepting(const std::string& name, const core::Problem& problem, Attempt attempt) {
  if (name != "auto") {
    const core::Path& path = named_path(name);
    if (auto why = attempt(path))
      core::fail(ErrorCode::unsupported, "{}: cannot run this {} call: {}", name, direction_name(problem.direction),
                 *why);
    return path;
  }
  const Order order = auto_order(problem);
  std::string reasons;
  for (std::size_t i = 0; i < order.size; ++i) {
    const core::Path& path = *order.paths[i];
    auto why = attempt(path);
    if (!why) return path;
    reasons += fmt::format("\n  {}: {}", path.name(), *why);
  }
  core::fail(ErrorCode::unsupported, "auto: no path in this build can run this {} call:{}",
             direction_name(problem.direction), reasons);
}

// The verdict of `path` on the call in `ctx`, the caller's workspace included; nothing launched.
core::Verdict verdict(Context& ctx, const core::Path& path, const core::Problem& problem) {
  if (auto why = reason_before_rules(path, problem)) return {why, 0};
  core::Verdict v = path.plan(ctx.impl(), problem);
  if (!v.reason) v.reason = core::workspace_shortfall(problem, v.workspace_bytes);
  return v;
}

// Runs `path` when it can (its checks and the call in one pass: Path::run_if_able); else its reason.
std::optional<std::string> try_path(Context& ctx, const core::Path& path, const core::Problem& problem) {
  if (auto why = reason_before_rules(path, problem)) return why;
  Context::Impl& impl = ctx.impl();
  impl.last_workspace_bytes = 0;
  try {
    return path.run_if_able(impl, problem);
  } catch (const std::bad_alloc&) {
    core::fail(ErrorCode::out_of_memory, "{}: out of host memory for its workspace", path.name());
  }
}

template <class Args>
core::Problem problem_on(Context& ctx, const Args& args) {
  core::Problem problem = core::validate(args);
  problem.tuning = &ctx.impl().tuning;
  return problem;
}

template <class Args>
RunInfo run(Context& ctx, const Args& args) {
  const core::Problem problem = problem_on(ctx, args);
  ctx.impl().device_allocations = 0;  // per call: a path that refused may have made a handle already
  ctx.impl().ran_member = {};
  const core::Path& path =
      first_accepting(args.options.path, problem, [&](const core::Path& p) { return try_path(ctx, p, problem); });
  const Context::Impl& impl = ctx.impl();
  const std::string_view ran = impl.ran_member.empty() ? path.name() : impl.ran_member;
  return RunInfo{std::string(ran), impl.last_workspace_bytes, impl.device_allocations};
}

// why_not's answer from an attempt: nullopt when the walk found a path, the failure's message when not.
template <class Attempt>
std::optional<std::string> refusal(const std::string& name, const core::Problem& problem, Attempt attempt) {
  try {
    first_accepting(name, problem, attempt);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unsupported) return std::string(e.what());
    throw;
  }
  return std::nullopt;
}

template <class Args>
std::optional<std::string> why_not_on(Context& ctx, const std::string& name, const Args& args) {
  const core::Problem problem = problem_on(ctx, args);
  return refusal(name, problem, [&](const core::Path& p) { return verdict(ctx, p, problem).reason; });
}

template <class Args>
std::size_t workspace_size_on(Context& ctx, const Args& args) {
  core::Problem problem = problem_on(ctx, args);
  problem.workspace.reset();  // the need of the path the call would choose with enough memory
  std::size_t bytes = 0;
  first_accepting(args.options.path, problem, [&](const core::Path& p) {
    core::Verdict v = verdict(ctx, p, problem);
    bytes = v.workspace_bytes;
    return v.reason;
  });
  return bytes;
}

}  // namespace

RunInfo forward(Context& ctx, const ForwardArgs& args) { return run(ctx, args); }
RunInfo backward(Context& ctx, const BackwardArgs& args) { return run(ctx, args); }

std::size_t workspace_size(Context& ctx, const ForwardArgs& args) { return workspace_size_on(ctx, args); }
std::size_t workspace_size(Context& ctx, const BackwardArgs& args) { return workspace_size_on(ctx, args); }

std::optional<std::string> why_not(Context& ctx, const std::string& path, const ForwardArgs& args) {
  return why_not_on(ctx, path, args);
}
std::optional<std::string> why_not(Context& ctx, const std::string& path, const BackwardArgs& args) {
  return why_not_on(ctx, path, args);
}

// Rules only: no context, so nothing is built (the paths' why_not(), with the process's default tuning).
std::optional<std::string> why_not(const std::string& path_name, const ForwardArgs& args) {
  core::Problem problem = core::validate(args);
  problem.tuning = &Tuning::from_environment();
  return refusal(path_name, problem, [&](const core::Path& p) -> std::optional<std::string> {
    if (auto why = reason_before_rules(p, problem)) return why;
    return p.why_not(problem);
  });
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
