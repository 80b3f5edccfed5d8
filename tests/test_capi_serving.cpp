// The serving calls through the C ABI (attnlab.h, ABI 4): attnlab_varlen_forward equals the C++ call bit for bit
// (packed and paged keys), attnlab_append_kv writes what the C++ append writes, the init functions default every
// field, and bad input comes back as a status with the C++ message.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "attnlab/attnlab.h"
#include "attnlab/serving.h"
#include "capi_util.h"
#include "test_support.h"

namespace attnlab_test {
namespace {

struct CContext {
  attnlab_context* ctx = nullptr;
  CContext() { EXPECT_EQ(attnlab_context_create(&ctx), ATTNLAB_OK); }
  ~CContext() { attnlab_context_destroy(ctx); }
};

TEST(CApiServing, InitDefaultsAndSizes) {
  attnlab_varlen_forward_args a;
  std::memset(&a, 0xAB, sizeof a);
  ASSERT_EQ(attnlab_varlen_forward_args_init(&a), ATTNLAB_OK);
  EXPECT_EQ(a.struct_size, sizeof a);
  EXPECT_EQ(a.q.data, nullptr);
  EXPECT_EQ(a.paged, nullptr);
  EXPECT_EQ(a.options, nullptr);
  EXPECT_EQ(a.has_workspace, 0);
  attnlab_paged_kv c;
  ASSERT_EQ(attnlab_paged_kv_init(&c), ATTNLAB_OK);
  EXPECT_EQ(c.struct_size, sizeof c);
  attnlab_append_kv_args b;
  EXPECT_EQ(attnlab_append_kv_args_init_sized(&b, sizeof b + 8), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("larger than this library's"), std::string::npos);
  EXPECT_EQ(attnlab_abi_version(), 5);
  EXPECT_EQ(a.sinks.data, nullptr);
}

TEST(CApiServing, VarlenForwardEqualsCpp) {
  Rng rng(41);
  const std::int64_t N = 4, K = 2, H = 32;
  HostTensor q(DType::bf16, {12, N, H}), k(DType::bf16, {20, K, H}), v(DType::bf16, {20, K, H});
  q.fill_random(rng), k.fill_random(rng), v.fill_random(rng);
  HostTensor cu_q = int_tensor({0, 5, 12}), cu_k = int_tensor({0, 9, 20});
  // The same keys in a paged cache of 8-key pages: sequence 0 on pages 3, 0; sequence 1 on pages 1, 4.
  HostTensor kc(DType::bf16, {5, 8, K, H}), vc(DType::bf16, {5, 8, K, H});
  kc.poison(), vc.poison();
  const std::vector<std::vector<int>> pages = {{3, 0}, {1, 4}};
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < (b == 0 ? 9 : 11); ++j)
      for (std::int64_t x = 0; x < K * H; ++x) {
        const std::int64_t src = ((b == 0 ? 0 : 9) + j) * K * H + x;
        if (j / 8 >= 2) continue;
        const std::int64_t dst = (pages[std::size_t(b)][std::size_t(j / 8)] * 8 + j % 8) * K * H + x;
        kc.set(dst, k.get(src)), vc.set(dst, v.get(src));
      }
  HostTensor table = int_tensor({3, 0, 1, 4}, 2), lens = int_tensor({9, 11});
  HostTensor sinks(DType::f32, {N});
  for (std::int64_t n = 0; n < N; ++n) sinks.set(n, 0.5 * double(n) - 1.0);
  // Paged with sinks (ABI 5); packed without, once from a caller of the ABI 4 layout whose struct ends before
  // sinks: what lies past its struct_size is not read.
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged, sinks" : "packed, ABI 4 caller");
    HostTensor o_cxx(DType::bf16, {12, N, H}), o_c(DType::bf16, {12, N, H});
    HostTensor lse_cxx(DType::f32, {N, 12}), lse_c(DType::f32, {N, 12});
    attnlab::VarlenForwardArgs cxx;
    cxx.q = q.view(), cxx.cu_seqlens_q = cu_q.view(), cxx.max_seqlen_q = 7, cxx.max_seqlen_k = 11;
    if (paged) {
      cxx.paged = attnlab::PagedKV{kc.view(), vc.view(), table.view(), lens.view()};
    } else {
      cxx.k = k.view(), cxx.v = v.view(), cxx.cu_seqlens_k = cu_k.view();
    }
    cxx.o = o_cxx.view(), cxx.lse = lse_cxx.view();
    if (paged) cxx.sinks = sinks.view();
    cxx.options.path = "cpu-naive";
    cxx.options.mask.causal = true;
    attnlab::Context ctx;
    attnlab::forward(ctx, cxx);

