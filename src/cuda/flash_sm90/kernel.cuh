// attnlab's sm_90a flash forward kernel: warp-specialized (one producer warpgroup issuing TMA, two consumer
// warpgroups running wgmma and the softmax), K/V in a two-slot mbarrier pipeline, O out through shared memory and
// a TMA store. Its parts: scheduler.cuh (which block), pipeline.cuh (the slots), mainloop.cuh (both roles),
// softmax.cuh, epilogue.cuh; ptx.cuh has the instructions. Compiled for sm_90a only (wgmma and setmaxnreg exist
// there alone); on any other architecture the kernel body is empty and the path never launches it
// (flash_sm90_path.cpp).
#pragma once

#include <cstdint>

#include "cuda/flash_sm90/epilogue.cuh"
#include "cuda/flash_sm90/mainloop.cuh"
#include "cuda/flash_sm90/params.h"
#include "cuda/flash_sm90/pipeline.cuh"
#include "cuda/flash_sm90/ptx.cuh"
#include "cuda/flash_sm90/scheduler.cuh"

namespace attnlab::cuda::sm90 {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) forward_kernel(const __grid_constant__ KernelParams kp) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t raw = ptx::smem_address(smem_raw);
  const std::uint32_t smem = (raw + 1023u) & ~1023u;
  unsigned char* smem_generic = smem_raw + (smem - raw);
  const Pipeline<Traits> pipe{smem + Traits::kBarrierOffset};
  if (threadIdx.x == 0) pipe.init();
  __syncthreads();

  const BlockWork w = block_work<Traits>(kp.p);
  const int warpgroup = int(threadIdx.x) / 128;
  if (warpgroup == 0) {
    ptx::registers_decrease<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) produce<Traits>(kp, pipe, smem, w);
    return;
  }
  ptx::registers_increase<Traits::kConsumerRegisters>();
  const int consumer = warpgroup - 1, warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32;
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  OnlineSoftmax softmax;
  softmax.init();
  if constexpr (Traits::kVersion == 0)
    consume_serial<Traits>(kp, pipe, smem, w, consumer, warp, lane, o, softmax);
  else
    consume_overlapped<Traits>(kp, pipe, smem, w, consumer, warp, lane, o, softmax);
  store_output<Traits>(kp, smem, smem_generic, w, consumer, warp, lane, o, softmax);
#endif
}

}  // namespace attnlab::cuda::sm90
