// The serving calls with CUDA tensors (include/attnlab/serving.h): append_kv's kernel against the CPU append on
// the same inputs (contiguous and paged caches, padded and packed new rows, device lengths, the default and a
// non-blocking stream), byte for byte, poisoned caches included; device lengths that point past a cache or a
// block-table entry outside it write nothing there; and varlen attention on GPU tensors refused by name. Skips
// visibly without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attnlab/serving.h"
#include "attnlab/version.h"  // ATTNLAB_WITH_CUDA
#include "device_mirror.h"
#include "test_support.h"

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace attnlab_test {
namespace {

struct AppendCase {
  bool paged = false, packed = false;
  HostTensor k_cache, v_cache, k_new, v_new, lens, table, cu;

  AppendCase(bool paged_, bool packed_, Rng& rng) : paged(paged_), packed(packed_) {
    const std::int64_t K = 2, Hqk = 64, Hv = 40;
    if (paged) {
      k_cache = HostTensor(DType::bf16, {6, 16, K, Hqk});
      v_cache = HostTensor(DType::bf16, {6, 16, K, Hv});
      table = int_tensor({4, 1, 0, 5, 2, 3}, 3);  // two sequences, three pages each, out of order
    } else {
      k_cache = HostTensor(DType::bf16, {2, 48, K, Hqk}, padded());
      v_cache = HostTensor(DType::bf16, {2, 48, K, Hv});
    }
    k_cache.poison();
    v_cache.poison();
    lens = int_tensor({14, 30});
    if (packed) {
      cu = int_tensor({0, 5, 12});
      k_new = HostTensor(DType::bf16, {12, K, Hqk});
      v_new = HostTensor(DType::bf16, {12, K, Hv});
    } else {
      k_new = HostTensor(DType::bf16, {2, 5, K, Hqk});
      v_new = HostTensor(DType::bf16, {2, 5, K, Hv}, padded());
    }
    k_new.fill_random(rng);
    v_new.fill_random(rng);
  }
  // The arguments over these host tensors, or over `m`'s device copies.
  attnlab::AppendKVArgs args(DeviceMirror* m) {
    auto view = [&](HostTensor& t) { return m ? m->upload(t) : t.view(); };
    attnlab::AppendKVArgs a;
    a.k_new = view(k_new), a.v_new = view(v_new);
    if (packed) a.cu_seqlens_new = view(cu);
    if (paged) {
      a.paged = attnlab::PagedKV{view(k_cache), view(v_cache), view(table), view(lens)};
    } else {
      a.k_cache = view(k_cache), a.v_cache = view(v_cache), a.seqlens = view(lens);
    }
    return a;
  }
};

#if ATTNLAB_WITH_CUDA
cudaStream_t nonblocking() {
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking);
    return created;
  }();
  return s;
}
#endif

TEST(GpuAppendKV, MatchesTheCpuAppendByteForByte) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  for (const bool paged : {false, true})
    for (const bool packed : {false, true})
      for (const bool other_stream : {false, true}) {
        SCOPED_TRACE(std::string(paged ? "paged" : "contiguous") + (packed ? " packed" : " padded") +
                     (other_stream ? " non-blocking stream" : ""));
        Rng rng(31);
        AppendCase expected(paged, packed, rng);
        Rng same(31);
        AppendCase on_gpu(paged, packed, same);
        attnlab::Context ctx;
        attnlab::append_kv(ctx, expected.args(nullptr));
        DeviceMirror mirror;
        const attnlab::AppendKVArgs a = on_gpu.args(&mirror);
        if (other_stream) ctx.set_stream(nonblocking());
        mirror.synchronize();  // the uploads ran on the legacy stream
        attnlab::append_kv(ctx, a);
        if (other_stream) {
          ASSERT_EQ(cudaStreamSynchronize(nonblocking()), cudaSuccess);
        }
        mirror.download(on_gpu.k_cache);
        mirror.download(on_gpu.v_cache);
        mirror.synchronize();
        EXPECT_TRUE(on_gpu.k_cache.same_bytes(expected.k_cache.snapshot()));
        EXPECT_TRUE(on_gpu.v_cache.same_bytes(expected.v_cache.snapshot()));
      }
#endif
}

// Device lengths are not read by the host: a length at the cache's capacity, or a block-table entry outside the
// cache, makes the kernel skip those rows. Nothing is written anywhere.
TEST(GpuAppendKV, DeviceLengthsOutOfRangeWriteNothing) {
  ATTNLAB_REQUIRE_GPU();
  Rng rng(32);
  AppendCase c(true, false, rng);
  c.lens.set(0, 48);   // sequence 0's three pages are full
  c.table.set(4, 77);  // sequence 1's second page: where its rows 30 … 34 would land (rows 16 … 31)
  c.table.set(5, -3);
  const auto k_before = c.k_cache.snapshot();
  DeviceMirror mirror;
  const attnlab::AppendKVArgs a = c.args(&mirror);
  attnlab::Context ctx;
  attnlab::append_kv(ctx, a);
  mirror.download(c.k_cache);
  mirror.synchronize();
  EXPECT_TRUE(c.k_cache.same_bytes(k_before));
}

TEST(GpuServing, VarlenAttentionOnGpuTensorsIsRefusedByName) {
  ATTNLAB_REQUIRE_GPU();
  HostTensor q(DType::bf16, {5, 2, 64}), k(DType::bf16, {6, 2, 64}), v(DType::bf16, {6, 2, 64}),
      o(DType::bf16, {5, 2, 64});
  HostTensor cu_q = int_tensor({0, 2, 5}), cu_k = int_tensor({0, 3, 6});
  DeviceMirror mirror;
  attnlab::VarlenForwardArgs a;
  a.q = mirror.upload(q), a.k = mirror.upload(k), a.v = mirror.upload(v), a.o = mirror.upload(o);
  a.cu_seqlens_q = mirror.upload(cu_q), a.cu_seqlens_k = mirror.upload(cu_k);
  a.max_seqlen_q = 3, a.max_seqlen_k = 3;
  attnlab::Context ctx;
  try {
    attnlab::forward(ctx, a);
    ADD_FAILURE() << "accepted";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(e.code(), attnlab::ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("run on the CPU paths so far"), std::string::npos) << e.what();
  }
  mirror.synchronize();
}

}  // namespace
}  // namespace attnlab_test
