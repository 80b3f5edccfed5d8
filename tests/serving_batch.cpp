#include "serving_batch.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace attnlab_test {

using attnlab::MaskAlign;

std::vector<std::int32_t> offsets(const std::vector<std::int64_t>& lens) {
  std::vector<std::int32_t> cu{0};
  for (std::int64_t l : lens) cu.push_back(cu.back() + std::int32_t(l));
  return cu;
}

std::int64_t Batch::max(const std::vector<std::int64_t>& v) { return *std::max_element(v.begin(), v.end()); }

void Batch::make(Rng& rng) {
  const std::vector<std::int32_t> oq = offsets(q_lens), ok = offsets(kv_lens);
  const std::int64_t total_q = oq.back() + spare_rows;
  q = HostTensor(dtype, {total_q, N, Hqk});
  o = HostTensor(dtype, {total_q, N, Hv});
  lse = HostTensor(DType::f32, {N, total_q});
  if (with_sinks) {
    sinks = HostTensor(DType::f32, {N});
    for (std::int64_t n = 0; n < N; ++n) sinks.set(n, rng.uniform(-2.0, 4.0));
  }
  q.fill_random(rng);
  o.poison();
  lse.poison();
  cu_q = int_tensor(oq);
  if (page_size == 0) {
    k = HostTensor(dtype, {std::int64_t(ok.back()) + 1, K, Hqk});
    v = HostTensor(dtype, {std::int64_t(ok.back()) + 1, K, Hv});
    k.fill_random(rng);
    v.fill_random(rng);
    cu_k = int_tensor(ok);
    return;
  }
  // Pages dealt out of order: the pool's pages shuffled, sequence 1 sharing sequence 0's first page.
  std::int64_t needed = 0;
  for (std::int64_t len : kv_lens) needed += (len + page_size - 1) / page_size;
  std::vector<std::int64_t> pool(std::size_t(needed + 2));
  std::iota(pool.begin(), pool.end(), 0);
  for (std::size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[std::size_t(rng.integer(0, int(i) - 1))]);
  std::size_t next = 0;
  std::int64_t per_sequence = 1;
  pages.assign(std::size_t(B()), {});
  for (std::int64_t b = 0; b < B(); ++b) {
    const std::int64_t count = (kv_lens[std::size_t(b)] + page_size - 1) / page_size;
    for (std::int64_t i = 0; i < count; ++i) pages[std::size_t(b)].push_back(pool[next++]);
    per_sequence = std::max(per_sequence, count + 1);  // a spare column: entries past a sequence are unread
  }
  if (B() > 1 && !pages[0].empty() && !pages[1].empty()) pages[1][0] = pages[0][0];
  k_cache = HostTensor(dtype, {std::int64_t(pool.size()), page_size, K, Hqk});
  v_cache = HostTensor(dtype, {std::int64_t(pool.size()), page_size, K, Hv});
  k_cache.fill_random(rng);
  v_cache.fill_random(rng);
  block_table = HostTensor(DType::i32, {B(), per_sequence});
  for (std::int64_t b = 0; b < B(); ++b)
    for (std::int64_t i = 0; i < per_sequence; ++i) {
      const auto& ps = pages[std::size_t(b)];
      block_table.set(b * per_sequence + i, i < std::int64_t(ps.size()) ? double(ps[std::size_t(i)]) : -1.0);
    }
  std::vector<std::int32_t> lens(kv_lens.begin(), kv_lens.end());
  seqlens = int_tensor(lens);
}

double Batch::key(const HostTensor& packed, const HostTensor& cache, std::int64_t H, std::int64_t b, std::int64_t j,
           std::int64_t kh, std::int64_t h) const {
  if (page_size == 0) return packed.get(((offsets(kv_lens)[std::size_t(b)] + j) * K + kh) * H + h);
  const std::int64_t page = pages[std::size_t(b)][std::size_t(j / page_size)];
  return cache.get(((page * page_size + j % page_size) * K + kh) * H + h);
}

attnlab::VarlenForwardArgs Batch::args(const attnlab::Options& options) const {
  attnlab::VarlenForwardArgs a;
  a.q = q.view(), a.o = o.view(), a.lse = lse.view();
  a.cu_seqlens_q = cu_q.view();
  a.max_seqlen_q = max(q_lens);
  a.max_seqlen_k = max(kv_lens);
  if (page_size == 0) {
    a.k = k.view(), a.v = v.view(), a.cu_seqlens_k = cu_k.view();
  } else {
    a.paged = attnlab::PagedKV{k_cache.view(), v_cache.view(), block_table.view(), seqlens.view()};
  }
  if (with_sinks) a.sinks = sinks.view();
  a.options = options;
  return a;
}

