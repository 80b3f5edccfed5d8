// flash-sm80: attnlab's own fused forward kernels for sm_80 and newer (FlashAttention-2 class: Q block per thread
// block, K/V tiles streamed through shared memory with cp.async, mma.sync tensor cores, online softmax in
// registers). This file is the path: its support rules and the host side of a call. The kernel is in
// flash_kernel.cuh and the files it includes. Path `flash` runs this family wherever flash-sm90 does not take the
// call (cuda/flash_family_path.cpp).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "core/context_impl.h"
#include "core/error.h"
#include "core/path.h"
#include "cuda/common/call_scratch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"
#include "cuda/common/score_modifier.h"
#include "cuda/common/seqlens.h"
#include "cuda/flash/launch.h"
#include "cuda/flash/make_params.h"

namespace attnlab::cuda {
namespace flash {
namespace {

constexpr const char* kName = "flash-sm80";
constexpr const char* kHeadDims = "32, 64, 96, 128, 192, 256 and 192/128";

// The tuning fields (attention.h, README) flash reads, from the call's context:
//   flash_smem_limit lowers the shared memory a launch may use, so that the configurations meant for smaller GPUs
//     (≤ 99 KB on sm_86/sm_89) run and are tested on large ones;
//   flash_config (an index into tile_configs.h's list) times or tests one configuration alone;
//   flash_section_heads sets the scheduler's section size (make_params.cpp).
// What a launch may use: the device's shared memory (or the tuning limit below it), its SM count, and the
// configuration index when one is forced.
LaunchLimits launch_limits(int device, const Tuning& tuning) {
  const DeviceProperties& dev = device_properties(device);
  LaunchLimits t;
  t.smem = {dev.shared_memory_per_block_optin, dev.shared_memory_per_sm};
  t.sm_count = dev.sm_count;
  // A lowered limit stands for a smaller GPU, whose SM holds one such block (every sm_80+ GPU offers a block its
  // SM's shared memory less the 1 KB the driver reserves: 163 / 164 KB on an A100, 99 / 100 KB on sm_86/89).
  if (tuning.flash_smem_limit >= 0 && std::size_t(tuning.flash_smem_limit) < t.smem.per_block) {
    t.smem.per_block = std::size_t(tuning.flash_smem_limit);
    t.smem.per_sm = std::min(t.smem.per_sm, t.smem.per_block + kSmemReservedPerBlock);
  }
  t.pick = tuning.flash_config;
  t.device = device;
  return t;
}

// The kernel moves rows with 16-byte cp.async loads and 16-byte stores.
std::optional<std::string> layout_rule(const char* name, const TensorView& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return fmt::format("{}.data must be 16-byte aligned", name);
  // Within a tile, row offsets are 32-bit (smem_tile.cuh): 128 rows of the largest stride must stay below 2^31.
  if (t.strides[1] >= (std::int64_t(1) << 24))
    return fmt::format("{}.strides[1] = {} must be below 2^24 elements", name, t.strides[1]);
  const std::int64_t per_16_bytes = 16 / std::int64_t(size_of(t.dtype));
  for (int d = 0; d < 3; ++d)
    if (t.shape[d] > 1 && t.strides[d] % per_16_bytes != 0)
      return fmt::format("{}.strides[{}] = {} must be a multiple of {} elements (16 bytes)", name, d, t.strides[d],
                         per_16_bytes);
  return std::nullopt;
}

class FlashPath final : public core::Path {
 public:
  std::string_view name() const override { return kName; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return fmt::format("attnlab's fused kernel (mma.sync, cp.async, online softmax); bf16/f16 (and f32 as "
                       "3xTF32 up to head dim 192) forward, head dims "
                       "{}, causal/window/lengths/softcap/bias, GQA/MQA; cc ≥ 8.0",
                       kHeadDims);
  }
  std::optional<std::string> unavailable() const override { return cuda_unavailable(); }

  std::optional<std::string> why_not(const core::Problem& p) const override {
    Plan plan;
    return plan_call(p, plan);
  }
  core::Verdict plan(Context::Impl& ctx, const core::Problem& p) const override {
    Plan plan;
    if (auto why = plan_call(p, plan)) return {why, 0};
    const std::size_t bytes = seqlens_scratch_bytes(p);
    return {scratch_refusal(ctx, p, bytes, static_cast<cudaStream_t>(ctx.stream)), bytes};
  }

