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
void launch_with(const FlashParams& p, int device, cudaStream_t stream) {
  const auto kernel = flash_forward_kernel<Traits, kModifiers>;
  if constexpr (Traits::kSmemBytes > 48 * 1024) {
    static std::atomic<unsigned long long> opted_in{0};
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
}

// Launches the index-th configuration of the list (config_choice.h chose it).
template <bool kModifiers, class Traits, class... Rest>
void launch_index(TypeList<Traits, Rest...>, int index, const FlashParams& p, int device, cudaStream_t stream) {
  if (index == 0) {
    launch_with<Traits, kModifiers>(p, device, stream);
  } else if constexpr (sizeof...(Rest) > 0) {
    launch_index<kModifiers>(TypeList<Rest...>{}, index - 1, p, device, stream);
  }
}

template <bool kModifiers>
void launch_index(TypeList<>, int, const FlashParams&, int, cudaStream_t) {}

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
  if (limits.pick < 0 && leaves_sms_idle(typename Configs::List{}, params, limits.sm_count)) {
    if (const int small = choose_config(Small{}, limits.smem, -1); small >= 0) {
      if (launch) launch_index<kModifiers>(Small{}, small, params, limits.device, stream);
      return true;
    }
  }
  const int index = choose_config(List{}, limits.smem, limits.pick);
  if (index < 0) return false;
  if (launch) launch_index<kModifiers>(List{}, index, params, limits.device, stream);
  return true;
}

template <class Element, int kHeadQK, int kHeadV>
bool launch_forward(const FlashParams& params, const LaunchLimits& limits, cudaStream_t stream, bool launch) {
  using Configs = TileConfigs<Element, kHeadQK, kHeadV>;
  const bool modified = params.softcap > 0.0f || params.bias != nullptr || params.bool_mask != nullptr;
  return modified ? launch_from_lists<true, Configs>(params, limits, stream, launch)
                  : launch_from_lists<false, Configs>(params, limits, stream, launch);
}

}  // namespace attnlab::cuda::flash
