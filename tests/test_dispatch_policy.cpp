// auto's policy table (src/core/dispatch_policy.cpp) on every kind of call, including GPUs no test machine has:
// which row applies, the order it gives, and that every row names paths that exist and cites its evidence. Like
// test_flash_configs, this reads the library's plain-C++ policy directly; what auto then runs is tested through the
// public API (test_api, and GpuAuto on a GPU).
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "core/dispatch_policy.h"

namespace {

using attnlab::Device;
using attnlab::DType;
using attnlab::core::CallTraits;
using attnlab::core::Direction;

std::vector<std::string> order_for(const CallTraits& t) {
  std::vector<std::string> out;
  for (std::string_view name : attnlab::core::policy_row(t).order)
    if (!name.empty()) out.emplace_back(name);
  return out;
}

CallTraits gpu(Direction dir, DType dtype, double flops, int cc) {
  CallTraits t;
  t.device = Device::cuda;
  t.direction = dir;
  t.dtype = dtype;
  t.flops = flops;
  t.cc = cc;
  return t;
}

const double kSmall = 4.0 * 4 * 8 * 128 * 128 * 64;  // the codelab default: 2^27 FLOPs
const double kLarge = 4.0 * 2 * 16 * 8192 * 8192 * 128;

TEST(DispatchPolicy, CpuCallsPreferCpuFlash) {
  CallTraits t;
  t.device = Device::cpu;
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    t.dtype = d;
    EXPECT_EQ(order_for(t), (std::vector<std::string>{"cpu-flash", "cpu-naive"}));
  }
}

TEST(DispatchPolicy, SmallHalfForwardPrefersFlashOnEveryGpu) {
  for (int cc : {80, 86, 89, 90, 100})
    for (DType d : {DType::f16, DType::bf16})
      EXPECT_EQ(order_for(gpu(Direction::forward, d, kSmall, cc)),
                (std::vector<std::string>{"flash", "cudnn", "cuda-naive"}))
          << "cc " << cc;
}

TEST(DispatchPolicy, LargeHalfForwardPrefersCudnnAndSaysWhereItWasMeasured) {
  const auto& hopper = attnlab::core::policy_row(gpu(Direction::forward, DType::bf16, kLarge, 90));
  const auto& ampere = attnlab::core::policy_row(gpu(Direction::forward, DType::bf16, kLarge, 80));
  EXPECT_EQ(order_for(gpu(Direction::forward, DType::bf16, kLarge, 90)),
            (std::vector<std::string>{"cudnn", "flash", "cuda-naive"}));
  EXPECT_NE(&hopper, &ampere) << "cc 8.x has no measurement of its own; its row must say so";
  EXPECT_NE(std::string(ampere.evidence).find("not measured"), std::string::npos) << ampere.evidence;
  // The threshold is inclusive: 2^30 FLOPs is still small.
  EXPECT_EQ(order_for(gpu(Direction::forward, DType::f16, double(1 << 30), 90)).front(), "flash");
  EXPECT_EQ(order_for(gpu(Direction::forward, DType::f16, double(1 << 30) * 1.01, 90)).front(), "cudnn");
}

// Each change of a call that flash-sm90 leads must hand the lead back to cudnn.
void expect_cudnn_first_after_each(const CallTraits& t, std::initializer_list<void (*)(CallTraits&)> changes) {
  for (auto change : changes) {
    CallTraits other = t;
    change(other);
    EXPECT_EQ(order_for(other).front(), "cudnn") << attnlab::core::policy_row(other).applies;
  }
}

