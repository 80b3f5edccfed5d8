// The parameters every flash kernel family receives (flash_params.h), built on the host from a validated problem:
// pointers, strides, mask, scale, score modifiers and the scheduler's section size. Shared by the sm_80 family
// (flash_path.cpp) and the sm_90a one (cuda/flash_sm90/flash_sm90_path.cpp). The per-batch length pointers are
// left null: each path fills them where it places the lengths.
#pragma once

#include "attnlab/attention.h"
#include "core/problem.h"
#include "cuda/flash/flash_params.h"

namespace attnlab::cuda::flash {

FlashParams make_params(const core::Problem& p, const Tuning& tuning);

}  // namespace attnlab::cuda::flash
