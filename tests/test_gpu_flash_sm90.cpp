// The flash-sm90 path (the Hopper kernels, cuda/flash_sm90/) against the fp64 CPU reference, forced by name: the
// odd shapes (T = 1, S = 1, 113 × 203, 1023 × 1024, 4224 × 4224; head dim 128, most of them at 64, 96, 192, 256
// and 192/128 too) without a mask and with causal masks of both alignments, on the default and on a non-blocking
// stream; sliding windows, GQA/MQA, per-batch sequence lengths (host and device, NaN in the padding), softcap,
// shapes drawn at random through one context; query heads packed into one block (GQA/MQA at small T); each kernel
// version (s1 … s7, s11, s13, s15, s26) by index, s5's counter in a caller workspace; path flash choosing between
// the two families; and its refusals (rising row maxima: test_gpu_flash_sm90_softmax.cpp). The harness poisons
// every output, draws fresh inputs and checks for NaN. Skips visibly without a GPU of compute capability 9.0 (the
// kernels are sm_90a code).
#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "attnlab/version.h"  // ATTNLAB_WITH_CUDA, before it is tested below

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "cuda/flash_sm90/versions.h"  // version_exists, version_built: which versions run where
#include "device_mirror.h"
#include "harness.h"
#include "sm90_test_support.h"

namespace attnlab_test {
namespace {

struct Shape {
  std::int64_t T, S;
};
// dtype, shape, non-blocking stream, kernel version (Tuning::flash_config: 1 = s1 … 7 = s7, 11 = s11, 13 = s13,
// 15 = s15, 26 = s26), head dim
using GridParam = std::tuple<DType, Shape, bool, int, Heads>;

class GpuFlashSm90Grid : public ::testing::TestWithParam<GridParam> {};

// A version not built at a case's head dims (src/cuda/flash_sm90/versions.h, version_built: s3 not at 256, s5 not
// at 192/192 and 256, s6, s7 and s11 at 64 alone, s13 at 256 alone, s15 and s26 at 128 alone) must be refused by that
// rule, before any launch. Returns whether the version runs at the case's head dims.
bool runs_or_is_refused(const Case& c, int version) {
  if (attnlab::cuda::sm90::version_built(int(c.Hqk), int(c.Hv), version)) return true;
  expect_forward_refused_on_device(c, "is not built at head dims " + std::to_string(c.Hqk) + "/" +
                                          std::to_string(c.Hv));
  return false;
}

TEST_P(GpuFlashSm90Grid, MatchesReference) {
  ATTNLAB_REQUIRE_HOPPER();
  const auto& [dtype, shape, nonblocking, version, heads] = GetParam();
  ATTNLAB_TEST_RNG(rng);
  Case c = sm90_case(dtype, heads);
  c.T = shape.T, c.S = shape.S;
  c.context = &version_context(version);
  if (!runs_or_is_refused(c, version)) return;
  const bool big = shape.T * shape.S > 2'000'000, mid = shape.T * shape.S > 100'000;
  c.B = mid ? 1 : 2;
  c.N = big ? 1 : (mid ? 2 : 4);
  c.K = big ? 1 : (mid ? 1 : 2);
  if (nonblocking) {
    c.stream = nonblocking_stream();
    ASSERT_NE(c.stream, nullptr);
  }
  check_forward(c, rng);
  c.mask.causal = true;
  c.mask.align = attnlab::MaskAlign::bottom_right;
  check_forward(c, rng);
  if (!big) {
    c.mask.align = attnlab::MaskAlign::top_left;
    check_forward(c, rng);
  }
}

std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  const auto& [dtype, shape, nonblocking, version, heads] = info.param;
  return std::string(dtype_name(dtype)) + "_h" + heads_name(heads) + "_" + std::to_string(shape.T) + "x" +
         std::to_string(shape.S) + (nonblocking ? "_nonblocking" : "") + "_s" + std::to_string(version);
}

INSTANTIATE_TEST_SUITE_P(OddShapes, GpuFlashSm90Grid,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16),
                                            ::testing::Values(Shape{1, 1}, Shape{1, 7}, Shape{7, 1},
                                                              Shape{113, 203}, Shape{203, 113}, Shape{1023, 1024}),
                                            ::testing::Bool(), ::testing::Values(1, 2, 3, 4, 5, 15, 26),
                                            ::testing::Values(Heads{128, 128})),
                         grid_name);
