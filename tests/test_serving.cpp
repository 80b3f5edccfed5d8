// The serving calls of include/attnlab/serving.h on the CPU paths: packed variable-length batches (packed keys and
// paged caches: page sizes 16 and 256, pages out of order, a page two sequences share, sequences of length 0, 1, 7,
// 113) against the fp64 reference of each sequence by docs/design.md §2's criterion, with poisoned outputs whose
// rows outside every sequence must stay untouched; append_kv into contiguous and paged caches (every other row
// untouched); a decode loop of appends and attention; and bad input refused by rule before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "attnlab/serving.h"
#include "reference.h"
#include "test_support.h"

namespace attnlab_test {
namespace {

using attnlab::MaskAlign;

std::vector<std::int32_t> offsets(const std::vector<std::int64_t>& lens) {
  std::vector<std::int32_t> cu{0};
  for (std::int64_t l : lens) cu.push_back(cu.back() + std::int32_t(l));
  return cu;
}

// A batch of sequences with packed queries and either packed keys or a paged cache holding the same kind of data.
struct Batch {
  std::int64_t N = 4, K = 2, Hqk = 40, Hv = 24;
  DType dtype = DType::f32;
  std::vector<std::int64_t> q_lens, kv_lens;
  std::int64_t page_size = 0;  // 0: packed keys
  std::int64_t spare_rows = 3;  // rows of q and o past the last sequence: never read, never written

  HostTensor q, k, v, o, lse, cu_q, cu_k, k_cache, v_cache, block_table, seqlens;
  std::vector<std::vector<std::int64_t>> pages;  // per sequence, its pages in order

  std::int64_t B() const { return std::int64_t(q_lens.size()); }
  std::int64_t max(const std::vector<std::int64_t>& v) const { return *std::max_element(v.begin(), v.end()); }

