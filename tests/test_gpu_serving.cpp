// The serving calls with CUDA tensors (include/attnlab/serving.h): append_kv's kernel against the CPU append on
// the same inputs (contiguous and paged caches, padded and packed new rows, device lengths, the default and a
// non-blocking stream), byte for byte, poisoned caches included; device lengths that point past a cache or a
// block-table entry outside it write nothing there; and varlen attention on GPU tensors (the split-KV kernel)
// against the fp64 reference, with caller workspaces, device lengths out of range and refusals by rule; packed
// batches on the sm_90a kernel (flash-sm90) likewise, and what flash chooses between the two; the splits merged in
// thread-block clusters (sm_90). Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "attnlab/serving.h"
#include "attnlab/version.h"  // ATTNLAB_WITH_CUDA
#include "device_mirror.h"
#include "serving_batch.h"
#include "serving_gpu_run.h"
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

// Decode (one query per sequence against up to 5000 keys: the keys split across blocks and combined), a few
// queries per sequence (GQA-packed rows fill 64-row tiles), prefill lengths (T = 1, 113×203, 1023×1024), a
// sequence without keys and one without queries, MHA, GQA and MQA, paged caches of 16 and 256 keys a page with
// pages out of order and shared, sinks with and without masks, softcap. Every case with poisoned outputs, fresh
// inputs, on the default and on a non-blocking stream, against the fp64 reference.
TEST(GpuVarlenForward, MatchesTheReference) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  const std::vector<GpuVarlenCase> cases = {
      {"decode", {1, 1, 1}, {1, 1023, 5000}, 8, 2, 0, 0, false, 0.0f},
      {"decode paged 16 sinks", {1, 1, 1, 1}, {300, 1000, 77, 0}, 8, 2, 16, 0, true, 0.0f},
      {"decode paged 256 mqa", {1, 1}, {2100, 513}, 8, 1, 256, 0, false, 0.0f},
      {"few queries causal", {16, 3, 7}, {2000, 17, 700}, 8, 2, 0, 1, false, 0.0f},
      {"few queries paged sinks", {4, 2}, {900, 64}, 8, 2, 16, 1, true, 0.0f},
      {"prefill", {1, 113, 1023, 0, 5}, {1, 203, 1024, 10, 0}, 4, 4, 0, 0, false, 0.0f},
      {"prefill causal top-left", {113, 1023}, {203, 1024}, 4, 2, 0, 2, false, 0.0f},
      {"prefill window softcap", {113, 300}, {203, 300}, 4, 1, 0, 3, false, 30.0f},
      {"prefill paged causal sinks", {113, 64}, {203, 640}, 4, 2, 256, 1, true, 0.0f},
  };
  int run = 0;
  for (const std::int64_t head_dim : {64, 128, 256})
    for (const DType dtype : {DType::bf16, DType::f16})
      for (const GpuVarlenCase& c : cases) {
        const bool other_stream = run++ % 2 == 1;
        SCOPED_TRACE(std::string(c.name) + ", head dim " + std::to_string(head_dim) + ", " + dtype_name(dtype) +
                     (other_stream ? ", non-blocking stream" : ""));
        Rng rng(1000 + std::uint64_t(run));
        Batch b = batch_of(c, head_dim, dtype, rng);
        // The split-KV kernel; what flash and auto choose is FlashChoosesByTheBatch's.
        const attnlab::Options o = options_of(c, "flash-sm80");
        EXPECT_EQ(run_on_gpu(b, o, other_stream).path, "flash-sm80");
        check_outputs(b, o);
      }
#endif
}

