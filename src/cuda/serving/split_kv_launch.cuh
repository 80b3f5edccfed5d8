// Launches of the split-KV kernel and its combine for one (dtype, head dim); instantiated by the generated
// translation units (split_kv_instance.cu.in), called through split_kv.h.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "cuda/common/cuda_check.h"
#include "cuda/serving/split_kv.h"
#include "cuda/serving/split_kv_combine.cuh"
#include "cuda/serving/split_kv_kernel.cuh"
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
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  static std::atomic<unsigned long long> checked{0}, sm90_code{0};
  if (plan.dependent_launch && has_sm90_code(kernel, plan.device, checked, sm90_code))
    config.attrs = &overlap, config.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&config, kernel, p), "split-KV kernel: launch");
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
  if (p.splits > 1) launch_split_kv_combine<Element, kHeadDim>(p, plan, stream);
}

}  // namespace attnlab::cuda::serving
