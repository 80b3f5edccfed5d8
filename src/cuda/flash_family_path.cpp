// flash: attnlab's own forward kernels as one path. Two kernel families sit behind it, each also a path of its own
// so that a caller (or the lab, side by side) can force one:
//   flash-sm90  the Hopper-native kernels (cuda/flash_sm90/), compute capability 9.0 only;
//   flash-sm80  the FlashAttention-2-class kernels (cuda/flash/), every GPU of compute capability ≥ 8.0.
// A call runs on flash-sm90 when that family accepts it and on flash-sm80 otherwise, so `flash` supports the union
// of both (the sm_80 family's features — softcap, bias, boolean masks, lengths, f32, more head dims — included).
// Measured on the H200 (docs/perf-notes-flash-sm90.md): where both run, flash-sm90 (s2) is 1.5–1.9× flash-sm80
// at head dim 128 and 2.3–2.9× at 256 (flash-sm80 at tile configuration 2, forced in that process; at its own
// choice it ran 377 TFLOP/s at head dim 128, T = 8k (docs/design.md §5), where flash-sm90 runs 607).
//
// Small calls (a grid that leaves SMs idle, at head dim 64, keys within one tile) run on flash-sm80 even on Hopper:
// there a call is one block's latency, and flash-sm80's small-problem kernel has the shorter one
// (flash_family_rule.h says what was measured).
//
// The tuning fields that name sm_80 configurations (Tuning::flash_config as a tile-configuration index,
// flash_smem_limit) keep their meaning here: a call that sets either runs on flash-sm80, which they describe.
// flash-sm90's kernel versions are chosen on path=flash-sm90.
#include <optional>
#include <string>
#include <string_view>

#include "core/context_impl.h"
#include "core/path.h"
#include "cuda/common/device.h"
#include "cuda/flash_family_rule.h"

namespace attnlab::cuda {

const core::Path& flash_sm80_path();
const core::Path& flash_sm90_path();

namespace {

class FlashFamilyPath final : public core::Path {
 public:
  std::string_view name() const override { return "flash"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "attnlab's own kernels: flash-sm90 where it runs the call (cc 9.0) and the call is not small, flash-sm80 "
           "otherwise";
  }
  std::optional<std::string> unavailable() const override { return cuda_unavailable(); }

  std::optional<std::string> why_not(const core::Problem& p) const override {
    if (sm90_accepts(p)) return std::nullopt;
    return flash_sm80_path().why_not(p);
  }
  core::Verdict plan(Context::Impl& ctx, const core::Problem& p) const override {
    return (sm90_accepts(p) ? flash_sm90_path() : flash_sm80_path()).plan(ctx, p);
  }
  // The member that ran is what RunInfo reports (Context::Impl::ran_member). A small call tries flash-sm80 first,
  // any other call flash-sm90 first; the other member is the fallback. Each member checks the call as it runs it
  // (run_if_able), so a small call is not checked twice on its way to flash-sm80.
  std::optional<std::string> run_if_able(Context::Impl& ctx, const core::Problem& p) const override {
    const bool sm90_allowed = tuning_allows_sm90(p);
    const bool small = sm90_allowed && small_call(p);
    if (sm90_allowed && !small && ran(flash_sm90_path(), ctx, p)) return std::nullopt;
    auto why = flash_sm80_path().run_if_able(ctx, p);
    if (!why) {
      ctx.ran_member = flash_sm80_path().name();
      return std::nullopt;
    }
    if (small && ran(flash_sm90_path(), ctx, p)) return std::nullopt;
    return why;
  }

 private:
  static bool ran(const core::Path& member, Context::Impl& ctx, const core::Problem& p) {
    if (member.run_if_able(ctx, p)) return false;
    ctx.ran_member = member.name();
    return true;
  }
  // Tuning fields that describe sm_80 configurations send the call there (see the top of this file).
  static bool tuning_allows_sm90(const core::Problem& p) {
    return p.tuning->flash_config < 0 && p.tuning->flash_smem_limit < 0;
  }
  static bool small_call(const core::Problem& p) {
    return small_call_runs_sm80(p.dims, [&] { return device_properties(p.device_index).sm_count; });
  }
  // Whether flash-sm90 is the member for the call: allowed by the tuning, not a small call that flash-sm80 takes
  // (one it refuses stays with flash-sm90), and accepted by flash-sm90.
  static bool sm90_accepts(const core::Problem& p) {
    if (!tuning_allows_sm90(p)) return false;
    if (small_call(p) && !flash_sm80_path().why_not(p).has_value()) return false;
    return !flash_sm90_path().why_not(p).has_value();
  }
};

}  // namespace

const core::Path& flash_path() {
  static const FlashFamilyPath path;
  return path;
}

}  // namespace attnlab::cuda
