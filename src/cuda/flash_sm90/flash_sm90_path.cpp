// flash-sm90: attnlab's Hopper-native forward kernel (wgmma, TMA, warp specialization; kernel.cuh), for compute
// capability 9.0 (H100/H200) only. This file is the path: its support rules and the host side of a call. Path
// `flash` runs it wherever these rules accept the call, and the sm_80 family (flash-sm80) otherwise
// (cuda/flash_family_path.cpp).
#include <climits>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "core/context_impl.h"
#include "core/error.h"
#include "core/path.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/call_scratch.h"
#include "cuda/common/device.h"
#include "cuda/common/seqlens.h"
#include "cuda/flash/make_params.h"
#include "cuda/flash_sm90/call_rules.h"
#include "cuda/flash_sm90/launch.h"
#include "cuda/flash_sm90/query_packing.h"
#include "cuda/flash_sm90/tensor_maps.h"
#include "cuda/flash_sm90/traits.h"

namespace attnlab::cuda {
namespace sm90 {

// Tuning::flash_config picks a kernel version (launch.h) for tests and A/B runs; −1 runs the default. s2 and later
// take the row maximum over raw scores, which is the maximum of the scaled ones only for scale > 0: any other
// scale (zero, negative) runs s1, which scales first. A softcapped call runs s1 too, the one version that
// carries the tanh (the others keep their registers and instructions for the plain softmax).
int call_version(const core::Problem& p, bool packed) {
  const int v = p.tuning->flash_config >= 0 ? p.tuning->flash_config : default_version(p, packed);
  return v >= 2 && (!(p.scale > 0.0f) || p.softcap > 0.0f) ? 1 : v;
}

namespace {
// "1 = s1, 2 = s2, …" over the versions that exist (versions.h), so that a refusal names the list as built.
std::string version_list() {
  std::string list;
  for (int v = 0; v < kVersions; ++v)
    if (version_exists(v)) list += fmt::format("{}{} = s{}", list.empty() ? "" : ", ", v, v);
  return list;
}
}  // namespace

std::optional<std::string> call_rules(const core::Problem& p, bool packed) {
  if (p.direction == core::Direction::backward)
    return std::string("forward only; backward runs on path=cudnn or path=cuda-naive");
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return fmt::format("{} inputs unsupported; use f16 or bf16", to_string(p.dtype));
  const auto& d = p.dims;
  if (!has_instance(DType::bf16, 128, 128))
    return std::string("this build has no sm_90a kernels (its CUDA architectures did not include 90a)");
  if (!has_instance(p.dtype, int(d.Hqk), int(d.Hv)))
    return fmt::format("head dims {}/{} unsupported; it has 64, 96, 128, 192, 256 and 192/128 (other head dims "
                       "run on path=flash)",
                       d.Hqk, d.Hv);
  const DeviceProperties& dev = device_properties(p.device_index);
  if (dev.cc_major != 9 || dev.cc_minor != 0)
    return fmt::format("needs compute capability 9.0 (its kernels are sm_90a code; this GPU is {}.{}): use "
                       "path=flash",
                       dev.cc_major, dev.cc_minor);
  // A bias or boolean mask is a (T, S) tensor read per score: the sm_80 family's per-element path carries it.
  if (!p.bias.empty() || !p.bool_mask.empty())
    return std::string("bias and boolean masks run on path=flash-sm80 (path=flash chooses it)");
  if (d.T > INT_MAX / 2 || d.S > INT_MAX / 2) return std::string("T and S must be below 2^30");
  if (d.N > 65535 || d.B > 65535) return std::string("N and B must each be at most 65535 (grid limits)");
  // Packing query heads (query_packing.h) and s6's and s11's 192-row blocks only ever shrink the grid, so the rule is
  // stated for 128-row blocks.
  if (block_count(p, unpacked(128)) >= (std::int64_t(1) << 31))
    return std::string("ceil(T / 128) · N · B must be below 2^31 (the grid's blocks are numbered in 32 bits)");
  if (p.tuning->flash_config >= 0 && !version_exists(p.tuning->flash_config))
    return fmt::format("flash_config = {} names no kernel version (flash-sm90 has {}; s0 was retired, s8, s9, "
                       "s10, s12, s14, s16, s20, s21, s24, s25 and s27 … s31 not kept, 17 … 19, 22 and 23 were probes)",
                       p.tuning->flash_config, version_list());
  if (const int v = call_version(p, packed); !version_built(int(d.Hqk), int(d.Hv), v))
    return fmt::format("flash_config = {} (s{}) is not built at head dims {}/{} ({}; s2 runs them)",
                       v, v, d.Hqk, d.Hv,
                       v == 6 || v == 11    ? "its three consumer warpgroups are built at head dim 64 alone"
                       : v == 7             ? "its 256-key tiles are built at head dim 64 alone"
                       : v == 13            ? "it is built at head dim 256 alone"
                       : v == 15            ? "it is built at head dim 128 alone"
                                            : "it spilled registers there");
  return tensor_map_rule(p);
}

namespace {

constexpr const char* kName = "flash-sm90";

// The call's scratch: per-batch lengths that must be placed on the device (host tensors, strided ones; 2·B int32,
// cuda/common/seqlens.h), then the block counter of s5, s7, s11, s15 and s26 where their CTAs walk several blocks
// (launch.h). 16-byte pieces.
struct ScratchLayout {
  std::size_t counter_offset = 0, bytes = 0;
  bool counter = false;
};
ScratchLayout scratch_layout(const core::Problem& p, int version) {
  ScratchLayout s;
  s.counter_offset = (seqlens_scratch_bytes(p) + 15) / 16 * 16;
  const int sms = device_properties(p.device_index).sm_count;
  const long long blocks = block_count(p, query_packing(p, version));
  s.counter = walks_dynamically(version) && dynamic_walk_needs_counter(blocks, sms);
  s.bytes = s.counter_offset + (s.counter ? 16 : 0);
  return s;
}

class FlashSm90Path final : public core::Path {
 public:
  std::string_view name() const override { return kName; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "attnlab's Hopper kernel (wgmma, TMA, a producer warpgroup and two or three consumer warpgroups); "
           "bf16/f16 forward, head dims 64, 96, 128, 192, 256 and 192/128, causal/window/lengths/softcap, GQA/MQA "
           "(query heads packed per KV head at small T), LSE; cc 9.0";
  }
  std::optional<std::string> unavailable() const override { return cuda_unavailable(); }

