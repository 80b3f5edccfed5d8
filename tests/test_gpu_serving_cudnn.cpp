// Packed and paged batches on the cudnn path (cuda/cudnn/cudnn_varlen.cpp: cuDNN's ragged and paged SDPA) against
// the fp64 reference: decode (queries gathered into a padded Q, a sequence without one), a few queries, prefill
// lengths (1, 113×203, 1023×1024), sequences without keys or without queries, MHA / GQA / MQA, paged caches of 16
// and 256 keys a page with pages out of order and shared, masks top-left, bottom-right and windowed; poisoned
// outputs, rows past the last sequence untouched, the default and a non-blocking stream. Then a caller workspace,
// device lengths out of range (memcheck runs that test) and the options the path refuses by rule. Skips visibly
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnlab/serving.h"
#include "attnlab/version.h"  // ATTNLAB_WITH_CUDA
#include "device_mirror.h"
#include "serving_batch.h"
#include "serving_gpu_run.h"
#include "test_support.h"

namespace attnlab_test {
namespace {

TEST(GpuVarlenForwardCudnn, MatchesTheReference) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  const std::vector<GpuVarlenCase> cases = {
      {"decode", {1, 1, 1}, {1, 1023, 5000}, 8, 2, 0, 0, false, 0.0f},
      {"decode paged 16, a sequence without keys", {1, 1, 1, 1}, {300, 1000, 77, 0}, 8, 2, 16, 0, false, 0.0f},
      {"decode paged 256 mqa", {1, 1}, {2100, 513}, 8, 1, 256, 0, false, 0.0f},
      {"decode, a sequence without queries", {1, 0, 1}, {100, 50, 2000}, 8, 2, 0, 1, false, 0.0f},
      {"few queries causal", {16, 3, 7}, {2000, 17, 700}, 8, 2, 0, 1, false, 0.0f},
      {"few queries paged causal", {4, 2}, {900, 64}, 8, 2, 16, 1, false, 0.0f},
      {"prefill", {1, 113, 1023, 0, 5}, {1, 203, 1024, 10, 0}, 4, 4, 0, 0, false, 0.0f},
      {"prefill causal top-left", {113, 1023}, {203, 1024}, 4, 2, 0, 2, false, 0.0f},
      {"prefill window mqa", {113, 300}, {203, 300}, 4, 1, 0, 3, false, 0.0f},
      {"prefill paged causal", {113, 64}, {203, 640}, 4, 2, 256, 1, false, 0.0f},
  };
  int run = 0;
  for (const std::int64_t head_dim : {64, 128})
    for (const DType dtype : {DType::bf16, DType::f16})
      for (const GpuVarlenCase& c : cases) {
        const bool other_stream = run++ % 2 == 1;
        SCOPED_TRACE(std::string(c.name) + ", head dim " + std::to_string(head_dim) + ", " + dtype_name(dtype) +
                     (other_stream ? ", non-blocking stream" : ""));
        Rng rng(7000 + std::uint64_t(run));
        Batch b = batch_of(c, head_dim, dtype, rng);
        const attnlab::Options o = options_of(c, "cudnn");
        EXPECT_EQ(run_on_gpu(b, o, other_stream).path, "cudnn");
        check_outputs(b, o);
      }
#endif
}

// Head dims the split-KV kernel has no instance for, Hqk ≠ Hv, and no LSE asked for.
TEST(GpuVarlenForwardCudnn, OtherHeadDimsAndNoLse) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  const std::pair<std::int64_t, std::int64_t> heads[] = {{96, 96}, {192, 128}, {256, 256}, {40, 40}};
  int run = 0;
  for (const auto& [hqk, hv] : heads) {
    SCOPED_TRACE("head dims " + std::to_string(hqk) + "/" + std::to_string(hv));
    Rng rng(7100 + std::uint64_t(run));
    Batch b;
    b.N = 4, b.K = 2, b.Hqk = hqk, b.Hv = hv, b.dtype = DType::bf16;
    b.q_lens = {1, 70, 3}, b.kv_lens = {500, 70, 129}, b.page_size = run % 2 == 1 ? 64 : 0;
    b.make(rng);
    attnlab::Options o;
    o.path = "cudnn";
    o.mask.causal = true;
    o.mask.align = attnlab::MaskAlign::bottom_right;
    EXPECT_EQ(run_on_gpu(b, o, run++ % 2 == 0).path, "cudnn");
    check_outputs(b, o);
  }
  Rng rng(7200);
  Batch b;
  b.N = 8, b.K = 2, b.Hqk = b.Hv = 128, b.dtype = DType::bf16;
  b.q_lens = {1, 1}, b.kv_lens = {4000, 0};
  b.make(rng);
  b.lse = HostTensor();  // no LSE: the graph writes no statistics, the finish kernel still clears the empty row
  attnlab::Options o;
  o.path = "cudnn";
  EXPECT_EQ(run_on_gpu(b, o, true).path, "cudnn");
  check_outputs(b, o);
#endif
}