// Head dims 64, 96 (the 64-byte swizzle), 192, 192/128 and 256 (key tiles of 128, 112 and 64 keys): most of the
// odd shapes, both streams, every version (s4 runs s2's kernel at these head dims but 256: ManyBlocksPerCta calls it
// there; its own 80-key tiles at 256 have the instantiation below).
INSTANTIATE_TEST_SUITE_P(HeadDims, GpuFlashSm90Grid,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16),
                                            ::testing::Values(Shape{1, 1}, Shape{7, 1}, Shape{113, 203},
                                                              Shape{1023, 1024}),
                                            ::testing::Bool(), ::testing::Values(1, 2, 3, 5, 6, 7, 11),
                                            ::testing::Values(Heads{64, 64}, Heads{96, 96}, Heads{192, 192},
                                                              Heads{192, 128}, Heads{256, 256})),
                         grid_name);
// s4 and s13 at head dim 256, FlashAttention-3's 80-key tiles (a 1024-key sequence ends 64 keys into its 13th
// tile), over the same shapes.
INSTANTIATE_TEST_SUITE_P(HeadDim256KeyTiles80, GpuFlashSm90Grid,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16),
                                            ::testing::Values(Shape{1, 1}, Shape{7, 1}, Shape{113, 203},
                                                              Shape{1023, 1024}),
                                            ::testing::Bool(), ::testing::Values(4, 13),
                                            ::testing::Values(Heads{256, 256})),
                         grid_name);
// s6, s7 and s11, built at head dim 64 alone: three consumer warpgroups (blocks of 192 rows; in s11 persistent
// CTAs), 256-key tiles (a 4224-key sequence ends 128 keys into its last tile), over the odd shapes the grid above
// does not run.
INSTANTIATE_TEST_SUITE_P(HeadDim64Only, GpuFlashSm90Grid,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16),
                                            ::testing::Values(Shape{1, 7}, Shape{203, 113}, Shape{4224, 4224}),
                                            ::testing::Bool(), ::testing::Values(6, 7, 11),
                                            ::testing::Values(Heads{64, 64})),
                         grid_name);
INSTANTIATE_TEST_SUITE_P(LongSequence, GpuFlashSm90Grid,
                         ::testing::Combine(::testing::Values(DType::bf16), ::testing::Values(Shape{4224, 4224}),
                                            ::testing::Bool(), ::testing::Values(1, 2, 3, 4, 5, 15, 26),
                                            ::testing::Values(Heads{128, 128})),
                         grid_name);

using DtypeVersion = std::tuple<DType, int>;
class GpuFlashSm90 : public ::testing::TestWithParam<DtypeVersion> {
 protected:
  void SetUp() override { ATTNLAB_REQUIRE_HOPPER(); }
  DType dtype() const { return std::get<0>(GetParam()); }
  int version() const { return std::get<1>(GetParam()); }
  // The version's main head dims: 128 where it is built there, else 64 (s6, s7, s11), else 256 (s13).
  Case base_case() const {
    for (const Heads heads : {Heads{128, 128}, Heads{64, 64}, Heads{256, 256}})
      if (attnlab::cuda::sm90::version_built(int(heads.qk), int(heads.v), version())) return sm90_case(dtype(), heads);
    throw std::logic_error("flash-sm90 version " + std::to_string(version()) + " is built at no tested head dim");
  }
};

// Windows (with and without causal), query heads sharing KV heads (GQA 6/2, MQA 4/1), LSE.
TEST_P(GpuFlashSm90, WindowsAndSharedKVHeads) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base_case();
  c.context = &version_context(version());
  c.B = 2, c.T = 300, c.S = 517, c.N = 6, c.K = 2;
  c.mask.window_left = 70, c.mask.window_right = 33;
  check_forward(c, rng);
  c.mask.causal = true;
  c.mask.align = attnlab::MaskAlign::bottom_right;
  c.mask.window_right = -1;
  check_forward(c, rng);
  c.N = 4, c.K = 1, c.mask = {};
  check_forward(c, rng);
  for (const Heads heads : {Heads{64, 64}, Heads{192, 128}, Heads{256, 256}}) {
    Case other = sm90_case(dtype(), heads);
    other.context = c.context;
    other.B = 2, other.T = 300, other.S = 517, other.N = 6, other.K = 2;
    other.mask.window_left = 70, other.mask.window_right = 33;
    if (runs_or_is_refused(other, version())) check_forward(other, rng);
  }
}