  // The checks and the launch in one pass: the limits and the kernel's parameters once per call. On the codelab's
  // shape a call's host time is the launch plus this work (docs/perf-notes-flash-sm80.md, the default shape).
  std::optional<std::string> run_if_able(Context::Impl& ctx, const core::Problem& p) const override {
    Plan plan;
    if (auto why = plan_call(p, plan)) return why;  // before anything is placed or launched
    if (p.has_seqlens())
      if (auto why = scratch_refusal(ctx, p, seqlens_scratch_bytes(p), static_cast<cudaStream_t>(ctx.stream)))
        return why;
    launch(ctx, p, plan);
    return std::nullopt;
  }

 private:
  // The support rules that need neither the tuning variables nor the tile lists.
  static std::optional<std::string> rules(const core::Problem& p) {
    if (p.direction == core::Direction::backward)
      return std::string("forward only; backward runs on path=cudnn or path=cuda-naive");
    if (p.dtype != DType::f16 && p.dtype != DType::bf16 && p.dtype != DType::f32)
      return fmt::format("{} inputs unsupported; use f32, f16 or bf16 (FP8 runs on path=cudnn)", to_string(p.dtype));
    const auto& d = p.dims;
    if (!has_instance(DType::bf16, int(d.Hqk), int(d.Hv)))
      return fmt::format("head dims {}/{} unsupported; it has {}", d.Hqk, d.Hv, kHeadDims);
    if (!has_instance(p.dtype, int(d.Hqk), int(d.Hv)))
      return fmt::format("f32 inputs at head dim {} unsupported (its accumulators do not fit the registers next to "
                         "the 3xTF32 splits); use bf16/f16 or path=cuda-naive",
                         d.Hqk);
    const DeviceProperties& dev = device_properties(p.device_index);
    if (dev.cc_major < 8)
      return fmt::format("needs compute capability ≥ 8.0 (this GPU is {}.{})", dev.cc_major, dev.cc_minor);
    if (d.T > INT_MAX / 2 || d.S > INT_MAX / 2) return std::string("T and S must be below 2^30");
    if (d.N > 65535 || d.B > 65535) return std::string("N and B must each be at most 65535 (grid limits)");
    if ((d.T + 31) / 32 * d.N * d.B >= (std::int64_t(1) << 31))
      return std::string("ceil(T / 32) · N · B must be below 2^31 (the grid's blocks are numbered in 32 bits)");
    const std::pair<const char*, const TensorView*> views[] = {{"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"o", &p.o}};
    for (auto [name, t] : views)
      if (auto why = layout_rule(name, *t)) return why;
    return std::nullopt;
  }

  // What a launch needs, worked out once per call: the kernel's parameters and the launch limits.
  struct Plan {
    FlashParams params;
    LaunchLimits limits;
  };

  // The call's reason against flash, or nullopt with `plan` filled: the rules, then whether a tile configuration
  // fits the limits (nothing is placed or launched).
  static std::optional<std::string> plan_call(const core::Problem& p, Plan& plan) {
    if (auto why = rules(p)) return why;
    plan.limits = launch_limits(p.device_index, *p.tuning);
    plan.params = make_params(p, *p.tuning);
    if (launch_forward(p.dtype, int(p.dims.Hqk), int(p.dims.Hv), plan.params, plan.limits, nullptr, false))
      return std::nullopt;
    return fmt::format("no tile configuration fits {} bytes of shared memory{}", plan.limits.smem.per_block,
                       plan.limits.pick >= 0 ? fmt::format(" as configuration {}", plan.limits.pick) : "");
  }

  // Places the per-batch lengths (if any) in the call's scratch and launches the planned configuration.
  static void launch(Context::Impl& ctx, const core::Problem& p, Plan plan) {
    DeviceGuard guard(p.device_index);
    auto stream = static_cast<cudaStream_t>(ctx.stream);
    if (p.has_seqlens()) {
      ScratchLease scratch(ctx, p, seqlens_scratch_bytes(p), stream, kName);
      const DeviceSeqlens lengths =
          place_seqlens(p, reinterpret_cast<std::int32_t*>(scratch.data()), stream, kName);
      plan.params.q_seqlens = lengths.q;
      plan.params.kv_seqlens = lengths.kv;
      launch_planned(p, plan, stream);
    } else {
      ctx.last_workspace_bytes = 0;
      launch_planned(p, plan, stream);
    }
  }
  // plan_call() chose with these limits, so a configuration fits.
  static void launch_planned(const core::Problem& p, const Plan& plan, cudaStream_t stream) {
    if (!launch_forward(p.dtype, int(p.dims.Hqk), int(p.dims.Hv), plan.params, plan.limits, stream, true))
      core::fail(ErrorCode::internal, "flash: the planned tile configuration no longer fits");
  }
};

}  // namespace
}  // namespace flash

const core::Path& flash_sm80_path() {
  static const flash::FlashPath path;
  return path;
}

}  // namespace attnlab::cuda
