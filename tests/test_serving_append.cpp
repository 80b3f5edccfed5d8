// append_kv (include/attnlab/serving.h) on the CPU: new rows, padded and packed, into contiguous and paged caches
// (pages out of order), every written row equal to its source and every other byte of the cache untouched; a
// decode loop (append one token, attend with it against the paged cache) against the fp64 reference; and the
// refusals, with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "attnlab/serving.h"
#include "reference.h"
#include "test_support.h"

namespace attnlab_test {
namespace {

// A paged cache of `pages` pages and a block table dealing sequence b the pages table[b][…].
struct PagedCache {
  HostTensor k, v, table, lens;
  std::int64_t page_size = 0;
  std::vector<std::vector<std::int64_t>> pages;

  PagedCache(DType dtype, std::int64_t page_size_, std::int64_t K, std::int64_t Hqk, std::int64_t Hv,
             std::vector<std::vector<std::int64_t>> pages_, const std::vector<std::int32_t>& lengths)
      : page_size(page_size_), pages(std::move(pages_)) {
    std::int64_t count = 0, per_sequence = 0;
    for (const auto& p : pages) {
      for (std::int64_t x : p) count = std::max(count, x + 1);
      per_sequence = std::max(per_sequence, std::int64_t(p.size()));
    }
    k = HostTensor(dtype, {count, page_size, K, Hqk});
    v = HostTensor(dtype, {count, page_size, K, Hv});
    k.poison();
    v.poison();
    table = HostTensor(DType::i32, {std::int64_t(pages.size()), per_sequence});
    for (std::size_t b = 0; b < pages.size(); ++b)
      for (std::int64_t i = 0; i < per_sequence; ++i)
        table.set(std::int64_t(b) * per_sequence + i, i < std::int64_t(pages[b].size()) ? double(pages[b][i]) : -1.0);
    lens = int_tensor(lengths);
  }
  attnlab::PagedKV view() const { return {k.view(), v.view(), table.view(), lens.view()}; }
  // Logical index of (sequence b, key j, head kh, dim h) in k (H = Hqk) or v (H = Hv).
  std::int64_t at(std::int64_t b, std::int64_t j, std::int64_t kh, std::int64_t h, std::int64_t K, std::int64_t H) const {
    const std::int64_t page = pages[std::size_t(b)][std::size_t(j / page_size)];
    return ((page * page_size + j % page_size) * K + kh) * H + h;
  }
};

// Counts the elements of `t` that differ from `before` at indices not in `written` (which must be sorted).
std::int64_t changed_elsewhere(const HostTensor& t, const std::vector<double>& before, std::vector<std::int64_t> written) {
  std::sort(written.begin(), written.end());
  const std::vector<double> now = t.values();
  std::int64_t changed = 0;
  for (std::int64_t i = 0; i < std::int64_t(now.size()); ++i) {
    if (std::binary_search(written.begin(), written.end(), i)) continue;
    const bool same = (std::isnan(now[std::size_t(i)]) && std::isnan(before[std::size_t(i)])) ||
                      now[std::size_t(i)] == before[std::size_t(i)];
    changed += !same;
  }
  return changed;
}

TEST(AppendKV, PaddedRowsIntoAContiguousCache) {
  Rng rng(11);
  const std::int64_t B = 3, S_max = 20, T_new = 4, K = 2, Hqk = 8, Hv = 6;
  HostTensor k_cache(DType::bf16, {B, S_max, K, Hqk}), v_cache(DType::bf16, {B, S_max, K, Hv});
  k_cache.poison();
  v_cache.poison();
  HostTensor k_new(DType::bf16, {B, T_new, K, Hqk}, padded()), v_new(DType::bf16, {B, T_new, K, Hv});
  k_new.fill_random(rng);
  v_new.fill_random(rng);
  const std::vector<std::int32_t> lengths = {0, 9, 16};  // 16 + 4 = S_max: the last row of the cache
  HostTensor lens = int_tensor(lengths);
  const std::vector<double> k_before = k_cache.values(), v_before = v_cache.values();
  attnlab::AppendKVArgs a;
  a.k_new = k_new.view(), a.v_new = v_new.view();
  a.k_cache = k_cache.view(), a.v_cache = v_cache.view(), a.seqlens = lens.view();
  attnlab::Context ctx;
  attnlab::append_kv(ctx, a);
  std::vector<std::int64_t> k_written, v_written;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T_new; ++t)
      for (std::int64_t kh = 0; kh < K; ++kh) {
        const std::int64_t pos = lengths[std::size_t(b)] + t;
        for (std::int64_t h = 0; h < Hqk; ++h) {
          const std::int64_t at = ((b * S_max + pos) * K + kh) * Hqk + h;
          EXPECT_EQ(k_cache.get(at), k_new.get(((b * T_new + t) * K + kh) * Hqk + h));
          k_written.push_back(at);
        }
        for (std::int64_t h = 0; h < Hv; ++h) {
          const std::int64_t at = ((b * S_max + pos) * K + kh) * Hv + h;
          EXPECT_EQ(v_cache.get(at), v_new.get(((b * T_new + t) * K + kh) * Hv + h));
          v_written.push_back(at);
        }
      }
  EXPECT_EQ(changed_elsewhere(k_cache, k_before, k_written), 0);
  EXPECT_EQ(changed_elsewhere(v_cache, v_before, v_written), 0);
}

TEST(AppendKV, PackedRowsIntoAPagedCache) {
  Rng rng(12);
  const std::int64_t K = 1, Hqk = 16, Hv = 16, page_size = 16;
  // Sequence 0 ends mid-page and spills into its second page; sequence 1 gets nothing; sequence 2's pages are
  // out of order.
  PagedCache cache(DType::f16, page_size, K, Hqk, Hv, {{3, 0}, {5}, {4, 1, 2}}, {10, 7, 16});
  const std::vector<std::int32_t> cu = {0, 9, 9, 29};
  HostTensor cu_new = int_tensor(cu);
  HostTensor k_new(DType::f16, {30, K, Hqk}), v_new(DType::f16, {30, K, Hv});
  k_new.fill_random(rng);
  v_new.fill_random(rng);
  const std::vector<double> k_before = cache.k.values();
  attnlab::AppendKVArgs a;
  a.k_new = k_new.view(), a.v_new = v_new.view(), a.cu_seqlens_new = cu_new.view();
  a.paged = cache.view();
  attnlab::Context ctx;
  attnlab::append_kv(ctx, a);
  std::vector<std::int64_t> written;
  const std::vector<std::int32_t> lengths = {10, 7, 16};
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t r = cu[std::size_t(b)]; r < cu[std::size_t(b) + 1]; ++r)
      for (std::int64_t h = 0; h < Hqk; ++h) {
        const std::int64_t at = cache.at(b, lengths[std::size_t(b)] + r - cu[std::size_t(b)], 0, h, K, Hqk);
        EXPECT_EQ(cache.k.get(at), k_new.get(r * Hqk + h)) << "sequence " << b << " row " << r;
        EXPECT_EQ(cache.v.get(at), v_new.get(r * Hv + h));
        written.push_back(at);
      }
  EXPECT_EQ(changed_elsewhere(cache.k, k_before, written), 0);
}

