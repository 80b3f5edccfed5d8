// The definition of launch_forward<Element, Hqk, Hv>, included only by the generated instance files.
#pragma once

#include <atomic>

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

// The first configuration that fits smem_limit, or with pick ≥ 0 the pick-th of the list (when it fits).
template <bool kModifiers, class Traits, class... Rest>
bool launch_first_fitting(TypeList<Traits, Rest...>, const FlashParams& p, std::size_t smem_limit, int pick,
                                  cudaStream_t stream, bool launch) {
  if (std::size_t(Traits::kSmemBytes) <= smem_limit && pick <= 0)
    return launch_with<Traits, kModifiers>(p, stream, launch);
  if constexpr (sizeof...(Rest) > 0)
    return launch_first_fitting<kModifiers>(TypeList<Rest...>{}, p, smem_limit, pick - 1, stream, launch);
  else
    return false;
}

template <class Element, int kHeadQK, int kHeadV>
bool launch_forward(const FlashParams& params, std::size_t smem_limit, int pick, cudaStream_t stream,
                            bool launch) {
  using Configs = TileConfigs<Element, kHeadQK, kHeadV>;
  if (params.softcap > 0.0f || params.bias != nullptr || params.bool_mask != nullptr)
    return launch_first_fitting<true>(typename Configs::ModifierList{}, params, smem_limit, pick, stream, launch);
  return launch_first_fitting<false>(typename Configs::List{}, params, smem_limit, pick, stream, launch);
}

}  // namespace attnlab::cuda::flash