// Shapes drawn at random through one context: query blocks, key tiles and masks in every combination.
TEST_P(GpuFlashSm90, RandomShapesOneContext) {
  ATTNLAB_TEST_RNG(rng);
  attnlab::Context& shared = version_context(version());
  for (int i = 0; i < 30; ++i) {
    Case c = sm90_case(dtype(), kEveryHeads[rng.integer(0, int(std::size(kEveryHeads)) - 1)]);
    c.B = rng.integer(1, 3), c.T = rng.integer(1, 400), c.S = rng.integer(1, 400);
    c.N = 4, c.K = rng.chance(0.5) ? 4 : 2;
    c.mask.causal = rng.chance(0.5);
    c.mask.align = rng.chance(0.5) ? attnlab::MaskAlign::top_left : attnlab::MaskAlign::bottom_right;
    if (rng.chance(0.3)) c.mask.window_left = rng.integer(0, 100);
    c.context = &shared;
    if (runs_or_is_refused(c, version())) check_forward(c, rng);
  }
}

// More blocks than the GPU has SMs, so that a persistent CTA (s3) walks several: its pipeline steps, Q's barrier
// phases and the ping-pong turns continue from block to block. A bottom-right causal mask with T − S ≥ 128 gives
// blocks that see no key at all (O = 0, LSE = −inf) in the middle of a CTA's walk. Every head dim.
TEST_P(GpuFlashSm90, ManyBlocksPerCta) {
  ATTNLAB_TEST_RNG(rng);
  for (const Heads heads : kEveryHeads) {
    Case c = sm90_case(dtype(), heads);
    c.context = &version_context(version());
    c.B = 4, c.T = 300, c.S = 300, c.N = 40, c.K = 8;  // 3 · 40 · 4 = 480 blocks
    SCOPED_TRACE("head dims " + heads_name(heads));
    if (!runs_or_is_refused(c, version())) continue;
    check_forward(c, rng);
    c.mask.causal = true;
    check_forward(c, rng);
    Case empty_rows = sm90_case(dtype(), heads);
    empty_rows.context = c.context;
    empty_rows.B = 2, empty_rows.T = 1500, empty_rows.S = 200, empty_rows.N = 24, empty_rows.K = 24;  // 576 blocks
    empty_rows.mask.causal = true;
    empty_rows.mask.align = attnlab::MaskAlign::bottom_right;  // rows below 1300 see no key
    check_forward(empty_rows, rng);
    // Blocks of several key tiles (5 at 256 keys, the last holding 76) in CTAs that walk several blocks each: the
    // pipeline's slots and phases, and s7's P·V issued before the next Q·Kᵀ, carried from one block's last tile
    // into the next block's first.
    Case long_keys = sm90_case(dtype(), heads);
    long_keys.context = c.context;
    long_keys.B = 2, long_keys.T = 300, long_keys.S = 1100, long_keys.N = 40, long_keys.K = 8;  // 160 blocks or more
    check_forward(long_keys, rng);
    long_keys.mask.causal = true;
    long_keys.mask.align = attnlab::MaskAlign::bottom_right;
    check_forward(long_keys, rng);
    // Lengths that end inside a key tile (530 = 2 · 256 + 18), NaN in the padding: the last tile's V rows zeroed
    // in a slot whose pipeline step and phase were carried over from the CTA's earlier blocks.
    long_keys.mask = {};
    long_keys.q_lens = {300, 211};
    long_keys.kv_lens = {1100, 530};
    long_keys.nan_padding = true;
    check_forward(long_keys, rng);
  }
}

