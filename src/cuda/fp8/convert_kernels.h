// The GPU side of attnlab::quantize / dequantize (include/attnlab/fp8.h): one grid-stride kernel per call on the
// context's stream, rounding through src/core/fp8.h so that the GPU writes the very bytes the CPU loop writes.
// The views arrive validated (src/core/fp8_convert.cpp).
#pragma once

#include "attnlab/attention.h"

namespace attnlab::cuda::fp8 {

// out = fp8(in · *scale); *amax = max |in| when amax is not null (cudaMemsetAsync to 0, then atomicMax on the
// float's bits). `stream` is a cudaStream_t (nullptr: the legacy default stream); the device is switched to the
// views' for the launch and back. Nothing is allocated or synchronized.
void quantize(const TensorView& in, const TensorView& out, const float* scale, float* amax, void* stream);
// out = float(in) · *scale_inv, rounded to out's dtype.
void dequantize(const TensorView& in, const TensorView& out, const float* scale_inv, void* stream);

}  // namespace attnlab::cuda::fp8