// Where flash-sm90 measured ahead of cudnn: causal only, head dims 128 and 256 with T and S ≥ 2048, 192 and 192/128
// with T and S ≥ 8192, on cc 9.0 alone. A window, another head dim, a shorter sequence or another GPU keeps cudnn
// first.
TEST(DispatchPolicy, LongCausalOnHopperPrefersFlashSm90) {
  CallTraits t = gpu(Direction::forward, DType::bf16, kLarge, 90);
  t.T = t.S = 8192, t.Hqk = t.Hv = 128, t.causal_only = true;
  EXPECT_EQ(order_for(t), (std::vector<std::string>{"flash-sm90", "cudnn", "flash", "cuda-naive"}));
  t.dtype = DType::f16;
  EXPECT_EQ(order_for(t).front(), "flash-sm90");
  CallTraits wide = t;
  wide.Hqk = wide.Hv = 256;
  EXPECT_EQ(order_for(wide).front(), "flash-sm90");
  wide.Hqk = wide.Hv = 192;
  EXPECT_EQ(order_for(wide).front(), "flash-sm90");
  wide.Hv = 128;
  EXPECT_EQ(order_for(wide).front(), "flash-sm90");
  CallTraits shorter = t;
  shorter.T = shorter.S = 2048;
  EXPECT_EQ(order_for(shorter).front(), "flash-sm90") << "head dim 128 from T = 2048";
  shorter.T = 1024;
  EXPECT_EQ(order_for(shorter).front(), "cudnn") << "head dim 128 only from T = 2048";
  shorter.T = 2048, shorter.S = 2047;
  EXPECT_EQ(order_for(shorter).front(), "cudnn") << "head dim 128 only from S = 2048";
  shorter.S = 4096;
  CallTraits other = shorter;
  other.Hqk = other.Hv = 192;
  EXPECT_EQ(order_for(other).front(), "cudnn") << "head dim 192 only from T = 8192";
  other.Hqk = other.Hv = 256;
  EXPECT_EQ(order_for(other).front(), "flash-sm90") << "head dim 256 from T = 2048";
  other.T = other.S = 2048;
  EXPECT_EQ(order_for(other).front(), "flash-sm90");
  other.S = 2047;
  EXPECT_EQ(order_for(other).front(), "cudnn") << "head dim 256 only from S = 2048";
  other.S = 2048, other.T = 1024;
  EXPECT_EQ(order_for(other).front(), "cudnn") << "head dim 256 only from T = 2048";
  expect_cudnn_first_after_each(t, {+[](CallTraits& c) { c.causal_only = false; }, +[](CallTraits& c) { c.T = 1024; },
                                    +[](CallTraits& c) { c.S = 1024; }, +[](CallTraits& c) { c.Hqk = c.Hv = 64; },
                                    +[](CallTraits& c) { c.Hv = 64; }, +[](CallTraits& c) { c.Hqk = 256; },
                                    +[](CallTraits& c) { c.Hqk = 192, c.Hv = 64; },
                                    +[](CallTraits& c) { c.Hqk = 96; }, +[](CallTraits& c) { c.cc = 89; },
                                    +[](CallTraits& c) { c.cc = 100; }});
}

// Head dim 128 without a mask: flash-sm90 first from T and S ≥ 4096 on cc 9.0 alone (1.04–1.07× cudnn there,
// level or behind below); any mask or modifier, a shorter sequence or another GPU keep cudnn first.
TEST(DispatchPolicy, HeadDim128UnmaskedOnHopperPrefersFlashSm90FromT4096) {
  CallTraits t = gpu(Direction::forward, DType::bf16, kLarge, 90);
  t.T = t.S = 4096, t.Hqk = t.Hv = 128, t.unmasked = true;
  EXPECT_EQ(order_for(t), (std::vector<std::string>{"flash-sm90", "cudnn", "flash", "cuda-naive"}));
  t.dtype = DType::f16;
  EXPECT_EQ(order_for(t).front(), "flash-sm90");
  expect_cudnn_first_after_each(t, {+[](CallTraits& c) { c.unmasked = false; }, +[](CallTraits& c) { c.T = 2048; },
                                    +[](CallTraits& c) { c.S = 4095; }, +[](CallTraits& c) { c.Hv = 64; },
                                    +[](CallTraits& c) { c.Hqk = c.Hv = 64; }, +[](CallTraits& c) { c.cc = 89; },
                                    +[](CallTraits& c) { c.cc = 100; }});
}

// Head dim 96, where cudnn is slowest of its head dims: flash-sm90 first without a mask and causal, T and S ≥ 2048,
// on cc 9.0 alone; a window, lengths, a shorter sequence or another GPU keep cudnn first.
TEST(DispatchPolicy, HeadDim96OnHopperPrefersFlashSm90) {
  CallTraits t = gpu(Direction::forward, DType::bf16, kLarge, 90);
  t.T = t.S = 2048, t.Hqk = t.Hv = 96, t.unmasked = true;
  EXPECT_EQ(order_for(t), (std::vector<std::string>{"flash-sm90", "cudnn", "flash", "cuda-naive"}));
  CallTraits causal = t;
  causal.unmasked = false, causal.causal_only = true;
  EXPECT_EQ(order_for(causal).front(), "flash-sm90");
  expect_cudnn_first_after_each(t, {+[](CallTraits& c) { c.unmasked = false; }, +[](CallTraits& c) { c.T = 1024; },
                                    +[](CallTraits& c) { c.S = 1024; }, +[](CallTraits& c) { c.Hv = 64; },
                                    +[](CallTraits& c) { c.cc = 89; }, +[](CallTraits& c) { c.cc = 100; }});
}

TEST(DispatchPolicy, F32AndBackward) {
  EXPECT_EQ(order_for(gpu(Direction::forward, DType::f32, kLarge, 90)),
            (std::vector<std::string>{"flash", "cuda-naive"}));
  EXPECT_EQ(order_for(gpu(Direction::backward, DType::bf16, kSmall, 90)),
            (std::vector<std::string>{"cudnn", "cuda-naive"}));
  EXPECT_EQ(order_for(gpu(Direction::backward, DType::f32, kSmall, 90)).front(), "cuda-naive");
}