    attnlab_options opt;
    attnlab_options_init(&opt);
    opt.causal = 1;
    opt.path = "cpu-naive";
    attnlab_paged_kv cache;
    attnlab_paged_kv_init(&cache);
    cache.k_cache = to_c(kc.view()), cache.v_cache = to_c(vc.view());
    cache.block_table = to_c(table.view()), cache.seqlens = to_c(lens.view());
    attnlab_varlen_forward_args a;
    attnlab_varlen_forward_args_init(&a);
    a.q = to_c(q.view()), a.cu_seqlens_q = to_c(cu_q.view()), a.max_seqlen_q = 7, a.max_seqlen_k = 11;
    if (paged) {
      a.paged = &cache;
    } else {
      a.k = to_c(k.view()), a.v = to_c(v.view()), a.cu_seqlens_k = to_c(cu_k.view());
    }
    a.o = to_c(o_c.view()), a.lse = to_c(lse_c.view());
    a.options = &opt;
    if (paged) {
      a.sinks = to_c(sinks.view());
    } else {
      a.struct_size = offsetof(attnlab_varlen_forward_args, sinks);  // 680 on x86-64: the ABI 4 layout
      a.sinks = to_c(sinks.view());                                  // past the caller's struct: ignored
    }
    CContext c;
    char ran[32];
    ASSERT_EQ(attnlab_varlen_forward(c.ctx, &a, ran, sizeof ran), ATTNLAB_OK) << attnlab_last_error();
    EXPECT_STREQ(ran, "cpu-naive");
    EXPECT_TRUE(all_equal("O", o_c.values(), o_cxx.values()));
    EXPECT_TRUE(all_equal("LSE", lse_c.values(), lse_cxx.values()));
  }
  // Bad input: a status and the C++ message.
  HostTensor bad = int_tensor({0, 13, 12});
  attnlab_varlen_forward_args a;
  attnlab_varlen_forward_args_init(&a);
  HostTensor o(DType::bf16, {12, N, H});
  a.q = to_c(q.view()), a.cu_seqlens_q = to_c(bad.view()), a.max_seqlen_q = 20, a.max_seqlen_k = 20;
  a.k = to_c(k.view()), a.v = to_c(v.view()), a.cu_seqlens_k = to_c(cu_k.view()), a.o = to_c(o.view());
  CContext c;
  EXPECT_EQ(attnlab_varlen_forward(c.ctx, &a, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("cu_seqlens_q must not decrease"), std::string::npos)
      << attnlab_last_error();
  EXPECT_EQ(attnlab_varlen_forward(c.ctx, nullptr, nullptr, 0), ATTNLAB_INVALID_ARGUMENT);
}

TEST(CApiServing, AppendKVWritesWhatCppWrites) {
  Rng rng(42);
  HostTensor k_new(DType::f16, {2, 3, 1, 16}), v_new(DType::f16, {2, 3, 1, 16});
  k_new.fill_random(rng), v_new.fill_random(rng);
  HostTensor kc_cxx(DType::f16, {2, 10, 1, 16}), vc_cxx(DType::f16, {2, 10, 1, 16});
  kc_cxx.poison(), vc_cxx.poison();
  HostTensor kc_c = kc_cxx, vc_c = vc_cxx;
  HostTensor lens = int_tensor({2, 7});
  attnlab::AppendKVArgs cxx;
  cxx.k_new = k_new.view(), cxx.v_new = v_new.view();
  cxx.k_cache = kc_cxx.view(), cxx.v_cache = vc_cxx.view(), cxx.seqlens = lens.view();
  attnlab::Context ctx;
  attnlab::append_kv(ctx, cxx);
  attnlab_append_kv_args a;
  attnlab_append_kv_args_init(&a);
  a.k_new = to_c(k_new.view()), a.v_new = to_c(v_new.view());
  a.k_cache = to_c(kc_c.view()), a.v_cache = to_c(vc_c.view()), a.seqlens = to_c(lens.view());
  CContext c;
  ASSERT_EQ(attnlab_append_kv(c.ctx, &a), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_TRUE(kc_c.same_bytes(kc_cxx.snapshot()));
  EXPECT_TRUE(vc_c.same_bytes(vc_cxx.snapshot()));
  lens.set(1, 8);  // 8 + 3 > 10
  EXPECT_EQ(attnlab_append_kv(c.ctx, &a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("sequence 1: 8 cached + 3 new keys do not fit its cache of 10"),
            std::string::npos)
      << attnlab_last_error();
}

}  // namespace
}  // namespace attnlab_test
