// The launch of one sm_90a instantiation (included by the generated instance files only).
#pragma once

#include <algorithm>
#include <atomic>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"
#include "cuda/flash_sm90/kernel.cuh"
#include "cuda/flash_sm90/launch.h"
#include "cuda/flash_sm90/traits.h"

namespace attnlab::cuda::sm90 {

template <class Element, int kHeadQK, int kHeadV, int kVersion>
void launch_forward(const KernelParams& params, int device, cudaStream_t stream) {
  using T = Traits<Element, kHeadQK, kHeadV, kVersion>;
  auto kernel = forward_kernel<T>;
  // More than 48 KB of dynamic shared memory needs the function's opt-in, which is per device: set once per
  // device (a bit per device), not per call.
  static std::atomic<unsigned long long> opted_in{0};
  const unsigned long long bit = 1ull << (device % 64);
  if ((opted_in.load(std::memory_order_acquire) & bit) == 0) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemAllocation),
               "flash-sm90: cudaFuncSetAttribute");
    opted_in.fetch_or(bit, std::memory_order_acq_rel);
  }
  const flash::FlashParams& p = params.p;
  // Position blocks of pack_rows rows (the version's T::kBlockM, or the packed heads' positions: query_packing.h),
  // heads (packed heads), batches.
  dim3 grid((p.T + params.pack_rows - 1) / params.pack_rows, p.N, p.B);
  if constexpr (T::kPersistent) {
    // A 1-D grid of one CTA per SM (a CTA fills an SM's shared memory), none idle: at most one per block. s5
    // without its counter: one CTA per block (launch.h, dynamic_walk_needs_counter).
    const long long blocks = (long long)grid.x * grid.y * grid.z;
    grid = dim3(unsigned(T::kDynamicWalk && params.tile_counter == nullptr
                             ? blocks
                             : std::min<long long>(blocks, device_properties(device).sm_count)),
                1, 1);
  }
  kernel<<<grid, T::kThreads, T::kSmemAllocation, stream>>>(params);
  check_cuda(cudaGetLastError(), "flash-sm90: kernel launch");
}

}  // namespace attnlab::cuda::sm90