  void make(Rng& rng) {
    const std::vector<std::int32_t> oq = offsets(q_lens), ok = offsets(kv_lens);
    const std::int64_t total_q = oq.back() + spare_rows;
    q = HostTensor(dtype, {total_q, N, Hqk});
    o = HostTensor(dtype, {total_q, N, Hv});
    lse = HostTensor(DType::f32, {N, total_q});
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

  // Key j of sequence b, element (head kh, dim h), from wherever the batch keeps it.
  double key(const HostTensor& packed, const HostTensor& cache, std::int64_t H, std::int64_t b, std::int64_t j,
             std::int64_t kh, std::int64_t h) const {
    if (page_size == 0) return packed.get(((offsets(kv_lens)[std::size_t(b)] + j) * K + kh) * H + h);
    const std::int64_t page = pages[std::size_t(b)][std::size_t(j / page_size)];
    return cache.get(((page * page_size + j % page_size) * K + kh) * H + h);
  }

  attnlab::VarlenForwardArgs args(const attnlab::Options& options) const {
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
    a.options = options;
    return a;
  }

  // The reference of every sequence, as one padded fp64 problem with per-batch lengths.
  ref::Problem reference(const attnlab::Options& options) const {
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

  // The padded reference's O and LSE in the packed order of o and lse (rows outside every sequence: NaN, which
  // the check below expects to find there untouched).
  std::pair<std::vector<double>, std::vector<double>> packed(const ref::Problem& p, const ref::Forward& f) const {
    const std::int64_t total_q = q.shape()[0];
    std::vector<double> o_out(std::size_t(total_q * N * Hv), NAN), lse_out(std::size_t(N * total_q), NAN);
    const std::vector<std::int32_t> oq = offsets(q_lens);
    for (std::int64_t b = 0; b < B(); ++b)
      for (std::int64_t i = 0; i < q_lens[std::size_t(b)]; ++i)
        for (std::int64_t n = 0; n < N; ++n) {
          const std::int64_t row = oq[std::size_t(b)] + i;
          for (std::int64_t h = 0; h < Hv; ++h)
            o_out[std::size_t((row * N + n) * Hv + h)] = f.o[std::size_t(((b * p.T + i) * N + n) * Hv + h)];
          lse_out[std::size_t(n * total_q + row)] = f.lse[std::size_t((b * N + n) * p.T + i)];
        }
    return {o_out, lse_out};
  }
};

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

using ServingParam = std::tuple<std::string, DType>;
class VarlenForward : public ::testing::TestWithParam<ServingParam> {
 protected:
  Batch batch(std::vector<std::int64_t> q_lens, std::vector<std::int64_t> kv_lens, std::int64_t page_size = 0) const {
    Batch b;
    b.dtype = std::get<1>(GetParam());
    b.q_lens = std::move(q_lens), b.kv_lens = std::move(kv_lens), b.page_size = page_size;
    return b;
  }
  attnlab::Options options() const {
    attnlab::Options o;
    o.path = std::get<0>(GetParam());
    return o;
  }
  void run_and_check(Batch& b, const attnlab::Options& o, Rng& rng) {
    b.make(rng);
    attnlab::Context ctx;
    const attnlab::RunInfo info = attnlab::forward(ctx, b.args(o));
    EXPECT_EQ(info.path, o.path);
    check_outputs(b, o);
  }
};

// Odd lengths (1, 7, 113), a sequence with queries and no key (O = 0, LSE = −inf), one with keys and no query;
// no mask, causal masks of both alignments, a window.
TEST_P(VarlenForward, PackedKeys) {
  ATTNLAB_TEST_RNG(rng);
  for (int mask = 0; mask < 4; ++mask) {
    Batch b = batch({1, 7, 113, 5, 0, 30}, {1, 9, 113, 0, 20, 17});
    attnlab::Options o = options();
    o.mask.causal = mask == 1 || mask == 2;
    o.mask.align = mask == 2 ? MaskAlign::bottom_right : MaskAlign::top_left;
    if (mask == 3) o.mask.window_left = 5, o.mask.window_right = 2;
    SCOPED_TRACE("mask " + std::to_string(mask));
    run_and_check(b, o, rng);
  }
}

// The same through paged caches of 16 and of 256 keys a page, pages out of order and one page in two block tables.
TEST_P(VarlenForward, PagedKeys) {
  ATTNLAB_TEST_RNG(rng);
  for (const std::int64_t page_size : {16, 256}) {
    Batch b = batch({1, 7, 113, 5, 3}, {1, 40, 113, 0, 300}, page_size);
    attnlab::Options o = options();
    o.mask.causal = true;
    o.mask.align = MaskAlign::bottom_right;  // decode's alignment: the last query sees every key
    SCOPED_TRACE("page size " + std::to_string(page_size));
    run_and_check(b, o, rng);
    Batch plain = batch({4, 1, 2}, {33, 16, 1}, page_size);
    run_and_check(plain, options(), rng);
  }
}

// Grouped query heads (N = 6, K = 2) and MQA (K = 1) with softcap.
TEST_P(VarlenForward, SharedKVHeadsAndSoftcap) {
  ATTNLAB_TEST_RNG(rng);
  for (const std::int64_t K : {2, 1}) {
    Batch b = batch({3, 17}, {12, 17}, K == 1 ? 16 : 0);
    b.N = 6, b.K = K;
    attnlab::Options o = options();
    o.softcap = 2.0f;
    run_and_check(b, o, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(CpuPaths, VarlenForward,
                         ::testing::Combine(::testing::Values("cpu-naive", "cpu-flash"),
                                            ::testing::Values(DType::f32, DType::bf16, DType::f16)),
                         [](const ::testing::TestParamInfo<ServingParam>& info) {
                           std::string name = std::get<0>(info.param) + "_" + dtype_name(std::get<1>(info.param));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Bad input, each refused by its rule with o untouched.
TEST(VarlenForwardErrors, RefusesBadLayouts) {
  Rng rng(7);
  Batch b;
  b.q_lens = {3, 4}, b.kv_lens = {5, 6};
  b.make(rng);
  attnlab::Context ctx;
  const auto before = b.o.snapshot();
  auto expect_invalid = [&](attnlab::VarlenForwardArgs a, const std::string& fragment) {
    try {
      attnlab::forward(ctx, a);
      ADD_FAILURE() << "accepted; expected an error naming '" << fragment << "'";
    } catch (const attnlab::Error& e) {
      EXPECT_EQ(e.code(), attnlab::ErrorCode::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_TRUE(b.o.same_bytes(before)) << fragment;
  };
  const attnlab::VarlenForwardArgs good = b.args({});
  HostTensor bad = int_tensor({0, 4, 2});
  auto a = good;
  a.cu_seqlens_q = bad.view();
  expect_invalid(a, "cu_seqlens_q must not decrease");
  HostTensor shifted = int_tensor({1, 3, 7});
  a = good, a.cu_seqlens_q = shifted.view();
  expect_invalid(a, "cu_seqlens_q[0] must be 0");
  HostTensor past = int_tensor({0, 3, 11});
  a = good, a.cu_seqlens_q = past.view(), a.max_seqlen_q = 100;
  expect_invalid(a, "cu_seqlens_q[B] = 11 is more than the 10 rows of q");
  a = good, a.max_seqlen_q = 3;
  expect_invalid(a, "more than max_seqlen_q = 3");
  HostTensor short_k = int_tensor({0, 5});
  a = good, a.cu_seqlens_k = short_k.view();
  expect_invalid(a, "cu_seqlens_k must have shape (B + 1) = (3)");
  HostTensor lens = int_tensor({5, 6});
  a = good, a.options.kv_seqlens = lens.view();
  expect_invalid(a, "q_seqlens and kv_seqlens must stay empty");
  a = good, a.paged = attnlab::PagedKV{b.k.view(), b.v.view(), lens.view(), lens.view()};
  expect_invalid(a, "either packed (k, v, cu_seqlens_k) or paged");

  Batch p;
  p.q_lens = {3, 4}, p.kv_lens = {20, 6}, p.page_size = 16;
  p.make(rng);
  const auto paged_before = p.o.snapshot();
  const attnlab::VarlenForwardArgs paged = p.args({});
  p.block_table.set(1, 99);  // sequence 0's second page
  try {
    attnlab::forward(ctx, paged);
    ADD_FAILURE() << "a block table entry past the cache was accepted";
  } catch (const attnlab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("paged.block_table[0][1] = 99 names no page"), std::string::npos) << e.what();
  }
  p.block_table.set(1, double(p.pages[0][1]));
  p.seqlens.set(0, 100);  // above the block table's 3 · 16 keys
  EXPECT_THROW(attnlab::forward(ctx, paged), attnlab::Error);
  EXPECT_TRUE(p.o.same_bytes(paged_before));
}

}  // namespace
}  // namespace attnlab_test
