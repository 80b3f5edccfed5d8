// Random FP8 test tensors, quantized as a recipe quantizes a tensor: scale = fp8_max / amax (so the largest code
// is the format's largest finite value), codes = fp8(x · scale), descale = 1 / scale. `magnitude` varies the
// tensor's range, hence its descale. Shared by the CPU reference tests and the GPU FP8 tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/fp8.h"
#include "test_support.h"

namespace attnlab_test {

void random_fp8_codes(Rng& rng, std::size_t count, double magnitude, attnlab::core::Fp8Format format,
                      std::vector<std::uint8_t>& codes, float& descale);

}  // namespace attnlab_test
