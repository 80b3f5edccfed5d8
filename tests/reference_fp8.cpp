#include "reference_fp8.h"

#include <algorithm>
#include <cmath>

#include "core/fp8.h"

namespace attnlab_test::fp8ref {
namespace {

using attnlab::core::Fp8Format;
using attnlab::core::float_to_fp8;
using attnlab::core::fp8_to_float;

std::vector<double> decode(const std::vector<std::uint8_t>& codes, double descale) {
  std::vector<double> out(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i) out[i] = double(fp8_to_float(codes[i], Fp8Format::e4m3)) * descale;
  return out;
}

// A ref::Problem carrying only the shape and the masks, so that ref::visible decides visibility for both
// references the same way.
ref::Problem mask_only(const Problem& p) {
  ref::Problem r;
  r.B = p.B, r.T = p.T, r.S = p.S, r.N = p.N, r.K = p.K, r.Hqk = p.Hqk, r.Hv = p.Hv;
  r.scale = p.softmax_scale();
  r.causal = p.causal;
  r.bottom_right = p.bottom_right;
  return r;
}

}  // namespace

double Problem::softmax_scale() const { return scale ? *scale : 1.0 / std::sqrt(double(Hqk)); }

ref::Problem decoded(const Problem& p) {
  ref::Problem r = mask_only(p);
  r.q = decode(p.q, p.d_q);
  r.k = decode(p.k, p.d_k);
  r.v = decode(p.v, p.d_v);
  return r;
}

Forward forward(const Problem& p) {
  const ref::Problem masks = mask_only(p);
  // Decoded codes without their descales: the descales multiply the dot products and P·V afterwards, as a device
  // applies them to the GEMMs' accumulators.
  const std::vector<double> q = decode(p.q, 1.0), k = decode(p.k, 1.0), v = decode(p.v, 1.0);
  const double s_factor = double(p.d_q) * double(p.d_k) * p.softmax_scale();
  const float quant_scale = p.mutation == Mutation::scale_s_twice ? p.scale_s * p.scale_s : p.scale_s;
  // 1 / scale_s as the device's f32 descale; the o factor is formed in double from it and d_v.
  const float descale_s = p.mutation == Mutation::skip_descale_s ? 1.0f : 1.0f / p.scale_s;
  const double o_factor = double(descale_s) * double(p.d_v);

  Forward f;
  f.o.assign(std::size_t(p.B * p.T * p.N * p.Hv), 0.0f);
  f.lse.assign(std::size_t(p.B * p.N * p.T), -std::numeric_limits<float>::infinity());
  std::vector<double> s(std::size_t(p.S)), acc(std::size_t(p.Hv));
  std::vector<char> seen(std::size_t(p.S));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t n = 0; n < p.N; ++n)
      for (std::int64_t i = 0; i < p.T; ++i) {
        const std::int64_t kh = n / (p.N / p.K);
        const double* qrow = &q[std::size_t(((b * p.T + i) * p.N + n) * p.Hqk)];
        double max = -std::numeric_limits<double>::infinity();
        bool any = false;
        for (std::int64_t j = 0; j < p.S; ++j) {
          seen[std::size_t(j)] = ref::visible(masks, b, n, i, j);
          if (!seen[std::size_t(j)]) continue;
          const double* krow = &k[std::size_t(((b * p.S + j) * p.K + kh) * p.Hqk)];
          double dot = 0;  // products of e4m3 values are exact in double; so is a sum this short, nearly
          for (std::int64_t h = 0; h < p.Hqk; ++h) dot += qrow[h] * krow[h];
          s[std::size_t(j)] = dot * s_factor;
          max = std::max(max, s[std::size_t(j)]);
          any = true;
        }
        if (!any) continue;  // o = 0, lse = −inf, nothing to amax
        double l = 0;
        for (std::int64_t j = 0; j < p.S; ++j)
          if (seen[std::size_t(j)]) l += std::exp(s[std::size_t(j)] - max);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t j = 0; j < p.S; ++j) {
          if (!seen[std::size_t(j)]) continue;
          const float pj = float(std::exp(s[std::size_t(j)] - max) / l);
          f.amax_s = std::max(f.amax_s, std::fabs(pj));
          // The product rounds in f32 before the conversion, as a kernel scales its f32 register and converts.
          const double pq = p.mutation == Mutation::skip_p_quantization
                                ? double(pj) * double(quant_scale)
                                : double(fp8_to_float(float_to_fp8(pj * quant_scale, Fp8Format::e4m3), Fp8Format::e4m3));
          const double* vrow = &v[std::size_t(((b * p.S + j) * p.K + kh) * p.Hv)];
          for (std::int64_t h = 0; h < p.Hv; ++h) acc[std::size_t(h)] += pq * vrow[h];
        }
        float* orow = &f.o[std::size_t(((b * p.T + i) * p.N + n) * p.Hv)];
        for (std::int64_t h = 0; h < p.Hv; ++h) {
          orow[h] = float(acc[std::size_t(h)] * o_factor);
          f.amax_o = std::max(f.amax_o, std::fabs(orow[h]));
        }
        f.lse[std::size_t((b * p.N + n) * p.T + i)] = float(max + std::log(l));
      }
  if (p.scale_o) {
    // Every element, masked rows included: their 0 encodes to the code 0.
    f.o_fp8.resize(f.o.size());
    for (std::size_t e = 0; e < f.o.size(); ++e) f.o_fp8[e] = float_to_fp8(f.o[e] * *p.scale_o, Fp8Format::e4m3);
  }
  return f;
}

}  // namespace attnlab_test::fp8ref
