#include "reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "test_support.h"

namespace attnlab_test::ref {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// One query row's scores, in fp64 (Real = double) or in f32 (Real = float).
template <class Real>
struct Row {
  std::vector<Real> raw;     // scale · q·k (before softcap), for the softcap derivative
  std::vector<Real> s;       // final score
  std::vector<char> seen;    // visible and finite
  bool any = false;
  Real max = Real(kNegInf);
};

template <class Real>
void scores(const Problem& p, std::int64_t b, std::int64_t n, std::int64_t i, Row<Real>& row) {
  const std::int64_t kh = p.kv_head(n);
  row.raw.assign(std::size_t(p.S), Real(0));
  row.s.assign(std::size_t(p.S), Real(kNegInf));
  row.seen.assign(std::size_t(p.S), 0);
  row.any = false;
  row.max = Real(kNegInf);
  const double* qrow = &p.q[std::size_t(((b * p.T + i) * p.N + n) * p.Hqk)];
  for (std::int64_t j = 0; j < p.S; ++j) {
    if (!visible(p, b, n, i, j)) continue;
    const double* krow = &p.k[std::size_t(((b * p.S + j) * p.K + kh) * p.Hqk)];
    Real acc = 0;
    for (std::int64_t h = 0; h < p.Hqk; ++h) acc += Real(qrow[h]) * Real(krow[h]);
    Real s = acc * Real(p.scale);
    row.raw[std::size_t(j)] = s;
    if (p.softcap > 0) s = Real(p.softcap) * std::tanh(s / Real(p.softcap));
    if (!p.bias.empty()) {
      const std::int64_t bb = p.bias_B == 1 ? 0 : b, bn = p.bias_N == 1 ? 0 : n;
      s += Real(p.bias[std::size_t(((bb * p.bias_N + bn) * p.T + i) * p.S + j)]);
    }
    if (std::isinf(s) && s < 0) continue;  // a −inf bias hides the key
    row.s[std::size_t(j)] = s;
    row.seen[std::size_t(j)] = 1;
    row.any = true;
    row.max = std::max(row.max, s);
  }
}

// Calls run(first, last) over [0, units), split into contiguous ranges among threads when `work` (products) is
// large enough to repay starting them; one call on this thread otherwise.
template <class Run>
void split_among_threads(std::int64_t units, double work, Run run) {
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const std::int64_t threads = work < 4e7 ? 1 : std::min<std::int64_t>({std::int64_t(hardware), 32, units});
  if (threads <= 1) return run(std::int64_t(0), units);
  std::vector<std::thread> pool;
  for (std::int64_t t = 0; t < threads; ++t) pool.emplace_back(run, units * t / threads, units * (t + 1) / threads);
  for (auto& thread : pool) thread.join();
}

double products(const Problem& p) { return double(p.B * p.N * p.T) * double(p.S) * double(p.Hqk + p.Hv); }

// Runs body(b, n, i, row, acc) for every query row, the rows split among threads. Each row writes only its own
// output, so the result does not depend on the split; the GPU tests' largest cases (ManyBlocksPerCta: hundreds of
// GFLOP in fp64) would otherwise spend minutes here.
template <class Real, class Body>
void for_each_row(const Problem& p, Body body) {
  split_among_threads(p.B * p.N * p.T, products(p), [&](std::int64_t first, std::int64_t last) {
    Row<Real> row;
    std::vector<Real> acc(std::size_t(p.Hv));
    for (std::int64_t r = first; r < last; ++r) body(r / (p.T * p.N), (r / p.T) % p.N, r % p.T, row, acc);
  });
}

// Runs body(b, kh) for every (batch, KV head): a backward pass's unit of independence, since dK and dV of a KV head
// collect every query head of its group and dQ is per row. Within a unit the order is the single-threaded one, so
// the sums are too.
template <class Body>
void for_each_kv_group(const Problem& p, Body body) {
  split_among_threads(p.B * p.K, products(p), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t g = first; g < last; ++g) body(g / p.K, g % p.K);
  });
}

}  // namespace

bool visible(const Problem& p, std::int64_t b, std::int64_t n, std::int64_t i, std::int64_t j) {
  const std::int64_t q_len = p.q_len(b), kv_len = p.kv_len(b);
  if (i >= q_len || j >= kv_len) return false;
  const std::int64_t diagonal = p.bottom_right ? i + kv_len - q_len : i;
  if (p.causal && j > diagonal) return false;
  // Written as distances from the diagonal so that huge windows (up to INT64_MAX) cannot overflow.
  if (p.window_left >= 0 && diagonal - j > p.window_left) return false;
  if (p.window_right >= 0 && j - diagonal > p.window_right) return false;
  if (!p.mask.empty()) {
    const std::int64_t mb = p.mask_B == 1 ? 0 : b, mn = p.mask_N == 1 ? 0 : n;
    if (p.mask[std::size_t(((mb * p.mask_N + mn) * p.T + i) * p.S + j)] == 0) return false;
  }
  return true;
}