// A caller workspace: workspace_size says what the call needs; with it a warm context allocates nothing, with
// 256 bytes less the call is refused by rule and nothing is written.
TEST(GpuVarlenForwardCudnn, CallerWorkspace) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  Rng rng(7300);
  Batch b;
  b.N = 8, b.K = 2, b.Hqk = b.Hv = 128, b.dtype = DType::bf16;
  b.q_lens = {1, 5}, b.kv_lens = {4000, 3000}, b.page_size = 64;
  b.make(rng);
  attnlab::Options o;
  o.path = "cudnn";
  attnlab::Context ctx;
  DeviceMirror mirror;
  const std::size_t bytes = attnlab::workspace_size(ctx, device_args(b, o, mirror));
  EXPECT_GT(bytes, 0u) << "the lengths, offsets and page table live in the workspace";
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, bytes), cudaSuccess);
  run_on_gpu(b, o, false, attnlab::DeviceBuffer{buffer, bytes}, nullptr, &ctx);  // makes the handle
  b.make(rng);
  const attnlab::RunInfo info = run_on_gpu(b, o, true, attnlab::DeviceBuffer{buffer, bytes}, nullptr, &ctx);
  EXPECT_EQ(info.device_allocations, 0);
  EXPECT_EQ(info.workspace_bytes, bytes);
  check_outputs(b, o);
  expect_workspace_refused(b, o, attnlab::DeviceBuffer{buffer, bytes - 256}, "workspace", nullptr, &ctx);
  cudaFree(buffer);
#endif
}

// Device lengths are the caller's to keep in range; out of range they must not make cuDNN read or write outside
// the tensors (memcheck runs this): lengths past the cache, block-table entries outside it, offsets past the packed
// rows. Rows outside every sequence stay untouched.
TEST(GpuVarlenForwardCudnn, DeviceLengthsOutOfRangeStayInBounds) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  Rng rng(7400);
  Batch b;
  b.N = 8, b.K = 2, b.Hqk = b.Hv = 64, b.dtype = DType::bf16;
  b.q_lens = {1, 2}, b.kv_lens = {40, 33}, b.page_size = 16;
  b.make(rng);
  b.seqlens.set(0, 1 << 20);
  b.block_table.set(1, 1 << 20);
  b.block_table.set(2, -5);
  attnlab::Options o;
  o.path = "cudnn";
  run_on_gpu(b, o, false);
  const std::vector<double> out = b.o.values();
  const std::int64_t spare_from = 3 * b.N * b.Hv;  // rows 3 … are past cu_seqlens_q[B] = 3
  for (std::size_t i = std::size_t(spare_from); i < out.size(); ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
  Batch packed = b;
  packed.page_size = 0;
  packed.make(rng);
  packed.cu_k.set(1, 1 << 30);
  packed.cu_q.set(2, 1 << 30);
  run_on_gpu(packed, o, true);

  // Decode (one query a sequence: Q gathered, packed keys read as one-row pages), paged and packed, with lengths,
  // block-table entries and key offsets out of range; the spare rows past cu_seqlens_q[B] = 3 stay untouched.
  for (const std::int64_t page_size : {16, 0}) {
    SCOPED_TRACE(page_size > 0 ? "decode, paged" : "decode, packed keys");
    Batch d;
    d.N = 8, d.K = 2, d.Hqk = d.Hv = 64, d.dtype = DType::bf16;
    d.q_lens = {1, 1, 1}, d.kv_lens = {40, 33, 70}, d.page_size = page_size;
    d.make(rng);
    if (page_size > 0) {
      d.seqlens.set(0, 1 << 20);
      d.block_table.set(1, 1 << 20);
      d.block_table.set(2, -5);
    } else {
      d.cu_k.set(1, 1 << 30);
      d.cu_k.set(2, -7);
    }
    run_on_gpu(d, o, page_size > 0);
    const std::vector<double> rows = d.o.values();
    for (std::size_t i = std::size_t(3 * d.N * d.Hv); i < rows.size(); ++i) EXPECT_TRUE(std::isnan(rows[i])) << i;
  }
#endif
}