// Query heads packed into one block (GQA/MQA at T ≤ 64: src/cuda/flash_sm90/query_packing.h): groups of 2, 3 (at
// 128-row blocks 126 rows used, a second position block starting at 42), 4 (also a decode of 4 packed blocks), 8
// (1024 blocks, several per persistent CTA) and 16 (MQA), T = 1 … 64 against S = 1 … 300; without a mask, causal of
// both alignments, a sliding window; LSE; per-batch lengths with NaN padding at every head dim; packing turned off
// through the tuning.
TEST_P(GpuFlashSm90, PackedQueryHeads) {
  ATTNLAB_TEST_RNG(rng);
  struct Shape {
    std::int64_t B, T, S, N, K;
  };
  const Shape shapes[] = {{33, 1, 300, 32, 8}, {48, 7, 129, 24, 8}, {66, 64, 100, 6, 2},
                          {32, 64, 64, 64, 8}, {132, 33, 20, 16, 1}, {136, 1, 1, 8, 4},
                          {2, 1, 300, 8, 2}};
  for (const Shape& s : shapes) {
    Case c = base_case();
    c.context = &version_context(version());
    c.B = s.B, c.T = s.T, c.S = s.S, c.N = s.N, c.K = s.K;
    SCOPED_TRACE("B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " S " + std::to_string(s.S) +
                 " heads " + std::to_string(s.N) + "/" + std::to_string(s.K));
    check_forward(c, rng);
    c.mask.causal = true;
    c.mask.align = attnlab::MaskAlign::bottom_right;
    check_forward(c, rng);
    c.mask.align = attnlab::MaskAlign::top_left;
    c.mask.window_left = 5;
    check_forward(c, rng);
  }
  {
    // Tuning::flash_pack_query_heads = 0: the same kind of call unpacked.
    attnlab::Context unpacked;
    attnlab::Tuning tuning = unpacked.tuning();
    tuning.flash_config = version();
    tuning.flash_pack_query_heads = 0;
    unpacked.set_tuning(tuning);
    Case c = base_case();
    c.context = &unpacked;
    c.B = 33, c.T = 3, c.S = 300, c.N = 32, c.K = 8;
    SCOPED_TRACE("packing turned off");
    check_forward(c, rng);
    c.mask.causal = true;
    c.mask.align = attnlab::MaskAlign::bottom_right;
    check_forward(c, rng);
  }
  for (const Heads heads : kEveryHeads) {
    Case c = sm90_case(dtype(), heads);
    c.context = &version_context(version());
    c.B = 36, c.T = 40, c.S = 133, c.N = 12, c.K = 4;  // g = 3: 36 · 4 packed blocks
    c.q_lens.assign(36, 40);
    c.kv_lens.assign(36, 133);
    c.q_lens[1] = 17, c.q_lens[2] = 0, c.kv_lens[1] = 20, c.kv_lens[3] = 0;
    c.nan_padding = true;
    c.mask.causal = true;
    c.mask.align = attnlab::MaskAlign::bottom_right;
    SCOPED_TRACE("head dims " + heads_name(heads));
    if (runs_or_is_refused(c, version())) check_forward(c, rng);
  }
}

// Packing shows in the grid: at B = 8, T = 1, GQA 32/8, s5 packs 8 KV heads' query heads into 64 blocks, fewer
// than any Hopper GPU's SMs, and needs no block counter (workspace_size 0); with packing turned off the same call has
// 256 blocks of one head each and needs the counter. A packing rule that quietly left such a call unpacked fails
// here, where the outputs alone would not tell.
TEST(GpuFlashSm90Walk, PackedQueryHeadsShrinkTheGrid) {
  ATTNLAB_REQUIRE_HOPPER();
#if ATTNLAB_WITH_CUDA
  ATTNLAB_TEST_RNG(rng);
  attnlab::Context unpacked;
  attnlab::Tuning tuning = unpacked.tuning();
  tuning.flash_config = 5;
  tuning.flash_pack_query_heads = 0;
  unpacked.set_tuning(tuning);
  Case c = sm90_case(DType::bf16);
  c.B = 8, c.T = 1, c.S = 300, c.N = 32, c.K = 8;
  const Tensors t = make_inputs(c, rng);
  DeviceMirror mirror;
  const attnlab::ForwardArgs a = device_forward_args(c, t, mirror);
  EXPECT_EQ(attnlab::workspace_size(version_context(5), a), 0u) << "packed: 64 blocks, one CTA each";
  EXPECT_GE(attnlab::workspace_size(unpacked, a), 4u) << "unpacked: 256 blocks walked through the counter";
#endif
}

