// Per-batch sequence lengths where a kernel can read them: device tensors with unit stride are used in place,
// anything else (host tensors, strided device tensors) is copied into caller-provided device scratch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/problem.h"

namespace attnlab::cuda {

struct DeviceSeqlens {
  const std::int32_t* q = nullptr;   // null: every batch has T queries
  const std::int32_t* kv = nullptr;  // null: every batch has S keys
};

// `scratch` holds 2·B int32 on the device. Host lengths are copied synchronously (their memory is the caller's
// and may not outlive the call).
DeviceSeqlens place_seqlens(const core::Problem& p, std::int32_t* scratch, cudaStream_t stream, const char* who);

}  // namespace attnlab::cuda