// Packed batches on the sm_90a kernel (path flash-sm90): every head-dim pair it has, both element types, each
// kernel version built there (Tuning::flash_config; the 1023-row cases on s2 alone, their fp64 reference being the
// test's cost), sequences whose last block ends inside the next sequence's rows (those rows are copied out by the
// threads, not by a TMA box), lengths 0, 1, 113, 1023, masks, softcap, sinks, GQA and MQA; poisoned outputs, rows
// past the last sequence untouched, the default and a non-blocking stream, against the fp64 reference.
TEST(GpuVarlenForwardSm90, MatchesTheReference) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  if (!is_hopper()) GTEST_SKIP() << "flash-sm90 needs compute capability 9.0";
  const std::vector<GpuVarlenCase> cases = {
      {"prefill", {1, 113, 1023, 0, 5}, {1, 203, 1024, 10, 0}, 4, 4, 0, 0, false, 0.0f},
      {"prefill causal bottom-right gqa", {300, 129, 7}, {300, 700, 7}, 4, 2, 0, 1, false, 0.0f},
      {"prefill causal top-left", {113, 1023}, {203, 1024}, 4, 2, 0, 2, false, 0.0f},
      {"prefill window softcap mqa", {113, 300}, {203, 300}, 4, 1, 0, 3, false, 30.0f},
      {"prefill sinks causal", {200, 64, 1}, {203, 640, 0}, 4, 2, 0, 1, true, 0.0f},
      {"decode sinks", {1, 1, 1}, {1, 1023, 333}, 8, 2, 0, 0, true, 0.0f},
  };
  const std::pair<std::int64_t, std::int64_t> heads[] = {{64, 64}, {96, 96}, {128, 128}, {192, 128}, {192, 192},
                                                         {256, 256}};
  int run = 0;
  for (const auto& [hqk, hv] : heads)
    for (const DType dtype : {DType::bf16, DType::f16})
      for (const int version : {1, 2, 3, 4, 5, 6, 7, 11}) {
        // not built there (versions.h, version_built)
        if ((version == 3 || version == 5) && hqk == 256) continue;
        if ((version == 6 || version == 7 || version == 11) && hqk != 64) continue;
        if (version == 5 && hqk == 192 && hv == 192) continue;
        if (version == 4 && hqk != 128 && hqk != 256) continue;  // s4 differs from s2 at head dims 128 and 256 alone
        attnlab::Tuning tuning = attnlab::Tuning::from_environment();
        tuning.flash_config = version;
        for (const GpuVarlenCase& c : cases) {
          // The 1023-row sequences run on s2 alone: their fp64 reference is the test's cost.
          if (version != 2 && Batch::max(c.q_lens) > 512) continue;
          const bool other_stream = run++ % 2 == 1;
          SCOPED_TRACE(std::string(c.name) + ", head dims " + std::to_string(hqk) + "/" + std::to_string(hv) + ", " +
                       dtype_name(dtype) + ", s" + std::to_string(version) +
                       (other_stream ? ", non-blocking stream" : ""));
          Rng rng(5000 + std::uint64_t(run));
          Batch b;
          b.N = c.N, b.K = c.K, b.Hqk = hqk, b.Hv = hv, b.dtype = dtype;
          b.q_lens = c.q_lens, b.kv_lens = c.kv_lens, b.with_sinks = c.sinks;
          b.make(rng);
          const attnlab::Options o = options_of(c, "flash-sm90");
          EXPECT_EQ(run_on_gpu(b, o, other_stream, std::nullopt, &tuning).path, "flash-sm90");
          check_outputs(b, o);
        }
      }
#endif
}