TEST(AppendKV, RefusesRowsPastTheCacheAndWritesNothing) {
  Rng rng(13);
  PagedCache cache(DType::f32, 16, 1, 8, 8, {{0, 1}, {2}}, {30, 3});
  HostTensor k_new(DType::f32, {2, 3, 1, 8}), v_new(DType::f32, {2, 3, 1, 8});
  k_new.fill_random(rng);
  v_new.fill_random(rng);
  const auto before = cache.k.snapshot();
  attnlab::AppendKVArgs a;
  a.k_new = k_new.view(), a.v_new = v_new.view(), a.paged = cache.view();
  attnlab::Context ctx;
  try {
    attnlab::append_kv(ctx, a);
    ADD_FAILURE() << "30 + 3 keys in a cache of 32 were accepted";
  } catch (const attnlab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 0: 30 cached + 3 new keys do not fit its cache of 32"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(cache.k.same_bytes(before));
  cache.lens.set(0, 20);
  cache.table.set(1, 7);  // sequence 0's second page, where rows 20 … 22 would land
  EXPECT_THROW(attnlab::append_kv(ctx, a), attnlab::Error);
  EXPECT_TRUE(cache.k.same_bytes(before));
}

// The loop an engine runs: each step appends one token's K/V per sequence to the paged cache, advances the
// lengths, and attends with that token's query against everything cached (bottom-right causal: the last query sees
// every key). Checked at every step against the fp64 reference over the keys appended so far.
TEST(AppendKV, DecodeLoopAgainstTheReference) {
  Rng rng(14);
  const std::int64_t B = 2, N = 4, K = 2, H = 32, page_size = 16, steps = 3;
  std::vector<std::int32_t> lengths = {15, 40};  // sequence 0 crosses into its second page at the first step
  PagedCache cache(DType::f32, page_size, K, H, H, {{2, 0}, {1, 4, 3}}, lengths);
  cache.k.fill_random(rng);
  cache.v.fill_random(rng);
  attnlab::Context ctx;
  HostTensor cu_q = int_tensor({0, 1, 2});
  for (std::int64_t step = 0; step < steps; ++step) {
    HostTensor k_new(DType::f32, {B, 1, K, H}), v_new(DType::f32, {B, 1, K, H}), q(DType::f32, {B, N, H});
    k_new.fill_random(rng);
    v_new.fill_random(rng);
    q.fill_random(rng);
    attnlab::AppendKVArgs append;
    append.k_new = k_new.view(), append.v_new = v_new.view(), append.paged = cache.view();
    attnlab::append_kv(ctx, append);
    for (std::int64_t b = 0; b < B; ++b) cache.lens.set(b, ++lengths[std::size_t(b)]);

    HostTensor o(DType::f32, {B, N, H}), lse(DType::f32, {N, B});
    o.poison();
    attnlab::VarlenForwardArgs attend;
    attend.q = q.view(), attend.cu_seqlens_q = cu_q.view(), attend.max_seqlen_q = 1;
    attend.paged = cache.view(), attend.max_seqlen_k = 64;
    attend.o = o.view(), attend.lse = lse.view();
    attend.options.mask.causal = true;
    attend.options.mask.align = attnlab::MaskAlign::bottom_right;
    attnlab::forward(ctx, attend);

    ref::Problem p;
    p.B = B, p.T = 1, p.S = 64, p.N = N, p.K = K, p.Hqk = H, p.Hv = H;
    p.scale = double(float(1.0 / std::sqrt(double(H))));
    p.causal = true, p.bottom_right = true;
    p.q_lens = {1, 1}, p.kv_lens = {lengths[0], lengths[1]};
    p.q = q.values();
    p.k.assign(std::size_t(B * 64 * K * H), 0.0);
    p.v = p.k;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t j = 0; j < lengths[std::size_t(b)]; ++j)
        for (std::int64_t kh = 0; kh < K; ++kh)
          for (std::int64_t h = 0; h < H; ++h) {
            p.k[std::size_t(((b * 64 + j) * K + kh) * H + h)] = cache.k.get(cache.at(b, j, kh, h, K, H));
            p.v[std::size_t(((b * 64 + j) * K + kh) * H + h)] = cache.v.get(cache.at(b, j, kh, h, K, H));
          }
    const ref::Forward f64 = ref::forward(p), same = ref::forward_in_dtype(p, DType::f32);
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_TRUE(meets_criterion("O", DType::f32, o.values(), f64.o, same.o));
    // lse is (N, B) here and (B, N, 1) in the reference.
    std::vector<double> lse64, lse_same;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t b = 0; b < B; ++b)
        lse64.push_back(f64.lse[std::size_t(b * N + n)]), lse_same.push_back(same.lse[std::size_t(b * N + n)]);
    EXPECT_TRUE(meets_criterion("LSE", DType::f32, lse.values(), lse64, lse_same));
  }
}

}  // namespace
}  // namespace attnlab_test