ref::Problem Batch::reference(const attnlab::Options& options) const {
  ref::Problem p;
  p.B = B(), p.T = std::max<std::int64_t>(max(q_lens), 1), p.S = std::max<std::int64_t>(max(kv_lens), 1);
  p.N = N, p.K = K, p.Hqk = Hqk, p.Hv = Hv;
  p.scale = options.scale ? double(*options.scale) : double(float(1.0 / std::sqrt(double(Hqk))));
  p.softcap = options.softcap;
  p.causal = options.mask.causal;
  p.bottom_right = options.mask.align == MaskAlign::bottom_right;
  p.window_left = options.mask.window_left, p.window_right = options.mask.window_right;
  p.q_lens = q_lens, p.kv_lens = kv_lens;
  p.q.assign(std::size_t(p.B * p.T * N * Hqk), 0.0);
  p.k.assign(std::size_t(p.B * p.S * K * Hqk), 0.0);
  p.v.assign(std::size_t(p.B * p.S * K * Hv), 0.0);
  const std::vector<std::int32_t> oq = offsets(q_lens);
  for (std::int64_t b = 0; b < B(); ++b) {
    for (std::int64_t i = 0; i < q_lens[std::size_t(b)]; ++i)
      for (std::int64_t x = 0; x < N * Hqk; ++x)
        p.q[std::size_t((b * p.T + i) * N * Hqk + x)] = q.get((oq[std::size_t(b)] + i) * N * Hqk + x);
    for (std::int64_t j = 0; j < kv_lens[std::size_t(b)]; ++j)
      for (std::int64_t kh = 0; kh < K; ++kh) {
        for (std::int64_t h = 0; h < Hqk; ++h)
          p.k[std::size_t(((b * p.S + j) * K + kh) * Hqk + h)] = key(k, k_cache, Hqk, b, j, kh, h);
        for (std::int64_t h = 0; h < Hv; ++h)
          p.v[std::size_t(((b * p.S + j) * K + kh) * Hv + h)] = key(v, v_cache, Hv, b, j, kh, h);
      }
  }
  return p;
}

std::pair<std::vector<double>, std::vector<double>> Batch::packed(const ref::Problem& p, const ref::Forward& f) const {
  const std::int64_t total_q = q.shape()[0];
  std::vector<double> o_out(std::size_t(total_q * N * Hv), NAN), lse_out(std::size_t(N * total_q), NAN);
  const std::vector<std::int32_t> oq = offsets(q_lens);
  for (std::int64_t b = 0; b < B(); ++b)
    for (std::int64_t i = 0; i < q_lens[std::size_t(b)]; ++i)
      for (std::int64_t n = 0; n < N; ++n) {
        const std::int64_t row = oq[std::size_t(b)] + i;
        // A sink σ joins the denominator: LSE' = log(e^LSE + e^σ), and O scales by e^(LSE − LSE').
        double lse = f.lse[std::size_t((b * N + n) * p.T + i)], factor = 1.0;
        if (with_sinks) {
          const double sink = sinks.get(n), top = std::max(lse, sink);
          const double with_sink = top + std::log(std::exp(lse - top) + std::exp(sink - top));
          factor = std::exp(lse - with_sink);
          lse = with_sink;
        }
        for (std::int64_t h = 0; h < Hv; ++h)
          o_out[std::size_t((row * N + n) * Hv + h)] = factor * f.o[std::size_t(((b * p.T + i) * N + n) * Hv + h)];
        lse_out[std::size_t(n * total_q + row)] = lse;
      }
  return {o_out, lse_out};
}

// Splits a packed output into the rows of sequences (checked against the criterion) and the spare rows past
// them (which must still hold the poison).
void check_outputs(const Batch& batch, const attnlab::Options& options) {
  const ref::Problem p = batch.reference(options);
  const auto [o64, lse64] = batch.packed(p, ref::forward(p));
  const auto [o_same, lse_same] = batch.packed(p, ref::forward_in_dtype(p, batch.dtype));
  const std::vector<double> o = batch.o.values(), lse = batch.lse.values();
  std::vector<double> o_in, o64_in, o_same_in, lse_in, lse64_in, lse_same_in;
  std::int64_t untouched = 0, spare = 0;
  for (std::size_t i = 0; i < o.size(); ++i) {
    if (std::isnan(o64[i])) {
      ++spare, untouched += std::isnan(o[i]);
    } else {
      o_in.push_back(o[i]), o64_in.push_back(o64[i]), o_same_in.push_back(o_same[i]);
    }
  }
  for (std::size_t i = 0; i < lse.size(); ++i)
    if (!std::isnan(lse64[i])) lse_in.push_back(lse[i]), lse64_in.push_back(lse64[i]), lse_same_in.push_back(lse_same[i]);
  EXPECT_TRUE(meets_criterion("O", batch.dtype, o_in, o64_in, o_same_in));
  EXPECT_TRUE(meets_criterion("LSE", DType::f32, lse_in, lse64_in, lse_same_in));
  EXPECT_EQ(untouched, spare) << "rows of o outside every sequence were written";
}

}  // namespace attnlab_test