// The block counter of s5 (head dim 128) and s11 (64; 192-row blocks, three consumer warpgroups) in a packed batch's
// scratch (src/cuda/flash_sm90/varlen.h): workspace_size says 16 bytes where the batch's blocks outnumber the SMs;
// through a caller workspace of that size the call allocates nothing and is right twice through the same bytes (the
// counter is zeroed for every launch: one left at the first call's count would leave rows poisoned); one byte less
// is refused before anything is written, and why_not says so first.
TEST(GpuVarlenForwardSm90, CounterInCallerWorkspace) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  if (!is_hopper()) GTEST_SKIP() << "flash-sm90 needs compute capability 9.0";
  struct Walk {
    int version;
    std::int64_t head_dim;
  };
  for (const Walk walk : {Walk{5, 128}, Walk{11, 64}}) {
    SCOPED_TRACE("s" + std::to_string(walk.version));
    attnlab::Context ctx;
    attnlab::Tuning tuning = ctx.tuning();
    tuning.flash_config = walk.version;
    ctx.set_tuning(tuning);
    Rng rng(79);
    Batch b;
    b.N = 32, b.K = 8, b.Hqk = b.Hv = walk.head_dim, b.dtype = DType::bf16;
    // 3 · 32 · 6 = 576 blocks of 128 rows, 2 · 32 · 6 = 384 of 192
    b.q_lens = {300, 17, 0, 260, 129, 1}, b.kv_lens = {300, 40, 5, 700, 129, 1000};
    b.make(rng);
    attnlab::Options o;
    o.path = "flash-sm90";
    o.mask.causal = true;
    o.mask.align = attnlab::MaskAlign::bottom_right;
    std::size_t bytes = 0;
    void* buffer = nullptr;
    {
      DeviceMirror mirror;
      attnlab::VarlenForwardArgs a = device_args(b, o, mirror);
      bytes = attnlab::workspace_size(ctx, a);
      ASSERT_EQ(bytes, 16u) << "384 or more blocks on a GPU of fewer SMs take their order from the counter";
      ASSERT_EQ(cudaMalloc(&buffer, bytes), cudaSuccess);
      a.workspace = attnlab::DeviceBuffer{buffer, bytes - 1};
      const auto why = attnlab::why_not(ctx, "flash-sm90", a);
      ASSERT_TRUE(why.has_value()) << "why_not accepted a workspace the call refuses";
      EXPECT_NE(why->find("workspace"), std::string::npos) << *why;
      a.workspace = attnlab::DeviceBuffer{buffer, bytes};
      EXPECT_FALSE(attnlab::why_not(ctx, "flash-sm90", a).has_value());
    }
    for (int call = 0; call < 2; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      b.make(rng);  // fresh inputs, outputs poisoned
      const attnlab::RunInfo info =
          run_on_gpu(b, o, call == 1, attnlab::DeviceBuffer{buffer, bytes}, &tuning, &ctx);
      EXPECT_EQ(info.path, "flash-sm90");
      EXPECT_EQ(info.device_allocations, 0);
      check_outputs(b, o);
    }
    b.make(rng);
    expect_workspace_refused(b, o, attnlab::DeviceBuffer{buffer, bytes - 1}, "workspace", &tuning, &ctx);
    cudaFree(buffer);
  }
#endif
}

// The copy-out of a sequence's last rows, small enough for the sanitizers (memcheck, racecheck and synccheck run
// it): sequences that end inside a 128-row block between other sequences, in the one-block-per-CTA (s2) and the
// persistent (s3) kernels, whose next block reuses the staged tile's shared memory.
TEST(GpuVarlenForwardSm90, PartialBlocksBetweenSequences) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  if (!is_hopper()) GTEST_SKIP() << "flash-sm90 needs compute capability 9.0";
  for (const int version : {2, 3}) {
    SCOPED_TRACE("s" + std::to_string(version));
    attnlab::Tuning tuning = attnlab::Tuning::from_environment();
    tuning.flash_config = version;
    Rng rng(93 + std::uint64_t(version));
    Batch b;
    b.N = 2, b.K = 1, b.Hqk = b.Hv = 64, b.dtype = DType::bf16;
    b.q_lens = {70, 1, 130, 64}, b.kv_lens = {70, 90, 129, 64};
    b.make(rng);
    attnlab::Options o;
    o.path = "flash-sm90";
    o.mask.causal = true;
    o.mask.align = attnlab::MaskAlign::bottom_right;
    EXPECT_EQ(run_on_gpu(b, o, version == 3, std::nullopt, &tuning).path, "flash-sm90");
    check_outputs(b, o);
  }
#endif
}