TEST(DispatchPolicy, Fp8GoesToCudnnOnly) {
  for (Direction dir : {Direction::forward, Direction::backward})
    for (DType dtype : {DType::e4m3, DType::e5m2})
      EXPECT_EQ(order_for(gpu(dir, dtype, kLarge, 90)), (std::vector<std::string>{"cudnn"}));
  EXPECT_EQ(order_for(gpu(Direction::forward, DType::e4m3, kSmall, 90)), (std::vector<std::string>{"cudnn"}));
}

TEST(DispatchPolicy, EveryRowNamesKnownPathsAndCitesEvidence) {
  const std::set<std::string> known = {"cpu-naive", "cpu-flash", "cuda-naive", "cudnn", "flash", "flash-sm80",
                                       "flash-sm90"};
  std::set<std::string> built;
  for (const auto& p : attnlab::list_paths()) built.insert(p.name);
  const CallTraits probes[] = {CallTraits{},
                               gpu(Direction::forward, DType::bf16, kSmall, 90),
                               gpu(Direction::forward, DType::bf16, kLarge, 90),
                               gpu(Direction::forward, DType::bf16, kLarge, 80),
                               gpu(Direction::forward, DType::f32, kLarge, 90),
                               gpu(Direction::backward, DType::f16, kLarge, 90),
                               gpu(Direction::backward, DType::f32, kLarge, 90),
                               gpu(Direction::forward, DType::e4m3, kLarge, 90)};
  for (const CallTraits& t : probes) {
    const auto& row = attnlab::core::policy_row(t);
    EXPECT_GT(std::string(row.evidence).size(), 20u) << row.applies;
    EXPECT_TRUE(row.matches(t)) << row.applies;
    for (const std::string& name : order_for(t)) {
      EXPECT_TRUE(known.count(name)) << row.applies << ": unknown path " << name;
      // The CPU-only build has no CUDA paths; dispatch skips names it does not have.
      if (t.device == Device::cpu) {
        EXPECT_TRUE(built.count(name)) << name;
      }
    }
  }
}

// Packed batches: prefill-shaped ones (whole 128-row blocks that fill the GPU) go to the sm_90a kernel, decode
// and paged caches to the split-KV kernel.
TEST(DispatchPolicy, VarlenPrefillOnTheSm90KernelDecodeOnSplitKv) {
  using attnlab::core::varlen_prefers_sm90;
  using attnlab::core::VarlenTraits;
  EXPECT_TRUE(varlen_prefers_sm90(VarlenTraits{false, 8192, 16 * 32, 132}));
  EXPECT_FALSE(varlen_prefers_sm90(VarlenTraits{true, 8192, 16 * 32, 132})) << "paged";
  EXPECT_FALSE(varlen_prefers_sm90(VarlenTraits{false, 1, 64 * 32, 132})) << "decode at B = 64";
  EXPECT_FALSE(varlen_prefers_sm90(VarlenTraits{false, 16, 64 * 32, 132})) << "16 queries per sequence";
  EXPECT_FALSE(varlen_prefers_sm90(VarlenTraits{false, 512, 4 * 8, 132})) << "a chunk of 512 against a long cache";
  EXPECT_TRUE(varlen_prefers_sm90(VarlenTraits{false, 128, 132, 132}));
  EXPECT_GT(std::string(attnlab::core::kVarlenPolicy).size(), 40u);
}

// Under auto a paged prefill goes to cudnn (flash's sm_90a kernel takes no paged cache, and cuDNN's paged SDPA runs
// it 1.5× the split-KV kernel); paged decode and few queries stay on the split-KV kernel, packed keys never go.
TEST(DispatchPolicy, VarlenPagedPrefillOnCudnn) {
  using attnlab::core::varlen_prefers_cudnn;
  using attnlab::core::VarlenTraits;
  EXPECT_TRUE(varlen_prefers_cudnn(VarlenTraits{true, 2048, 16 * 8 * 32, 132})) << "8 × 2048 paged";
  EXPECT_TRUE(varlen_prefers_cudnn(VarlenTraits{true, 128, 64 * 32, 132})) << "64 × 128 paged";
  EXPECT_FALSE(varlen_prefers_cudnn(VarlenTraits{true, 16, 64 * 32, 132})) << "16 queries per sequence";
  EXPECT_FALSE(varlen_prefers_cudnn(VarlenTraits{true, 1, 64 * 32, 132})) << "paged decode";
  EXPECT_FALSE(varlen_prefers_cudnn(VarlenTraits{true, 512, 4 * 8, 132})) << "too few blocks to fill the GPU";
  EXPECT_FALSE(varlen_prefers_cudnn(VarlenTraits{false, 8192, 16 * 32, 132})) << "packed keys";
}

}  // namespace
