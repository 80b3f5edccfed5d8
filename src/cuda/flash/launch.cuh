// The definition of launch_forward<Element, Hqk, Hv>, included only by the generated instance files.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "cuda/flash/flash_kernel.cuh"
#include "cuda/flash/launch.h"
#include "cuda/flash/tile_configs.h"

namespace attnlab::cuda::flash {

// One kernel per (configuration, modifiers); the opt-in to more than 48 KB of shared memory is a per-device
// attribute, set once per device (a bit per device in `opted_in`).
template <class Traits, bool kModifiers>
bool launch_with(const FlashParams& p, cudaStream_t stream, bool launch) {
  if (!launch) return true;
  const auto kernel = flash_forward_kernel<Traits, kModifiers>;
  if constexpr (Traits::kSmemBytes > 48 * 1024) {
    static std::atomic<unsigned long long> opted_in{0};
    int device = 0;
    check_cuda(cudaGetDevice(&device), "flash: cudaGetDevice");
    const unsigned long long bit = device < 64 ? 1ull << device : 0;
    if (bit == 0 || (opted_in.load(std::memory_order_relaxed) & bit) == 0) {
      check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes),
                 "flash: cudaFuncSetAttribute");
      opted_in.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  const dim3 grid((p.T + Traits::kBlockM - 1) / Traits::kBlockM, p.N, p.B);
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(p);
  check_cuda(cudaGetLastError(), "flash: kernel launch");
  return true;
}

// The first configuration that fits smem_bytes, or with pick ≥ 0 the pick-th of the list (when it fits).
template <bool kModifiers, class Traits, class... Rest>
bool launch_first_fitting(TypeList<Traits, Rest...>, const FlashParams& p, std::size_t smem_bytes, int pick,
                          cudaStream_t stream, bool launch) {
  if (std::size_t(Traits::kSmemBytes) <= smem_bytes && pick <= 0)
    return launch_with<Traits, kModifiers>(p, stream, launch);
  if constexpr (sizeof...(Rest) > 0)
    return launch_first_fitting<kModifiers>(TypeList<Rest...>{}, p, smem_bytes, pick - 1, stream, launch);
  else
    return false;
}
template <bool kModifiers>
bool launch_first_fitting(TypeList<>, const FlashParams&, std::size_t, int, cudaStream_t, bool) {
  return false;
}

// Configs::SmallList where the head dims have one (tile_configs.h), else an empty list.
template <class Configs, class = void>
struct SmallProblemList {
  using type = TypeList<>;
};
template <class Configs>
struct SmallProblemList<Configs, std::void_t<typename Configs::SmallList>> {
  using type = typename Configs::SmallList;
};

// Fewer blocks than SMs with the list's first (largest) query block: the GPU is mostly idle and the call's time
// is one block's latency, which smaller blocks shorten.
template <class Traits, class... Rest>
bool leaves_sms_idle(TypeList<Traits, Rest...>, const FlashParams& p, int sm_count) {
  const std::int64_t m_blocks = (std::int64_t(p.T) + Traits::kBlockM - 1) / Traits::kBlockM;
  return m_blocks * p.N * p.B < sm_count;
}

// One kind of call (with or without score modifiers): the small-problem list when the grid would leave SMs idle
// and no configuration is forced, else the call's list.
template <bool kModifiers, class Configs>
bool launch_from_lists(const FlashParams& params, const LaunchLimits& limits, cudaStream_t stream, bool launch) {
  using Small = typename SmallProblemList<Configs>::type;
  using List = std::conditional_t<kModifiers, typename Configs::ModifierList, typename Configs::List>;
  if (limits.pick < 0 && leaves_sms_idle(typename Configs::List{}, params, limits.sm_count) &&
      launch_first_fitting<kModifiers>(Small{}, params, limits.smem_bytes, -1, stream, launch))
    return true;
  return launch_first_fitting<kModifiers>(List{}, params, limits.smem_bytes, limits.pick, stream, launch);
}

template <class Element, int kHeadQK, int kHeadV>
bool launch_forward(const FlashParams& params, const LaunchLimits& limits, cudaStream_t stream, bool launch) {
  using Configs = TileConfigs<Element, kHeadQK, kHeadV>;
  const bool modified = params.softcap > 0.0f || params.bias != nullptr || params.bool_mask != nullptr;
  return modified ? launch_from_lists<true, Configs>(params, limits, stream, launch)
                  : launch_from_lists<false, Configs>(params, limits, stream, launch);
}

}  // namespace attnlab::cuda::flash
