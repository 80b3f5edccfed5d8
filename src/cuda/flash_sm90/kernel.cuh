// attnlab's sm_90a flash forward kernel: warp-specialized (one producer warpgroup issuing TMA, two consumer warpgroups
// running wgmma and the softmax, three in s6 and s11), K/V in a two-slot mbarrier pipeline, O out through shared memory
// and a TMA store; s3, s5, s7, s11, s15, s26, s29, s30 and s31 persistent (one CTA per SM walking the blocks). Its parts:
// scheduler.cuh (which block), pipeline.cuh (the slots), mainloop.cuh (both roles), softmax.cuh, epilogue.cuh; ptx.cuh
// and gmma.cuh have the instructions. Compiled for sm_90a only (wgmma and setmaxnreg exist there alone); on any other
// architecture the kernel body is empty and the path never launches it (flash_sm90_path.cpp).
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

  const int warpgroup = int(threadIdx.x) / 128;
  const flash::FlashParams& p = kp.p;
  if (warpgroup == 0) {
    ptx::registers_decrease<Traits::kProducerRegisters>();
    if (threadIdx.x != 0) return;
    ptx::prefetch_tensor_map(&kp.q);
    ptx::prefetch_tensor_map(&kp.k);
    ptx::prefetch_tensor_map(&kp.v);
    if constexpr (Traits::kDynamicWalk) {
      // The list's size and shape are recomputed from the parameters (constant bank) where they are used: the
      // producer runs on few registers (traits.h, kProducerRegisters).
      std::uint32_t step0 = 0, i = 0;
      for (unsigned item = blockIdx.x;; ++i) {
        DynamicWalk::publish(pipe, i, item);
        if (item >= TileWalk::count(kp)) break;
        // s31 (Traits::kFetchAhead): the claim goes out before this block's loads, its answer first used after them.
        unsigned claim = 0;
        if constexpr (Traits::kFetchAhead) claim = DynamicWalk::claim(kp.tile_counter);
        const BlockWork w = block_work<Traits>(kp, flash::coord_of(p, item, TileWalk::m_blocks(kp)));
        produce<Traits>(kp, pipe, smem, w, BlockSchedule{step0, i & 1u, i == 0, false});
        step0 += std::uint32_t(w.tiles());
        if constexpr (Traits::kFetchAhead)
          item = DynamicWalk::claimed_item(kp.tile_counter, claim, TileWalk::count(kp));
        else
          item = DynamicWalk::next(kp.tile_counter, TileWalk::count(kp));
      }
    } else if constexpr (Traits::kPersistent) {
      std::uint32_t step0 = 0, i = 0;
      for (TileWalk walk; !walk.done(kp); walk.advance(), ++i) {
        const BlockWork w = block_work<Traits>(kp, walk.coord(kp));
        produce<Traits>(kp, pipe, smem, w, BlockSchedule{step0, i & 1u, i == 0, walk.last(kp)});
        step0 += std::uint32_t(w.tiles());
      }
    } else {
      produce<Traits>(kp, pipe, smem, block_work<Traits>(kp, flash::block_coord(p)), BlockSchedule{});
    }
    return;
  }
  ptx::registers_increase<Traits::kConsumerRegisters>();
  const int consumer = warpgroup - 1, warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32;
  // One block: O from zero, the softmax state fresh, the main loop, the epilogue.
  auto run_block = [&](const BlockWork& w, const BlockSchedule& at) {
    float o[Traits::kORegs];
#pragma unroll
    for (int i = 0; i < Traits::kORegs; ++i) o[i] = 0.0f;
    OnlineSoftmax softmax;
    softmax.init();
    consume_overlapped<Traits>(kp, pipe, smem, w, at, consumer, warp, lane, o, softmax);
    store_output<Traits>(kp, smem, pipe.q_empty(), smem_generic, w, consumer, warp, lane, o, softmax);
  };
  if constexpr (Traits::kDynamicWalk) {
    std::uint32_t step0 = 0;
    for (std::uint32_t i = 0;; ++i) {
      const unsigned item = DynamicWalk::take(pipe, i, lane);
      if (item >= TileWalk::count(kp)) break;
      const BlockWork w = block_work<Traits>(kp, flash::coord_of(p, item, TileWalk::m_blocks(kp)));
      const BlockSchedule at{step0, i & 1u, i == 0, false};
      step0 += std::uint32_t(w.tiles());
      run_block(w, at);
    }
    MmaTurns<Traits::kConsumers>::drain(consumer);
    finish_output_stores<Traits>(warp, lane);
  } else if constexpr (Traits::kPersistent) {
    // Only the walk's position, the block count and the pipeline step stay live across a block (the schedule's
    // other fields follow from them): at head dim 256 O leaves the consumers no register to spare.
    std::uint32_t step0 = 0, i = 0;
    for (TileWalk walk; !walk.done(kp); walk.advance(), ++i) {
      const BlockWork w = block_work<Traits>(kp, walk.coord(kp));
      const BlockSchedule at{step0, i & 1u, i == 0, walk.last(kp)};
      step0 += std::uint32_t(w.tiles());
      run_block(w, at);
    }
  } else {
    run_block(block_work<Traits>(kp, flash::block_coord(p)), BlockSchedule{});
  }
#endif
}

}  // namespace attnlab::cuda::sm90