// What flash and auto choose (core/dispatch_policy.h, varlen_prefers_sm90): a prefill batch whose 128-row blocks
// fill the GPU runs on the sm_90a kernel, decode and paged caches on the split-KV kernel; paged caches on
// flash-sm90 and head dims only it has are refused or routed by rule.
TEST(GpuVarlenForwardSm90, FlashChoosesByTheBatch) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  if (!is_hopper()) GTEST_SKIP() << "flash-sm90 needs compute capability 9.0";
  Rng rng(91);
  Batch prefill;
  prefill.N = 8, prefill.K = 2, prefill.Hqk = prefill.Hv = 128, prefill.dtype = DType::bf16;
  prefill.q_lens = {1023, 1100, 2200}, prefill.kv_lens = {1023, 1100, 2200};  // (8 + 9 + 18) · 8 = 280 blocks
  prefill.make(rng);
  attnlab::Options causal;
  causal.path = "flash";
  causal.mask.causal = true;
  EXPECT_EQ(run_on_gpu(prefill, causal, true).path, "flash-sm90");
  check_outputs(prefill, causal);

  Batch decode;
  decode.N = 8, decode.K = 2, decode.Hqk = decode.Hv = 128, decode.dtype = DType::bf16;
  decode.q_lens = std::vector<std::int64_t>(40, 1), decode.kv_lens = std::vector<std::int64_t>(40, 300);
  decode.make(rng);
  EXPECT_EQ(run_on_gpu(decode, {}, false).path, "flash-sm80");
  check_outputs(decode, {});

  Batch h96;  // head dim 96: the split-KV kernel has no instance, the sm_90a kernel has
  h96.N = 4, h96.K = 2, h96.Hqk = h96.Hv = 96, h96.dtype = DType::f16;
  h96.q_lens = {3, 1}, h96.kv_lens = {70, 5};
  h96.make(rng);
  EXPECT_EQ(run_on_gpu(h96, {}, false).path, "flash-sm90");
  check_outputs(h96, {});

  Batch paged;
  paged.N = 4, paged.K = 2, paged.Hqk = paged.Hv = 64, paged.dtype = DType::bf16;
  paged.q_lens = {200, 3}, paged.kv_lens = {300, 40}, paged.page_size = 16;
  paged.make(rng);
  attnlab::Options sm90;
  sm90.path = "flash-sm90";
  try {
    run_on_gpu(paged, sm90, false);
    ADD_FAILURE() << "flash-sm90 accepted a paged cache";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(e.code(), attnlab::ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("paged KV caches run on the split-KV kernel"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(run_on_gpu(paged, {}, false).path, "flash-sm80");
  check_outputs(paged, {});
#endif
}

// A caller workspace: workspace_size says what a split decode needs; with it the call allocates nothing, with
// one byte less flash-sm80 refuses it by rule before anything is written (auto would go on to a kernel that needs
// none).
TEST(GpuVarlenForward, CallerWorkspace) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  Rng rng(77);
  Batch b;
  b.N = 8, b.K = 2, b.Hqk = b.Hv = 128, b.dtype = DType::bf16;
  b.q_lens = {1, 1}, b.kv_lens = {4000, 3000};
  b.make(rng);
  attnlab::Context ctx;
  DeviceMirror mirror;
  const std::size_t bytes = attnlab::workspace_size(ctx, device_args(b, {}, mirror));
  EXPECT_GT(bytes, 0u) << "two sequences on eight KV-head blocks should split their keys";
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, bytes), cudaSuccess);
  b.make(rng);
  const attnlab::RunInfo info = run_on_gpu(b, {}, false, attnlab::DeviceBuffer{buffer, bytes});
  EXPECT_EQ(info.device_allocations, 0);
  EXPECT_EQ(info.workspace_bytes, bytes);
  check_outputs(b, {});
  attnlab::Options split_kv;
  split_kv.path = "flash-sm80";
  expect_workspace_refused(b, split_kv, attnlab::DeviceBuffer{buffer, bytes - 256}, "bytes of workspace");
  cudaFree(buffer);
#endif
}