Forward forward(const Problem& p) {
  Forward f;
  f.o.assign(std::size_t(p.B * p.T * p.N * p.Hv), 0.0);
  f.lse.assign(std::size_t(p.B * p.N * p.T), kNegInf);
  for_each_row<double>(p, [&](std::int64_t b, std::int64_t n, std::int64_t i, Row<double>& row,
                              std::vector<double>& acc) {
    scores(p, b, n, i, row);
    if (!row.any) return;  // o = 0, lse = −inf
    const std::int64_t kh = p.kv_head(n);
    double l = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (std::int64_t j = 0; j < p.S; ++j) {
      if (!row.seen[std::size_t(j)]) continue;
      const double e = std::exp(row.s[std::size_t(j)] - row.max);
      l += e;
      const double* vrow = &p.v[std::size_t(((b * p.S + j) * p.K + kh) * p.Hv)];
      for (std::int64_t h = 0; h < p.Hv; ++h) acc[std::size_t(h)] += e * vrow[h];
    }
    double* orow = &f.o[std::size_t(((b * p.T + i) * p.N + n) * p.Hv)];
    for (std::int64_t h = 0; h < p.Hv; ++h) orow[h] = acc[std::size_t(h)] / l;
    f.lse[std::size_t((b * p.N + n) * p.T + i)] = row.max + std::log(l);
  });
  return f;
}

Forward forward_in_dtype(const Problem& p, attnlab::DType dtype) {
  Forward f;
  f.o.assign(std::size_t(p.B * p.T * p.N * p.Hv), 0.0);
  f.lse.assign(std::size_t(p.B * p.N * p.T), kNegInf);
  for_each_row<float>(p, [&](std::int64_t b, std::int64_t n, std::int64_t i, Row<float>& row,
                             std::vector<float>& acc) {
    scores(p, b, n, i, row);
    if (!row.any) return;
    const std::int64_t kh = p.kv_head(n);
    float l = 0;
    for (std::int64_t j = 0; j < p.S; ++j)
      if (row.seen[std::size_t(j)]) l += std::exp(row.s[std::size_t(j)] - row.max);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (std::int64_t j = 0; j < p.S; ++j) {
      if (!row.seen[std::size_t(j)]) continue;
      const float pr = float(round_to(dtype, std::exp(row.s[std::size_t(j)] - row.max) / l));
      const double* vrow = &p.v[std::size_t(((b * p.S + j) * p.K + kh) * p.Hv)];
      for (std::int64_t h = 0; h < p.Hv; ++h) acc[std::size_t(h)] += pr * float(vrow[h]);
    }
    double* orow = &f.o[std::size_t(((b * p.T + i) * p.N + n) * p.Hv)];
    for (std::int64_t h = 0; h < p.Hv; ++h) orow[h] = round_to(dtype, acc[std::size_t(h)]);
    f.lse[std::size_t((b * p.N + n) * p.T + i)] = double(row.max + std::log(l));
  });
  return f;
}

Backward backward(const Problem& p, const std::vector<double>& d_o, const std::vector<double>* o,
                  const std::vector<double>* lse) {
  Backward g;
  g.dq.assign(p.q.size(), 0.0);
  g.dk.assign(p.k.size(), 0.0);
  g.dv.assign(p.v.size(), 0.0);
  const std::int64_t group = p.N / p.K;
  for_each_kv_group(p, [&](std::int64_t b, std::int64_t kh) {
    Row<double> row;
    std::vector<double> prob(std::size_t(p.S)), dp(std::size_t(p.S));
    for (std::int64_t n = kh * group; n < (kh + 1) * group; ++n)
      for (std::int64_t i = 0; i < p.T; ++i) {
        scores(p, b, n, i, row);
        if (!row.any) continue;  // the output is the constant 0: no gradient
        const double* grow = &d_o[std::size_t(((b * p.T + i) * p.N + n) * p.Hv)];
        const double* qrow = &p.q[std::size_t(((b * p.T + i) * p.N + n) * p.Hqk)];
        double l = 0;
        for (std::int64_t j = 0; j < p.S; ++j)
          if (row.seen[std::size_t(j)]) l += std::exp(row.s[std::size_t(j)] - row.max);
        // P = exp(s − LSE): the exact LSE, or the one the call is given.
        const double row_lse = lse ? (*lse)[std::size_t((b * p.N + n) * p.T + i)] : row.max + std::log(l);
        double D = 0;
        for (std::int64_t j = 0; j < p.S; ++j) {
          prob[std::size_t(j)] = row.seen[std::size_t(j)] ? std::exp(row.s[std::size_t(j)] - row_lse) : 0.0;
          dp[std::size_t(j)] = 0;
          if (!row.seen[std::size_t(j)]) continue;
          const double* vrow = &p.v[std::size_t(((b * p.S + j) * p.K + kh) * p.Hv)];
          for (std::int64_t h = 0; h < p.Hv; ++h) dp[std::size_t(j)] += grow[h] * vrow[h];
          D += prob[std::size_t(j)] * dp[std::size_t(j)];
        }
        if (o != nullptr) {
          D = 0;
          for (std::int64_t h = 0; h < p.Hv; ++h) D += grow[h] * (*o)[std::size_t(((b * p.T + i) * p.N + n) * p.Hv + h)];
        }
        double* dqrow = &g.dq[std::size_t(((b * p.T + i) * p.N + n) * p.Hqk)];
        for (std::int64_t j = 0; j < p.S; ++j) {
          if (!row.seen[std::size_t(j)]) continue;
          double ds = prob[std::size_t(j)] * (dp[std::size_t(j)] - D);
          if (p.softcap > 0) {
            const double t = std::tanh(row.raw[std::size_t(j)] / p.softcap);
            ds *= 1.0 - t * t;
          }
          ds *= p.scale;
          const double* krow = &p.k[std::size_t(((b * p.S + j) * p.K + kh) * p.Hqk)];
          double* dkrow = &g.dk[std::size_t(((b * p.S + j) * p.K + kh) * p.Hqk)];
          double* dvrow = &g.dv[std::size_t(((b * p.S + j) * p.K + kh) * p.Hv)];
          for (std::int64_t h = 0; h < p.Hqk; ++h) {
            dqrow[h] += ds * krow[h];
            dkrow[h] += ds * qrow[h];
          }
          for (std::int64_t h = 0; h < p.Hv; ++h) dvrow[h] += prob[std::size_t(j)] * grow[h];
        }
      }
  });
  return g;
}