// s5's block counter lives in the call's scratch. With a caller workspace of workspace_size() bytes (at least the
// counter's 4 once the CTAs walk several blocks; none for a call of at most one block per SM) the call allocates
// nothing, and it is right twice in a row through the same bytes: the counter is zeroed for every launch (left at
// the first call's count, the second call's CTAs would skip blocks and leave their rows poisoned). One byte less
// is refused, naming the workspace, before anything is written.
TEST(GpuFlashSm90Walk, CounterInCallerWorkspace) {
  ATTNLAB_REQUIRE_HOPPER();
#if ATTNLAB_WITH_CUDA
  ATTNLAB_TEST_RNG(rng);
  attnlab::Context& ctx = version_context(5);
  Case few = sm90_case(DType::bf16);
  few.B = 1, few.T = 300, few.S = 300, few.N = 4, few.K = 2;  // 12 blocks
  {
    const Tensors t = make_inputs(few, rng);
    DeviceMirror mirror;
    EXPECT_EQ(attnlab::workspace_size(ctx, device_forward_args(few, t, mirror)), 0u);
  }
  Case c = sm90_case(DType::bf16);
  c.B = 4, c.T = 300, c.S = 300, c.N = 40, c.K = 8;  // 480 blocks
  c.mask.causal = true;
  void* lent = nullptr;
  std::size_t need = 0;
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    Tensors t = make_inputs(c, rng);  // fresh inputs, outputs poisoned
    const ExpectedForward expected = expected_forward(c, t);
    DeviceMirror mirror;
    attnlab::ForwardArgs a = device_forward_args(c, t, mirror);
    if (call == 0) {
      need = attnlab::workspace_size(ctx, a);
      ASSERT_GE(need, 4u);
      ASSERT_EQ(cudaMalloc(&lent, need), cudaSuccess);
      a.workspace = attnlab::DeviceBuffer{lent, need - 1};
      bool refused = false;
      try {
        attnlab::forward(ctx, a);
      } catch (const attnlab::Error& e) {
        refused = true;
        EXPECT_NE(std::string(e.what()).find("workspace"), std::string::npos) << e.what();
      }
      EXPECT_TRUE(refused) << "a workspace one byte short of " << need << " was taken";
      const std::vector<std::uint8_t> poisoned = t.o.snapshot();
      mirror.synchronize();
      mirror.download(t.o);
      EXPECT_TRUE(t.o.same_bytes(poisoned)) << "a refused call wrote O";
      continue;
    }
    a.workspace = attnlab::DeviceBuffer{lent, need};
    const attnlab::RunInfo info = attnlab::forward(ctx, a);
    EXPECT_EQ(info.device_allocations, 0);
    EXPECT_LE(info.workspace_bytes, need);
    mirror.synchronize();
    mirror.download(t.o);
    mirror.download(t.lse);
    check_forward_outputs(c, t, expected);
  }
  cudaFree(lent);
#endif
}

// Per-batch lengths at every head dim: a batch of full length, one whose keys end two rows into a key tile (its V
// rows past kv_len are padding inside the tile the kernel loads), one whose queries end one row into a block, one
// of no keys (O = 0, LSE = −inf) and one of no queries; NaN in every padding row, which no output may see
// (docs/design.md §2). Lengths on the device and on the host, the host ones also on a non-blocking stream (they
// are placed in the call's scratch in the stream's order).
TEST_P(GpuFlashSm90, SequenceLengths) {
  ATTNLAB_TEST_RNG(rng);
  for (const Heads heads : kEveryHeads) {
    Case c = sm90_case(dtype(), heads);
    c.context = &version_context(version());
    c.B = 5, c.T = 300, c.S = 517, c.N = 4, c.K = 2;
    c.q_lens = {300, 129, 64, 37, 0};
    c.kv_lens = {517, 130, 0, 66, 200};
    c.nan_padding = true;
    SCOPED_TRACE("head dims " + heads_name(heads));
    if (!runs_or_is_refused(c, version())) continue;
    check_forward(c, rng);
    c.mask.causal = true;
    c.mask.align = attnlab::MaskAlign::bottom_right;
    c.seqlens_on_device = false;
    check_forward(c, rng);
    c.stream = nonblocking_stream();
    c.mask.align = attnlab::MaskAlign::top_left;
    c.mask.window_left = 50;
    check_forward(c, rng);
  }
}