// The split-KV kernel's splits merged in thread-block clusters instead of the combine kernel (sm_90, with
// Tuning::split_kv_cluster_merge; src/cuda/serving/split_kv_splits.h's rule): decode at batch 1 whose splits are
// one key tile each, and forced counts of 2–16 at any length (clusters of 2, 3 and 16), against the fp64
// reference — one and four warps of rows (decode, 16 queries of GQA), odd lengths, a sequence without keys, packed
// and paged keys, sinks, causal, MQA, head dims 64 and 128, both element types, the default and a non-blocking
// stream, poisoned outputs. A cluster merge needs no workspace: workspace_size says 0 where the plan merges in
// clusters, more where a forced count above 16 keeps the combine.
TEST(GpuVarlenForward, SplitsMergeInClusters) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  if (!is_hopper()) GTEST_SKIP() << "thread-block clusters merge splits on compute capability 9.0";
  struct ClusterCase {
    GpuVarlenCase c;
    int forced;  // Tuning::split_kv_splits (0: the plan's own count)
  };
  const std::vector<ClusterCase> cases = {
      {{"decode 1024 keys", {1}, {1024}, 32, 8, 0, 0, false, 0.0f}, 0},
      {{"decode 1000 keys paged 16 sinks", {1}, {1000}, 32, 8, 16, 0, true, 0.0f}, 0},
      {{"decode odd lengths forced 3", {1, 1, 1, 1}, {1, 1023, 700, 0}, 8, 2, 0, 0, true, 0.0f}, 3},
      {{"decode mqa paged 256 forced 16", {1, 1}, {4000, 513}, 8, 1, 256, 0, false, 0.0f}, 16},
      {{"few queries causal forced 2", {16, 3}, {2000, 17}, 8, 2, 0, 1, false, 0.0f}, 2},
  };
  int run = 0;
  for (const std::int64_t head_dim : {64, 128})
    for (const DType dtype : {DType::bf16, DType::f16})
      for (const ClusterCase& cc : cases) {
        const GpuVarlenCase& c = cc.c;
        const bool other_stream = run++ % 2 == 1;
        SCOPED_TRACE(std::string(c.name) + ", head dim " + std::to_string(head_dim) + ", " + dtype_name(dtype) +
                     (other_stream ? ", non-blocking stream" : ""));
        Rng rng(9000 + std::uint64_t(run));
        Batch b = batch_of(c, head_dim, dtype, rng);
        attnlab::Tuning tuning = attnlab::Tuning::from_environment();
        tuning.split_kv_cluster_merge = 1;
        tuning.split_kv_splits = cc.forced;
        attnlab::Context ctx;
        ctx.set_tuning(tuning);
        const attnlab::Options o = options_of(c, "flash-sm80");
        DeviceMirror mirror;
        EXPECT_EQ(attnlab::workspace_size(ctx, device_args(b, o, mirror)), 0u) << "the splits merge in clusters";
        EXPECT_EQ(run_on_gpu(b, o, other_stream, std::nullopt, &tuning).path, "flash-sm80");
        check_outputs(b, o);
      }

  // Where the rule keeps the combine, the call needs its workspace: 32k keys at batch 1 (32 splits of 16 tiles),
  // a forced count above 16, and the tuning off.
  Rng rng(9100);
  Batch b;
  b.N = 32, b.K = 8, b.Hqk = b.Hv = 128, b.dtype = DType::bf16;
  b.q_lens = {1}, b.kv_lens = {32768};
  b.make(rng);
  DeviceMirror mirror;
  const attnlab::VarlenForwardArgs long_keys = device_args(b, {}, mirror);
  attnlab::Tuning tuning = attnlab::Tuning::from_environment();
  tuning.split_kv_cluster_merge = 1;
  attnlab::Context ctx;
  ctx.set_tuning(tuning);
  EXPECT_GT(attnlab::workspace_size(ctx, long_keys), 0u);
  b.kv_lens = {1024};
  b.make(rng);
  const attnlab::VarlenForwardArgs short_keys = device_args(b, {}, mirror);
  EXPECT_EQ(attnlab::workspace_size(ctx, short_keys), 0u);
  tuning.split_kv_splits = 17;
  ctx.set_tuning(tuning);
  EXPECT_GT(attnlab::workspace_size(ctx, short_keys), 0u);
  tuning.split_kv_splits = 0;
  tuning.split_kv_cluster_merge = 0;
  ctx.set_tuning(tuning);
  EXPECT_GT(attnlab::workspace_size(ctx, short_keys), 0u);
#endif
}

// The combine kernel over every count of splits it can meet: it takes them in groups of 32, so counts around a
// group's edges (31, 32, 33), a last group partly full (97) and the plan's cap (128), with sinks, at head dims 64
// and 128, the default and a non-blocking stream, poisoned outputs. The longest sequence has as many key tiles as
// the count (its last one partly full), so that the forced count is the one that runs — the plan rounds a count to
// equal runs of tiles, and the workspace it asks for says how many; the other sequence's keys end in the first
// third, so most of its splits saw no key. The cluster merge is off, so every count runs the combine.
TEST(GpuVarlenForward, CombineTakesEveryCount) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  int run = 0;
  for (const std::int64_t head_dim : {64, 128})
    for (const int splits : {2, 31, 32, 33, 97, 128}) {
      const bool other_stream = run++ % 2 == 1;
      SCOPED_TRACE(std::to_string(splits) + " splits, head dim " + std::to_string(head_dim) +
                   (other_stream ? ", non-blocking stream" : ""));
      const std::int64_t long_keys = 64 * splits - 5, short_keys = 64 * splits / 3 + 7;
      const GpuVarlenCase c{"decode sinks", {1, 1}, {long_keys, short_keys}, 8, 2, 0, 0, true, 0.0f};
      Rng rng(9200 + std::uint64_t(run));
      Batch b = batch_of(c, head_dim, DType::bf16, rng);
      attnlab::Tuning tuning = attnlab::Tuning::from_environment();
      tuning.split_kv_cluster_merge = 0;
      tuning.split_kv_splits = splits;
      const attnlab::Options o = options_of(c, "flash-sm80");
      attnlab::Context ctx;
      ctx.set_tuning(tuning);
      DeviceMirror mirror;
      // Each split leaves every (query row, head) its O row and LSE in f32 — every row of q, the spare rows past
      // the last sequence included (the layout's total_q); the pieces are rounded up to 256 bytes, less than a
      // split's share.
      const std::int64_t q_rows = std::accumulate(b.q_lens.begin(), b.q_lens.end(), b.spare_rows);
      const std::size_t split_bytes = std::size_t(q_rows * c.N) * std::size_t(head_dim + 1) * sizeof(float);
      EXPECT_EQ(attnlab::workspace_size(ctx, device_args(b, o, mirror)) / split_bytes, std::size_t(splits))
          << "the count of splits the call runs";
      EXPECT_EQ(run_on_gpu(b, o, other_stream, std::nullopt, &tuning).path, "flash-sm80");
      check_outputs(b, o);
    }
