#include "fp8_bound.h"

#include <algorithm>
#include <cmath>

namespace attnlab_test::fp8ref {

std::vector<double> o_bound(const Problem& p) {
  ref::Problem abs_v = decoded(p);
  for (double& e : abs_v.v) e = std::fabs(e);
  const std::vector<double> pv = ref::forward(abs_v).o;  // Σ_j p_j |v_j| (0 for rows without keys)
  std::vector<double> bound(pv.size());
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t n = 0; n < p.N; ++n)
      for (std::int64_t i = 0; i < p.T; ++i)
        for (std::int64_t h = 0; h < p.Hv; ++h) {
          double vsum = 0;
          for (std::int64_t j = 0; j < p.S; ++j)
            if (ref::visible(abs_v, b, n, i, j)) vsum += abs_v.vv(b, j, abs_v.kv_head(n), h);
          const std::size_t e = std::size_t(((b * p.T + i) * p.N + n) * p.Hv + h);
          bound[e] = (0x1p-4 + 0x1p-20) * pv[e] + 0x1p-10 / double(p.scale_s) * vsum;
        }
  return bound;
}

double o_rounding_bound(double o, double scale_o) {
  return std::max(0x1p-4 * std::fabs(o), 0x1p-10 / scale_o) * (1 + 0x1p-20);
}

}  // namespace attnlab_test::fp8ref