// Softcap (s = c · tanh(scale · q·k / c)), which every version runs as s1 (flash_sm90_path.cpp): scores spread wide
// enough that the cap decides the softmax, with and without masks, at head dims 64, 96, 128 and 256.
TEST_P(GpuFlashSm90, Softcap) {
  ATTNLAB_TEST_RNG(rng);
  for (const Heads heads : {Heads{64, 64}, Heads{96, 96}, Heads{128, 128}, Heads{256, 256}}) {
    Case c = sm90_case(dtype(), heads);
    c.context = &version_context(version());
    c.B = 2, c.T = 200, c.S = 333, c.N = 4, c.K = 2;
    c.softcap = 5.0f;
    c.input_scale = 2.0;
    SCOPED_TRACE("head dims " + heads_name(heads));
    check_forward(c, rng);  // s1 runs it at every version, s3's missing head dim 256 included
    c.mask.causal = true;
    c.kv_lens = {333, 150};
    c.nan_padding = true;
    check_forward(c, rng);
  }
}

// Scales of either sign and zero, with scores large enough that a softmax shifted by the wrong extreme overflows
// (s2 runs s1 for scale ≤ 0: launch.h). Against the sm_80 family too, which takes its maxima the same way, at its
// own tile choice (flash_config would name one of its configurations, of which head dim 128 has four).
TEST_P(GpuFlashSm90, AnyScale) {
  ATTNLAB_TEST_RNG(rng);
  attnlab::Context own_choice;
  for (const char* path : {"flash-sm90", "flash-sm80"}) {
    for (const float scale : {-4.0f, -0.09f, 0.0f, 0.09f, 4.0f}) {
      Case c = base_case();
      c.path = path;
      c.context = std::string(path) == "flash-sm90" ? &version_context(version()) : &own_choice;
      c.B = 1, c.T = 150, c.S = 260, c.N = 2, c.K = 2;
      c.scale = scale;
      c.input_scale = scale == 4.0f || scale == -4.0f ? 2.0 : 1.0;  // scores spread over ±2^9 in log2 units
      c.mask.causal = scale > 0.0f;
      SCOPED_TRACE(std::string(path) + " scale " + std::to_string(scale));
      check_forward(c, rng);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuFlashSm90,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                                            ::testing::Values(1, 2, 3, 4, 5, 6, 7, 11, 13, 15, 26)),
                         [](const ::testing::TestParamInfo<DtypeVersion>& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_s" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Path flash is the family: flash-sm90 where it takes the call, flash-sm80 otherwise (a bias, or a head dim
// flash-sm90 lacks, a tuning field that names an sm_80 configuration, or a small call: src/cuda/flash_family_rule.h);
// RunInfo names the member that ran. And
// auto puts flash-sm90 first where the policy measured it ahead: causal only at head dim 128, T and S ≥ 8192; head
// dim 96 from T = 2048.
TEST(GpuFlashFamily, FlashRunsSm90WhereItCanAndSm80Elsewhere) {
  ATTNLAB_REQUIRE_HOPPER();
  ATTNLAB_TEST_RNG(rng);
  Case c = sm90_case(DType::bf16);
  c.path = "flash";
  c.B = 1, c.T = 200, c.S = 300, c.N = 2, c.K = 1;
  c.expect_path = "flash-sm90";
  check_forward(c, rng);
  Case other = c;
  other.bias = BiasKind::f32;
  other.expect_path = "flash-sm80";
  check_forward(other, rng);
  other = c;
  other.Hqk = other.Hv = 32;
  other.expect_path = "flash-sm80";
  check_forward(other, rng);
  other = c;
  other.softcap = 20.0f;
  other.kv_lens = {250};
  other.expect_path = "flash-sm90";
  check_forward(other, rng);
  attnlab::Context tuned;
  attnlab::Tuning tuning = tuned.tuning();
  tuning.flash_config = 0;  // an sm_80 tile configuration
  tuned.set_tuning(tuning);
  other = c;
  other.context = &tuned;
  other.expect_path = "flash-sm80";
  check_forward(other, rng);

  // Small calls at head dim 64: the codelab's shape and 256 keys on flash-sm80; packed query heads (GQA, T ≤ 64)
  // and keys past 256 on flash-sm90.
  Case small = sm90_case(DType::bf16, {64, 64});
  small.path = "flash";
  small.B = 4, small.T = 128, small.S = 128, small.N = 8, small.K = 8;
  small.expect_path = "flash-sm80";
  check_forward(small, rng);
  small.mask.causal = true;
  check_forward(small, rng);
  small.mask.causal = false;
  small.T = 256, small.S = 256;
  check_forward(small, rng);
  small.T = 64, small.S = 128, small.K = 2;
  small.expect_path = "flash-sm90";
  check_forward(small, rng);
  small.B = 1, small.T = 300, small.S = 300, small.N = 2, small.K = 1;
  check_forward(small, rng);

  // auto at head dim 128 (the policy, src/core/dispatch_policy.cpp): flash-sm90 causal from T = 2048 and without a
  // mask from 4096, cudnn without a mask below. Only which path ran is checked here (the grid checks the numbers).
  attnlab::Context ctx;
  for (const int T : {2048, 4096}) {
    Case h128 = sm90_case(DType::bf16);
    h128.path = "auto";
    h128.B = 1, h128.T = T, h128.S = T, h128.N = 1, h128.K = 1;  // above the policy's 2^30 FLOPs
    const Tensors t = make_inputs(h128, rng);
    DeviceMirror mirror;
    EXPECT_EQ(attnlab::forward(ctx, device_forward_args(h128, t, mirror)).path, T >= 4096 ? "flash-sm90" : "cudnn")
        << "no mask, T = " << T;
    h128.mask.causal = true;
    EXPECT_EQ(attnlab::forward(ctx, device_forward_args(h128, t, mirror)).path, "flash-sm90") << "causal, T = " << T;
    mirror.synchronize();
  }
  // and at head dim 96 from T = 2048, with or without a causal mask.
  Case h96 = sm90_case(DType::bf16, {96, 96});
  h96.path = "auto";
  h96.B = 1, h96.T = 2048, h96.S = 2048, h96.N = 64, h96.K = 64;  // above the policy's 2^30 FLOPs
  const Tensors t96 = make_inputs(h96, rng);
  DeviceMirror mirror96;
  EXPECT_EQ(attnlab::forward(ctx, device_forward_args(h96, t96, mirror96)).path, "flash-sm90");
  h96.mask.causal = true;
  EXPECT_EQ(attnlab::forward(ctx, device_forward_args(h96, t96, mirror96)).path, "flash-sm90");
  mirror96.synchronize();
}

// What the path refuses, each with its rule, before any launch.
TEST(GpuFlashSm90Errors, RefusesWhatItDoesNotRun) {
  ATTNLAB_REQUIRE_HOPPER();
  Case c = sm90_case(DType::bf16);
  c.B = 1, c.T = 16, c.S = 16, c.N = 2, c.K = 2;
  Case other = c;
  other.Hqk = other.Hv = 32;
  expect_forward_refused_on_device(other, "head dims 32/32");
  other = c;
  other.Hv = 64;
  expect_forward_refused_on_device(other, "head dims 128/64");
  other = c;
  other.dtype = DType::f32;
  expect_forward_refused_on_device(other, "f32 inputs unsupported");
  other = c;
  other.bias = BiasKind::f32;
  expect_forward_refused_on_device(other, "bias and boolean masks");
  other = c;
  other.bias = BiasKind::bool_mask;
  expect_forward_refused_on_device(other, "bias and boolean masks");
  // A version index past the list or not kept (Tuning::flash_config), through why_not in a context tuned that way.
  attnlab::Context tuned;
  attnlab::Tuning tuning = tuned.tuning();
  ATTNLAB_TEST_RNG(rng);
  const Tensors t = make_inputs(c, rng);
  DeviceMirror mirror;
  // s0 retired, s8 … s10, s12, s14, s16, s20, s21, s24, s25 and s27 … s31 not kept, 17 … 19, 22 and 23 probes
  for (const int index : {0, 8, 9, 10, 12, 14, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 29, 30, 31}) {
    tuning.flash_config = index;
    tuned.set_tuning(tuning);
    const auto why = attnlab::why_not(tuned, "flash-sm90", device_forward_args(c, t, mirror));
    ASSERT_TRUE(why.has_value()) << index;
    EXPECT_NE(why->find("names no kernel version"), std::string::npos) << *why;
  }
}

}  // namespace
}  // namespace attnlab_test