  std::optional<std::string> why_not(const core::Problem& p) const override { return call_rules(p); }
  // Scratch: ScratchLayout above.
  core::Verdict plan(Context::Impl& ctx, const core::Problem& p) const override {
    if (auto why = call_rules(p)) return {why, 0};
    const std::size_t bytes = scratch_layout(p, call_version(p)).bytes;
    return {scratch_refusal(ctx, p, bytes, static_cast<cudaStream_t>(ctx.stream)), bytes};
  }

  std::optional<std::string> run_if_able(Context::Impl& ctx, const core::Problem& p) const override {
    if (auto why = call_rules(p)) return why;  // before anything is built, placed or launched
    const auto stream = static_cast<cudaStream_t>(ctx.stream);
    const int v = call_version(p);
    const ScratchLayout layout = scratch_layout(p, v);
    if (p.has_seqlens() || layout.bytes > 0)
      if (auto why = scratch_refusal(ctx, p, layout.bytes, stream)) return why;
    KernelParams params{};
    params.p = flash::make_params(p, *p.tuning);
    apply_query_packing(query_packing(p, v), params);
    build_tensor_maps(p, v, params);
    DeviceGuard guard(p.device_index);
    if (p.has_seqlens() || layout.bytes > 0) {
      // Device lengths of unit stride are read in place (no scratch); others are placed in the call's scratch, in
      // the stream's order (cuda/common/seqlens.h). The walk's counter (s5, s7, s11, s15, s26) starts at zero for every
      // launch.
      ScratchLease scratch(ctx, p, layout.bytes, stream, kName);
      if (p.has_seqlens()) {
        const DeviceSeqlens lengths =
            place_seqlens(p, reinterpret_cast<std::int32_t*>(scratch.data()), stream, kName);
        params.p.q_seqlens = lengths.q;
        params.p.kv_seqlens = lengths.kv;
      }
      if (layout.counter) {
        params.tile_counter = reinterpret_cast<std::int32_t*>(scratch.data() + layout.counter_offset);
        check_cuda(cudaMemsetAsync(params.tile_counter, 0, sizeof(std::int32_t), stream),
                   "flash-sm90: zeroing the block counter");
      }
      launch_forward(p.dtype, int(p.dims.Hqk), int(p.dims.Hv), v, params, p.device_index, stream);
    } else {
      ctx.last_workspace_bytes = 0;
      launch_forward(p.dtype, int(p.dims.Hqk), int(p.dims.Hv), v, params, p.device_index, stream);
    }
    return std::nullopt;
  }

};

}  // namespace
}  // namespace sm90

const core::Path& flash_sm90_path() {
  static const sm90::FlashSm90Path path;
  return path;
}

}  // namespace attnlab::cuda
