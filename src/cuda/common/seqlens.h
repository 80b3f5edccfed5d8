// Per-batch sequence lengths where a kernel can read them: device tensors with unit stride are used in place,
// anything else (host tensors, strided device tensors) is placed in the call's scratch, in the stream's order.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/problem.h"

namespace attnlab::cuda {

struct DeviceSeqlens {
  const std::int32_t* q = nullptr;   // null: every batch has T queries
  const std::int32_t* kv = nullptr;  // null: every batch has S keys
};

// Scratch bytes place_seqlens() needs for `p`: 2·B int32 when some lengths must be placed, else 0.
std::size_t seqlens_scratch_bytes(const core::Problem& p);

// Host lengths travel through stage_words() (staging.h): no host wait, and the caller may rewrite its buffer as
// soon as the call returns. Strided device lengths are gathered by a device-to-device copy on the stream.
// `scratch` holds seqlens_scratch_bytes(p) bytes of device memory (unused when that is 0).
DeviceSeqlens place_seqlens(const core::Problem& p, std::int32_t* scratch, cudaStream_t stream, const char* who);

}  // namespace attnlab::cuda
