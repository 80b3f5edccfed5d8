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
#include "serving_batch.h"
#include "test_support.h"

namespace attnlab_test {
namespace {

using attnlab::MaskAlign;

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

// Attention sinks, with and without masks, packed and paged, a sequence with no key (O = 0, LSE = its sink).
TEST_P(VarlenForward, Sinks) {
  ATTNLAB_TEST_RNG(rng);
  for (int mask = 0; mask < 3; ++mask) {
    Batch b = batch({1, 7, 113, 2}, {1, 30, 113, 0}, mask == 2 ? 16 : 0);
    b.with_sinks = true;
    attnlab::Options o = options();
    o.mask.causal = mask >= 1;
    o.mask.align = MaskAlign::bottom_right;
    if (mask == 2) o.mask.window_left = 9;
    SCOPED_TRACE("mask " + std::to_string(mask));
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
