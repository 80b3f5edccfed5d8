// Launches of the split-KV kernel and its combine for one (dtype, head dim), or of the kernel in clusters that merge
// their splits, and the question whether a device holds such clusters; instantiated by the generated translation
// units (split_kv_instance.cu.in), called through split_kv.h.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/common/cuda_check.h"
#include "cuda/serving/split_kv.h"
#include "cuda/serving/split_kv_cluster.cuh"
#include "cuda/serving/split_kv_combine.cuh"
#include "cuda/serving/split_kv_kernel.cuh"
#include "cuda/serving/split_kv_splits.h"
#include "cuda/serving/split_kv_traits.h"

namespace attnlab::cuda::serving {

// Whether `kernel` runs code compiled for sm_90 or later on `device` (current): only that code has the
// griddepcontrol instructions that make a programmatic launch safe; a build that JIT-compiles sm_80 PTX on a Hopper
// GPU has none. Asked once per device and kept in `known` / `yes` (bit d for device d % 64).
template <class Kernel>
bool has_sm90_code(Kernel kernel, int device, std::atomic<unsigned long long>& known,
                   std::atomic<unsigned long long>& yes) {
  const unsigned long long bit = 1ull << (device % 64);
  if ((known.load(std::memory_order_acquire) & bit) == 0) {
    cudaFuncAttributes attributes{};
    check_cuda(cudaFuncGetAttributes(&attributes, kernel), "split-KV: kernel attributes");
    // The PTX version, not the binary one: sm_80 PTX JIT-compiled for a Hopper GPU reports binary version 90.
    if (attributes.ptxVersion >= 90) yes.fetch_or(bit, std::memory_order_acq_rel);
    known.fetch_or(bit, std::memory_order_acq_rel);
  }
  return (yes.load(std::memory_order_acquire) & bit) != 0;
}

// The kernel of a plan that merges its splits in clusters: sm_90 code only (split_kv_cluster.cuh), with the
// attributes a launch needs set once per device (shared memory above 48 KB; clusters of 16, a non-portable size).
template <class Traits>
struct SplitKvClusterKernel {
  static constexpr auto kernel() { return split_kv_kernel<Traits, NoPhaseStamps, true>; }

  // False (the runtime's error cleared) where the device refuses an attribute: the plan then keeps the combine.
  static bool prepare(int device) {
    static std::atomic<unsigned long long> prepared{0};
    const unsigned long long bit = 1ull << (device % 64);
    if ((prepared.load(std::memory_order_acquire) & bit) != 0) return true;
    if (cudaFuncSetAttribute(kernel(), cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes) != cudaSuccess ||
        cudaFuncSetAttribute(kernel(), cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    prepared.fetch_or(bit, std::memory_order_acq_rel);
    return true;
  }

  // Whether `device` (current) runs the kernel's sm_90 code and holds at least one cluster of `splits` blocks (the
  // occupancy the runtime reports for it; a runtime error there counts as no). Asked once per device and count.
  static bool fits(int device, int splits) {
    if (splits < 2 || splits > kSplitKvMaxClusterSplits) return false;
    static std::atomic<unsigned long long> checked{0}, sm90_code{0};
    if (!has_sm90_code(kernel(), device, checked, sm90_code)) return false;
    static std::atomic<std::uint32_t> known[64], holds[64];  // bit n: a cluster of n blocks, on device d % 64
    const std::uint32_t bit = 1u << splits;
    std::atomic<std::uint32_t>& k = known[device % 64];
    std::atomic<std::uint32_t>& h = holds[device % 64];
    if ((k.load(std::memory_order_acquire) & bit) == 0) {
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(unsigned(splits));
      config.blockDim = dim3(Traits::kThreads);
      config.dynamicSmemBytes = Traits::kSmemBytes;
      cudaLaunchAttribute cluster{};
      cluster.id = cudaLaunchAttributeClusterDimension;
      cluster.val.clusterDim.x = unsigned(splits), cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
      config.attrs = &cluster, config.numAttrs = 1;
      int clusters = 0;
      if (!prepare(device) || cudaOccupancyMaxActiveClusters(&clusters, kernel(), &config) != cudaSuccess) {
        cudaGetLastError();
        clusters = 0;
      }
      if (clusters > 0) h.fetch_or(bit, std::memory_order_acq_rel);
      k.fetch_or(bit, std::memory_order_acq_rel);
    }
    return (h.load(std::memory_order_acquire) & bit) != 0;
  }
};

// Stamps: NoPhaseStamps for the library, PhaseStamps for tests/split_kv_phases.cu (split_kv_phase_stamps.cuh).
template <class Traits, class Stamps = NoPhaseStamps>
void launch_split_kv_rows(const SplitKvParams& p, const SplitKvPlan& plan, cudaStream_t stream) {
  const auto kernel = split_kv_kernel<Traits, Stamps>;
  // Above 48 KB a kernel must opt in, once per function and device (the runtime call costs a microsecond).
  static std::atomic<unsigned long long> opted_in{0};
  const unsigned long long bit = 1ull << (plan.device % 64);
  if ((opted_in.load(std::memory_order_acquire) & bit) == 0) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes),
               "split-KV kernel: shared memory attribute");
    opted_in.fetch_or(bit, std::memory_order_acq_rel);
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(plan.q_tiles * p.splits), unsigned(p.K), unsigned(p.B));
  config.blockDim = dim3(Traits::kThreads);
  config.dynamicSmemBytes = Traits::kSmemBytes;
  config.stream = stream;
  // From sm_90 on the kernel may be launched while the kernel before it on the stream finishes (programmatic
  // dependent launch): its blocks are placed and set up early and wait on the device (griddepcontrol.wait) before
  // they touch global memory, so a decode step loses no launch gap to the previous step's combine.
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  static std::atomic<unsigned long long> checked{0}, sm90_code{0};
  if (plan.dependent_launch && has_sm90_code(kernel, plan.device, checked, sm90_code))
    config.attrs = attributes, config.numAttrs = 1;
  if (plan.cluster_merge) {
    // The plan asked SplitKvClusterKernel::fits (split_kv.cpp); the phase-stamped build never merges in clusters.
    if constexpr (std::is_same_v<Stamps, NoPhaseStamps> && SplitKvClusterMerge<Traits>::kFits) {
      using Cluster = SplitKvClusterKernel<Traits>;  // prepared by fits()
      attributes[1].id = cudaLaunchAttributeClusterDimension;
      attributes[1].val.clusterDim.x = unsigned(p.splits), attributes[1].val.clusterDim.y = 1;
      attributes[1].val.clusterDim.z = 1;
      config.attrs = attributes, config.numAttrs = 2;  // the cluster implies sm_90 code: dependent launch too
      check_cuda(cudaLaunchKernelEx(&config, Cluster::kernel(), p), "split-KV cluster kernel: launch");
      return;
    } else {
      core::fail(ErrorCode::internal, "split-KV: a plan merging in clusters reached an instance without them");
    }
  }
  check_cuda(cudaLaunchKernelEx(&config, kernel, p), "split-KV kernel: launch");
}

