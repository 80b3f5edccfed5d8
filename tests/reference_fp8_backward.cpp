#include "reference_fp8_backward.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnlab_test::fp8ref {
namespace {

using attnlab::core::float_to_fp8;
using attnlab::core::fp8_to_float;

double decode1(std::uint8_t code, Fp8Format f) { return double(fp8_to_float(code, f)); }

std::vector<double> decode(const std::vector<std::uint8_t>& codes, Fp8Format f, double descale) {
  std::vector<double> out(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i) out[i] = decode1(codes[i], f) * descale;
  return out;
}

// The f32 gradient, its amax (before scaling, as matmul_fp8 takes it) and, with a scale, its codes.
// descale_a, then descale_b, as matmul_fp8 applies them to the accumulator.
void finish(const std::vector<double>& acc, float descale_a, float descale_b, const GradOutput& out,
            std::vector<float>& g, std::vector<std::uint8_t>& codes, float& amax) {
  g.resize(acc.size());
  amax = 0;
  for (std::size_t e = 0; e < acc.size(); ++e) {
    g[e] = float((acc[e] * double(descale_a)) * double(descale_b));
    amax = std::max(amax, std::fabs(g[e]));
  }
  if (!out.scale) return;
  // Every element, zeros included: a hidden key's or an empty row's 0 encodes to the code 0.
  codes.resize(g.size());
  for (std::size_t e = 0; e < g.size(); ++e) codes[e] = float_to_fp8(g[e] * *out.scale, out.format);
}

}  // namespace

DecodedBackward decoded(const Problem& p, const BackwardInputs& in) {
  DecodedBackward d;
  d.problem = decoded(p);
  d.o = decode(in.o, Fp8Format::e4m3, in.descale_o);
  d.d_o = decode(in.d_o, in.do_format, in.descale_do);
  d.lse.assign(in.lse.begin(), in.lse.end());
  return d;
}

Backward backward(const Problem& p, const BackwardInputs& in) {
  const ref::Problem masks = decoded(p);  // only its shape and masks are read: ref::visible decides
  // Decoded codes without their descales: the descales multiply the GEMMs' accumulators afterwards.
  const std::vector<double> q = decode(p.q, Fp8Format::e4m3, 1.0), k = decode(p.k, Fp8Format::e4m3, 1.0),
                            v = decode(p.v, Fp8Format::e4m3, 1.0), o = decode(in.o, Fp8Format::e4m3, 1.0),
                            dout = decode(in.d_o, in.do_format, 1.0);
  const BackwardMutation m = in.mutation;
  const double scale = p.softmax_scale();
  const float descale_s = in.descale_s_or(p.scale_s);
  const float descale_dp = m == BackwardMutation::skip_descale_dp ? 1.0f : in.descale_dp_or_default();
  const double descale_o = m == BackwardMutation::skip_descale_o ? 1.0 : double(in.descale_o);
  const Fp8Format ds_format = m == BackwardMutation::ds_in_e4m3 ? Fp8Format::e4m3 : in.do_format;

  // Accumulators of the three GEMMs in double, on codes; dK and dV sum over a KV head's query heads.
  std::vector<double> dq(p.q.size(), 0.0), dk(p.k.size(), 0.0), dv(p.v.size(), 0.0);
  Backward g;
  std::vector<char> seen(std::size_t(p.S));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t n = 0; n < p.N; ++n)
      for (std::int64_t i = 0; i < p.T; ++i) {
        const std::int64_t kh = n / (p.N / p.K);
        const std::size_t qoff = std::size_t(((b * p.T + i) * p.N + n) * p.Hqk);
        const std::size_t ooff = std::size_t(((b * p.T + i) * p.N + n) * p.Hv);
        bool any = false;
        for (std::int64_t j = 0; j < p.S; ++j) any |= (seen[std::size_t(j)] = ref::visible(masks, b, n, i, j)) != 0;
        if (!any) continue;  // no key: the row contributes nothing (its LSE is −inf)
        const double lse = double(in.lse[std::size_t((b * p.N + n) * p.T + i)]);

        // D from the O codes the call is given, descaled after the reduction.
        double dot_o = 0;
        for (std::int64_t h = 0; h < p.Hv; ++h) dot_o += dout[ooff + std::size_t(h)] * o[ooff + std::size_t(h)];
        const double D = dot_o * double(in.descale_do) * descale_o;

        for (std::int64_t j = 0; j < p.S; ++j) {
          if (!seen[std::size_t(j)]) continue;
          const std::size_t koff = std::size_t(((b * p.S + j) * p.K + kh) * p.Hqk);
          const std::size_t voff = std::size_t(((b * p.S + j) * p.K + kh) * p.Hv);
          double dot = 0;
          for (std::int64_t h = 0; h < p.Hqk; ++h) dot += q[qoff + std::size_t(h)] * k[koff + std::size_t(h)];
          const double s = ((dot * scale) * double(p.d_q)) * double(p.d_k);
          const float pj = float(std::exp(s - lse));

          // dV: P quantized exactly as the forward quantized it, the product rounded in f32 first.
          const double pq = m == BackwardMutation::skip_p_quantization
                                ? double(pj) * double(p.scale_s)
                                : decode1(float_to_fp8(pj * p.scale_s, Fp8Format::e4m3), Fp8Format::e4m3);
          for (std::int64_t h = 0; h < p.Hv; ++h) dv[voff + std::size_t(h)] += pq * dout[ooff + std::size_t(h)];

          double dot_v = 0;
          for (std::int64_t h = 0; h < p.Hv; ++h) dot_v += dout[ooff + std::size_t(h)] * v[voff + std::size_t(h)];
          const double dp = (dot_v * double(in.descale_do)) * double(p.d_v);
          const float dsj = float(((dp - D) * double(pj)) * scale);
          g.amax_dp = std::max(g.amax_dp, std::fabs(dsj));

          const double dsq = decode1(float_to_fp8(dsj * in.scale_dp, ds_format), ds_format);
          for (std::int64_t h = 0; h < p.Hqk; ++h) {
            dq[qoff + std::size_t(h)] += dsq * k[koff + std::size_t(h)];
            dk[koff + std::size_t(h)] += dsq * q[qoff + std::size_t(h)];
          }
        }
      }

  // Each matmul_fp8 descales A, then B, rounds to the f32 output, and takes its amax before scale_c.
  finish(dq, descale_dp, p.d_k, in.dq, g.dq, g.dq_fp8, g.amax_dq);
  finish(dk, descale_dp, p.d_q, in.dk, g.dk, g.dk_fp8, g.amax_dk);
  finish(dv, descale_s, in.descale_do, in.dv, g.dv, g.dv_fp8, g.amax_dv);
  return g;
}

}  // namespace attnlab_test::fp8ref