// What auto chooses for packed and paged batches (core/dispatch_policy.h): a paged prefill whose 128-row blocks
// fill the GPU runs on cudnn (flash keeps it on the split-KV kernel), paged decode and packed prefill stay on
// flash's kernels.
TEST(GpuVarlenForwardCudnn, AutoRunsPagedPrefillOnCudnn) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  Rng rng(7600);
  Batch prefill;
  prefill.N = 8, prefill.K = 2, prefill.Hqk = prefill.Hv = 128, prefill.dtype = DType::bf16;
  prefill.q_lens = {1023, 1100, 2200}, prefill.kv_lens = {1500, 1100, 2300}, prefill.page_size = 64;
  prefill.make(rng);  // (8 + 9 + 18) · 8 = 280 blocks of 128 rows
  attnlab::Options causal;
  causal.mask.causal = true;
  causal.mask.align = attnlab::MaskAlign::bottom_right;
  EXPECT_EQ(run_on_gpu(prefill, causal, true).path, "cudnn");
  check_outputs(prefill, causal);
  causal.path = "flash";
  prefill.make(rng);
  EXPECT_EQ(run_on_gpu(prefill, causal, false).path, "flash-sm80");
  check_outputs(prefill, causal);

  Batch decode;
  decode.N = 8, decode.K = 2, decode.Hqk = decode.Hv = 128, decode.dtype = DType::bf16;
  decode.q_lens = std::vector<std::int64_t>(40, 1), decode.kv_lens = std::vector<std::int64_t>(40, 300);
  decode.page_size = 16;
  decode.make(rng);
  EXPECT_EQ(run_on_gpu(decode, {}, false).path, "flash-sm80");
  check_outputs(decode, {});
#endif
}

// What the path does not take, each refused by its rule before anything is written.
TEST(GpuVarlenForwardCudnn, RefusalsNameTheRule) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  Rng rng(7500);
  auto refusal = [&](DType dtype, bool sinks, float softcap) {
    Batch b;
    b.N = 4, b.K = 2, b.Hqk = b.Hv = 64, b.dtype = dtype;
    b.q_lens = {2, 3}, b.kv_lens = {5, 6}, b.with_sinks = sinks;
    b.make(rng);
    attnlab::Options o;
    o.path = "cudnn";
    o.softcap = softcap;
    const auto before = b.o.snapshot();
    try {
      run_on_gpu(b, o, false);
      return std::string("accepted");
    } catch (const attnlab::Error& e) {
      EXPECT_EQ(e.code(), attnlab::ErrorCode::unsupported) << e.what();
      EXPECT_TRUE(b.o.same_bytes(before));
      return std::string(e.what());
    }
  };
  EXPECT_NE(refusal(DType::f32, false, 0.0f).find("f16 and bf16"), std::string::npos);
  EXPECT_NE(refusal(DType::bf16, true, 0.0f).find("attention sinks"), std::string::npos);
  EXPECT_NE(refusal(DType::bf16, false, 30.0f).find("softcap"), std::string::npos);
#endif
}

}  // namespace
}  // namespace attnlab_test