#endif
}

// Device lengths are the caller's to keep in range; out of range they must not make the kernel read or write
// outside the tensors (memcheck runs this): lengths past the cache, a block-table entry outside it, offsets past
// the packed rows. Rows outside every sequence stay untouched.
TEST(GpuVarlenForward, DeviceLengthsOutOfRangeStayInBounds) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  Rng rng(78);
  Batch b;
  b.N = 8, b.K = 2, b.Hqk = b.Hv = 64, b.dtype = DType::bf16;
  b.q_lens = {1, 2}, b.kv_lens = {40, 33}, b.page_size = 16;
  b.make(rng);
  b.seqlens.set(0, 1 << 20);
  b.block_table.set(1, 1 << 20);
  b.block_table.set(2, -5);
  run_on_gpu(b, {}, false);
  const std::vector<double> o = b.o.values();
  const std::int64_t spare_from = 3 * b.N * b.Hv;  // rows 3 … are past cu_seqlens_q[B] = 3
  for (std::size_t i = std::size_t(spare_from); i < o.size(); ++i) EXPECT_TRUE(std::isnan(o[i])) << i;
  // Offsets past the packed rows: the lengths clamp to the tensors (what the rows then hold is unspecified).
  Batch packed = b;
  packed.page_size = 0;
  packed.make(rng);
  packed.cu_k.set(1, 1 << 30);
  packed.cu_q.set(2, 1 << 30);
  run_on_gpu(packed, {}, true);
  if (is_hopper()) {
    attnlab::Options sm90;
    sm90.path = "flash-sm90";
    run_on_gpu(packed, sm90, true);
  }
#endif
}

// Paths and shapes the kernel does not run, each refused by its rule.
TEST(GpuVarlenForward, RefusalsNameTheRule) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  Rng rng(79);
  auto refusal = [&](DType dtype, std::int64_t hqk, std::int64_t hv, const std::string& path) {
    Batch b;
    b.N = 4, b.K = 2, b.Hqk = hqk, b.Hv = hv, b.dtype = dtype;
    b.q_lens = {2, 3}, b.kv_lens = {5, 6};
    b.make(rng);
    attnlab::Options o;
    o.path = path;
    try {
      run_on_gpu(b, o, false);
      return std::string("accepted");
    } catch (const attnlab::Error& e) {
      EXPECT_EQ(e.code(), attnlab::ErrorCode::unsupported) << e.what();
      return std::string(e.what());
    }
  };
  EXPECT_NE(refusal(DType::f32, 64, 64, "flash").find("f16 and bf16"), std::string::npos);
  EXPECT_NE(refusal(DType::bf16, 40, 40, "auto").find("head dims 64, 128 and 256"), std::string::npos);
  EXPECT_NE(refusal(DType::bf16, 40, 40, "flash-sm80").find("head dims 64, 128 and 256"), std::string::npos);
  EXPECT_NE(refusal(DType::bf16, 64, 32, "flash").find("Hqk = Hv"), std::string::npos);
  EXPECT_NE(refusal(DType::bf16, 64, 64, "cuda-naive").find("run on path flash"), std::string::npos);
  EXPECT_NE(refusal(DType::bf16, 64, 64, "cpu-flash").find("run on path flash"), std::string::npos);
#endif
}

}  // namespace
}  // namespace attnlab_test
