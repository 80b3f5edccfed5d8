// What one sm_90a flash launch receives: the shared flash parameters (cuda/flash/flash_params.h: strides, mask,
// scale, LSE) and one TMA tensor map per tensor, built on the host for this call (launch.cu). The kernel takes the
// struct as a __grid_constant__ parameter, so the maps are read from parameter space by the TMA unit.
#pragma once

#include <cuda.h>

#include "cuda/flash/flash_params.h"

namespace attnlab::cuda::sm90 {

struct KernelParams {
  flash::FlashParams p;
  // 4-D maps over (head dim, sequence, heads, batches), boxes of one swizzled row's columns (64 of 128 bytes, or
  // 32 of 64 bytes at head dim 96: traits.h) × 128 rows for Q, a key tile's rows for K and V and 64 rows for O
  // (one consumer warpgroup's rows).
  CUtensorMap q, k, v, o;
};

}  // namespace attnlab::cuda::sm90