Backward backward_in_dtype(const Problem& p, const std::vector<double>& d_o, attnlab::DType dtype,
                           const std::vector<double>* o) {
  const std::vector<double> out = o ? *o : forward_in_dtype(p, dtype).o;  // for D = rowsum(dO ∘ O)
  std::vector<float> dq(p.q.size(), 0.0f), dk(p.k.size(), 0.0f), dv(p.v.size(), 0.0f);
  const std::int64_t group = p.N / p.K;
  for_each_kv_group(p, [&](std::int64_t b, std::int64_t kh) {
    Row<float> row;
    for (std::int64_t n = kh * group; n < (kh + 1) * group; ++n)
      for (std::int64_t i = 0; i < p.T; ++i) {
        scores(p, b, n, i, row);
        if (!row.any) continue;
        const std::size_t orow = std::size_t(((b * p.T + i) * p.N + n) * p.Hv);
        const double* qrow = &p.q[std::size_t(((b * p.T + i) * p.N + n) * p.Hqk)];
        float D = 0;
        for (std::int64_t h = 0; h < p.Hv; ++h) D += float(d_o[orow + std::size_t(h)]) * float(out[orow + std::size_t(h)]);
        float l = 0;
        for (std::int64_t j = 0; j < p.S; ++j)
          if (row.seen[std::size_t(j)]) l += std::exp(row.s[std::size_t(j)] - row.max);
        float* dqrow = &dq[std::size_t(((b * p.T + i) * p.N + n) * p.Hqk)];
        for (std::int64_t j = 0; j < p.S; ++j) {
          if (!row.seen[std::size_t(j)]) continue;
          const float pj = std::exp(row.s[std::size_t(j)] - row.max) / l;
          const float pr = float(round_to(dtype, pj));
          const double* vrow = &p.v[std::size_t(((b * p.S + j) * p.K + kh) * p.Hv)];
          float dpj = 0;
          for (std::int64_t h = 0; h < p.Hv; ++h) dpj += float(d_o[orow + std::size_t(h)]) * float(vrow[h]);
          float ds = pj * (dpj - D);
          if (p.softcap > 0) {
            const float t = std::tanh(row.raw[std::size_t(j)] / float(p.softcap));
            ds *= 1.0f - t * t;
          }
          ds = float(round_to(dtype, ds));
          const double* krow = &p.k[std::size_t(((b * p.S + j) * p.K + kh) * p.Hqk)];
          float* dkrow = &dk[std::size_t(((b * p.S + j) * p.K + kh) * p.Hqk)];
          float* dvrow = &dv[std::size_t(((b * p.S + j) * p.K + kh) * p.Hv)];
          for (std::int64_t h = 0; h < p.Hqk; ++h) {
            dqrow[h] += ds * float(krow[h]);
            dkrow[h] += ds * float(qrow[h]);
          }
          for (std::int64_t h = 0; h < p.Hv; ++h) dvrow[h] += pr * float(d_o[orow + std::size_t(h)]);
        }
      }
  });
  Backward g;
  const auto finish = [&](const std::vector<float>& acc, double factor) {
    std::vector<double> out(acc.size());
    for (std::size_t i = 0; i < acc.size(); ++i) out[i] = round_to(dtype, double(acc[i] * float(factor)));
    return out;
  };
  g.dq = finish(dq, p.scale);
  g.dk = finish(dk, p.scale);
  g.dv = finish(dv, 1.0);
  return g;
}

}  // namespace attnlab_test::ref