// Whether the plan may merge `splits` in clusters at `row_warps` warps of rows (split_kv.h).
template <class Element, int kHeadDim>
bool split_kv_clusters_fit(int device, int row_warps, int splits) {
  auto fits = [&](auto traits) {
    using Traits = decltype(traits);
    if constexpr (SplitKvClusterMerge<Traits>::kFits)
      return SplitKvClusterKernel<Traits>::fits(device, splits);
    else
      return false;
  };
  switch (row_warps) {
    case 1: return fits(SplitKvTraits<Element, kHeadDim, 1>{});
    case 2: return fits(SplitKvTraits<Element, kHeadDim, 2>{});
    default: return fits(SplitKvTraits<Element, kHeadDim, 4>{});
  }
}

// The combine of a call with p.splits > 1.
template <class Element, int kHeadDim, class Stamps = NoPhaseStamps>
void launch_split_kv_combine(const SplitKvParams& p, const SplitKvPlan& plan, cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(p.total_q), unsigned(p.N));  // a block per (query row, head)
  config.blockDim = dim3(kCombineThreads);
  config.stream = stream;
  // From sm_90 on, the combine is launched while the split kernel still runs (programmatic dependent launch) and
  // waits for it on the device (griddepcontrol.wait), so that no launch gap sits between the two.
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  const auto combine = split_kv_combine_kernel<Element, kHeadDim, Stamps>;
  static std::atomic<unsigned long long> checked{0}, sm90_code{0};
  if (plan.dependent_launch && has_sm90_code(combine, plan.device, checked, sm90_code))
    config.attrs = &overlap, config.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&config, combine, p), "split-KV combine: launch");
}

template <class Element, int kHeadDim>
void launch_split_kv(const SplitKvParams& p, const SplitKvPlan& plan, cudaStream_t stream) {
  switch (plan.row_warps) {
    case 1: launch_split_kv_rows<SplitKvTraits<Element, kHeadDim, 1>>(p, plan, stream); break;
    case 2: launch_split_kv_rows<SplitKvTraits<Element, kHeadDim, 2>>(p, plan, stream); break;
    default: launch_split_kv_rows<SplitKvTraits<Element, kHeadDim, 4>>(p, plan, stream); break;
  }
  if (p.splits > 1 && !plan.cluster_merge) launch_split_kv_combine<Element, kHeadDim>(p, plan, stream);
}

}  // namespace attnlab::cuda::serving
