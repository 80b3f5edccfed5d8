#include "fp8_random.h"

#include <algorithm>
#include <cmath>

namespace attnlab_test {

void random_fp8_codes(Rng& rng, std::size_t count, double magnitude, attnlab::core::Fp8Format format,
                      std::vector<std::uint8_t>& codes, float& descale) {
  std::vector<double> x(count);
  double amax = 0;
  for (double& e : x) {
    e = rng.value() * magnitude;
    amax = std::max(amax, std::fabs(e));
  }
  const float scale = amax > 0 ? float(double(attnlab::core::fp8_max(format)) / amax) : 1.0f;
  codes.resize(count);
  for (std::size_t i = 0; i < count; ++i) codes[i] = attnlab::core::float_to_fp8(float(x[i]) * scale, format);
  descale = 1.0f / scale;
}

}  // namespace attnlab_test
