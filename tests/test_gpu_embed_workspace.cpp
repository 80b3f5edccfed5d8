// attnlab embedded in an engine, part 2 (part 1: test_gpu_embed.cpp): memory and fallbacks.
//   - CallerWorkspace: with scratch memory lent by the caller, a call allocates no device memory (RunInfo and
//     cudaMemGetInfo agree), uses no more than workspace_size() said, refuses a buffer too small or misaligned
//     without writing anything; without one, the context's workspace grows once and then serves.
//   - AutoFallback: when cuDNN cannot build a call's graph (fault injection through Tuning), auto runs the next path
//     of its policy, why_not with the context says so for "cudnn" and not for "auto", and a forced cudnn call fails
//     with that same reason.
// Every test skips visibly without a GPU.
#include <gtest/gtest.h>

#include "gpu_embed.h"

#if ATTNLAB_WITH_CUDA

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnlab_test::embed {
namespace {

// The first 256-byte aligned address in `m`.
void* aligned_start(const DeviceMemory& m) {
  return reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(m.data()) + 255) & ~std::uintptr_t(255));
}

std::size_t device_free_bytes() {
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // pending frees (stream-ordered pools) settle first
  std::size_t free = 0, total = 0;
  cuda_ok(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

// One forward case with its inputs on the device (and outputs poisoned there), host lengths.
struct DeviceCase {
  Case c;
  Tensors t;
  DeviceForward dev;
  DeviceCase(Case c0, Rng& rng, cudaStream_t s)
      : c(with_lengths(c0, random_lengths(c0, rng))), t(make_inputs(c, rng)), dev(t) {
    c.seqlens_on_device = false;
    dev.upload_inputs(t, s);
    dev.poison_outputs(s);
  }
  attnlab::ForwardArgs args() const { return dev.args(c, t, Seqlens::host); }
  // Copies O and LSE back and checks them against the reference for the lengths now in the host buffers.
  void check(const Lengths& lengths, cudaStream_t s) {
    dev.download_outputs(t, s);
    const Case now = with_lengths(c, lengths);
    check_forward_outputs(now, t, expected_forward(now, t));
  }
  Lengths lengths() const { return {c.q_lens, c.kv_lens}; }
};

class CallerWorkspace : public PathTest {};

// 10 calls of two shapes through one lent buffer, host lengths redrawn before every call: no call allocates. The
// device's free memory is compared over a later pass of the same sequence: the first may load kernel modules (CUDA
// loads them lazily, on first launch), which takes device memory that is not the library's. cudaMemGetInfo is
// device-wide, so a measured pass is repeated (up to 3) when it shows a change: another process may allocate
// meanwhile, while memory the calls keep taking (a leak) shows in every pass, and memory they took once was taken
// in the first pass already.
TEST_P(CallerWorkspace, NoDeviceAllocationWhenGiven) {
  ATTNLAB_TEST_RNG(rng);
  const cudaStream_t s = nonblocking_stream();
  std::vector<DeviceCase> cases;
  cases.reserve(2);
  cases.emplace_back(embed_case(path(), 2, 203, 333, 4, 2), rng, s);
  cases.emplace_back(embed_case(path(), 3, 77, 512, 4, 4), rng, s);
  attnlab::Context ctx;
  ctx.set_stream(s);
  std::vector<std::size_t> need;
  for (const DeviceCase& d : cases) {
    need.push_back(attnlab::workspace_size(ctx, d.args()));
    if (path() == "cuda-naive") {
      EXPECT_GT(need.back(), 0u) << "cuda-naive keeps its score matrix in the workspace";
    }
  }
  const std::size_t bytes = *std::max_element(need.begin(), need.end());
  DeviceMemory memory(bytes + 256);
  const attnlab::DeviceBuffer lent{aligned_start(memory), bytes};
  // One call per shape first: the context creates its library handles on the device then (which may count as an
  // allocation). From here on nothing may allocate.
  for (DeviceCase& d : cases) {
    attnlab::ForwardArgs a = d.args();
    a.workspace = lent;
    attnlab::forward(ctx, a);
  }
  std::vector<Lengths> sequence;
  std::vector<ExpectedForward> expected;  // computed once: the inputs stay, only the lengths change
  for (int call = 0; call < 10; ++call) {
    const DeviceCase& d = cases[std::size_t(call % 2)];
    sequence.push_back(random_lengths(d.c, rng));
    if (call == 4) sequence.back().q[0] = 0, sequence.back().kv.back() = 0;  // empty batches too
    expected.push_back(expected_forward(with_lengths(d.c, sequence.back()), d.t));
  }
  std::vector<long long> changes;  // free bytes after − before, per measured pass
  for (int pass = 0; pass < 4; ++pass) {
    const std::size_t free_before = device_free_bytes();
    for (int call = 0; call < 10; ++call) {
      const std::size_t i = std::size_t(call % 2);
      DeviceCase& d = cases[i];
      const Lengths& l = sequence[std::size_t(call)];
      write_lengths(d.t, l);
      d.dev.poison_outputs(s);
      attnlab::ForwardArgs a = d.args();
      a.workspace = lent;
      const attnlab::RunInfo info = attnlab::forward(ctx, a);
      SCOPED_TRACE(::testing::Message() << "pass " << pass << ", call " << call << ": " << with_lengths(d.c, l).str());
      EXPECT_TRUE(ran_as_asked(info.path, path()));
      EXPECT_EQ(info.device_allocations, 0) << "the call allocated device memory although given a workspace";
      EXPECT_LE(info.workspace_bytes, lent.bytes) << "the call used more scratch than it was lent";
      EXPECT_LE(info.workspace_bytes, need[i]) << "the call used more scratch than workspace_size() said";
      d.dev.download_outputs(d.t, s);
      check_forward_outputs(with_lengths(d.c, l), d.t, expected[std::size_t(call)]);
    }
    if (pass == 0) continue;  // lazy module loading, see above
    changes.push_back((long long)device_free_bytes() - (long long)free_before);
    if (changes.back() == 0) break;
  }
  ::testing::Message deltas;
  for (long long x : changes) deltas << x << " ";
  EXPECT_EQ(changes.back(), 0) << "the device's free memory changed over every measured pass of calls given a "
                               << "workspace (bytes per pass: " << deltas << ")";
}

// A buffer one byte short of workspace_size() is refused, naming the workspace and the bytes needed, and nothing is
// written; exactly workspace_size() bytes then serve. A path that needs no scratch runs with a zero-byte buffer.
TEST_P(CallerWorkspace, TooSmallIsRefused) {
  ATTNLAB_TEST_RNG(rng);
  const cudaStream_t s = nonblocking_stream();
  DeviceCase d(embed_case(path(), 2, 203, 333, 4, 2), rng, s);
  attnlab::Context ctx;
  ctx.set_stream(s);
  const std::size_t need = attnlab::workspace_size(ctx, d.args());
  if (path() == "cuda-naive") {
    ASSERT_GT(need, 0u) << "cuda-naive keeps its score matrix in the workspace";
  }
  DeviceMemory memory(need + 256);
  attnlab::ForwardArgs a = d.args();
  if (need > 0) {
    a.workspace = attnlab::DeviceBuffer{aligned_start(memory), need - 1};
    const Refusal r = refusal_of([&] { attnlab::forward(ctx, a); });
    EXPECT_TRUE(r.thrown) << "a workspace of " << need - 1 << " bytes, below the " << need << " needed, was taken";
    EXPECT_EQ(r.code, attnlab::ErrorCode::unsupported) << r.message;
    EXPECT_NE(r.message.find("workspace"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find(std::to_string(need)), std::string::npos)
        << "the error should name the " << need << " bytes needed: " << r.message;
    EXPECT_TRUE(still_poisoned(d.dev.o, d.t.o, s)) << "a refused call wrote to O";
    EXPECT_TRUE(still_poisoned(d.dev.lse, d.t.lse, s)) << "a refused call wrote to LSE";
  }
  a.workspace = attnlab::DeviceBuffer{aligned_start(memory), need};
  attnlab::forward(ctx, a);  // handles, if the path has any
  d.dev.poison_outputs(s);
  const attnlab::RunInfo info = attnlab::forward(ctx, a);
  EXPECT_EQ(info.device_allocations, 0);
  EXPECT_LE(info.workspace_bytes, need);
  d.check(d.lengths(), s);
}

// A workspace that does not start on a 256-byte boundary is an invalid argument naming the alignment; nothing is
// written. 16 bytes off: aligned enough for any vector access, so only the contract can catch it.
TEST_P(CallerWorkspace, MisalignedIsRefused) {
  ATTNLAB_TEST_RNG(rng);
  const cudaStream_t s = nonblocking_stream();
  DeviceCase d(embed_case(path(), 2, 203, 333, 4, 2), rng, s);
  attnlab::Context ctx;
  ctx.set_stream(s);
  const std::size_t need = attnlab::workspace_size(ctx, d.args());
  DeviceMemory memory(need + 512);
  attnlab::ForwardArgs a = d.args();
  a.workspace = attnlab::DeviceBuffer{static_cast<char*>(aligned_start(memory)) + 16, need + 256};
  const Refusal r = refusal_of([&] { attnlab::forward(ctx, a); });
  EXPECT_TRUE(r.thrown) << "a workspace 16 bytes off a 256-byte boundary was taken";
  EXPECT_EQ(r.code, attnlab::ErrorCode::invalid_argument) << r.message;
  EXPECT_NE(r.message.find("256"), std::string::npos) << r.message;
  EXPECT_TRUE(still_poisoned(d.dev.o, d.t.o, s)) << "a refused call wrote to O";
}

// Without a lent buffer the context's workspace grows on the first call that needs it, and a repeat of the same
// shape allocates nothing.
TEST_P(CallerWorkspace, ContextWorkspaceGrowsOnce) {
  ATTNLAB_TEST_RNG(rng);
  const cudaStream_t s = nonblocking_stream();
  DeviceCase d(embed_case(path(), 2, 203, 333, 4, 2), rng, s);
  std::size_t need = 0;
  {
    attnlab::Context probe;
    need = attnlab::workspace_size(probe, d.args());
  }
  attnlab::Context ctx;
  ctx.set_stream(s);
  const attnlab::RunInfo first = attnlab::forward(ctx, d.args());
  if (need > 0 || path() == "cuda-naive") {
    EXPECT_GE(first.device_allocations, 1) << "a fresh context ran a call needing " << need
                                           << " bytes of scratch without allocating";
  }
  d.check(d.lengths(), s);
  d.dev.poison_outputs(s);
  const attnlab::RunInfo repeat = attnlab::forward(ctx, d.args());
  EXPECT_EQ(repeat.device_allocations, 0) << "a repeat of the same call allocated again";
  EXPECT_LE(repeat.workspace_bytes, std::max(need, first.workspace_bytes));
  d.check(d.lengths(), s);
}

INSTANTIATE_TEST_SUITE_P(GpuPaths, CallerWorkspace, ::testing::ValuesIn(kForwardPaths), path_param_name);

// Under auto, a lent buffer too small for the path that leads makes auto try the next one: the call either runs
// another path within the buffer, or fails as unsupported naming the workspace. Device lengths; bf16 at more than
// 2^30 FLOPs, where cudnn leads.
TEST(CallerWorkspaceAuto, TooSmallForTheLeadTriesTheNextPath) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  const cudaStream_t s = nonblocking_stream();
  Case c = embed_case("auto", 4, 512, 512, 8, 8);
  c = with_lengths(c, random_lengths(c, rng));
  Tensors t = make_inputs(c, rng);
  DeviceForward dev(t);
  dev.upload_inputs(t, s);
  attnlab::Context ctx;
  ctx.set_stream(s);
  attnlab::ForwardArgs a = dev.args(c, t, Seqlens::device);
  const std::size_t need = attnlab::workspace_size(ctx, a);
  const std::string lead = attnlab::forward(ctx, a).path;
  EXPECT_EQ(lead, "cudnn") << "the dispatch policy's lead for a large bf16 forward";
  DeviceMemory memory(256);
  a.workspace = attnlab::DeviceBuffer{aligned_start(memory), 0};
  dev.poison_outputs(s);
  attnlab::RunInfo info;
  const Refusal r = refusal_of([&] { info = attnlab::forward(ctx, a); });
  if (r.thrown) {
    EXPECT_GT(need, 0u) << "the lead needs no scratch, yet a zero-byte workspace was refused: " << r.message;
    EXPECT_EQ(r.code, attnlab::ErrorCode::unsupported) << r.message;
    EXPECT_NE(r.message.find("workspace"), std::string::npos) << r.message;
    EXPECT_TRUE(still_poisoned(dev.o, t.o, s)) << "a refused call wrote to O";
    return;
  }
  if (need > 0) {
    EXPECT_NE(info.path, lead) << lead << " needs " << need << " bytes, but ran in a zero-byte workspace";
  }
  EXPECT_EQ(info.workspace_bytes, 0u);
  EXPECT_EQ(info.device_allocations, 0);
  dev.download_outputs(t, s);
  check_forward_outputs(c, t, expected_forward(c, t));
}

// ---------------------------------------------------------------------------------------------------------------
// Fallback when cuDNN cannot build a graph
// ---------------------------------------------------------------------------------------------------------------
void fail_cudnn_builds(attnlab::Context& ctx) {
  attnlab::Tuning tuning = ctx.tuning();
  tuning.cudnn_fail_graph_builds = true;
  ctx.set_tuning(tuning);
}

TEST(AutoFallback, ForwardRunsFlashWhenCudnnCannotBuild) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  const cudaStream_t s = nonblocking_stream();
  Case c = embed_case("auto", 2, 720, 752, 4, 2);
  ASSERT_GT(4.0 * double(c.B * c.N * c.T * c.S * c.Hqk), double(1 << 30)) << "cudnn leads only above 2^30 FLOPs";
  Tensors t = make_inputs(c, rng);
  const ExpectedForward expected = expected_forward(c, t);
  DeviceForward dev(t);
  dev.upload_inputs(t, s);
  const attnlab::ForwardArgs a = dev.args(c, t, Seqlens::device);
  {
    // Without the fault cudnn takes the call: else the fallback below would show nothing.
    attnlab::Context plain;
    plain.set_stream(s);
    const std::optional<std::string> why = attnlab::why_not(plain, "cudnn", a);
    EXPECT_FALSE(why.has_value()) << why.value_or("");
    EXPECT_EQ(attnlab::forward(plain, a).path, "cudnn");
    cuda_ok(cudaStreamSynchronize(s), "stream after the control call");
  }
  attnlab::Context ctx;
  ctx.set_stream(s);
  fail_cudnn_builds(ctx);
  const std::optional<std::string> reason = attnlab::why_not(ctx, "cudnn", a);
  ASSERT_TRUE(reason.has_value()) << "why_not(ctx, cudnn) does not see the failing graph build";
  EXPECT_NE(reason->find("cuDNN cannot build"), std::string::npos) << *reason;
  const std::optional<std::string> auto_reason = attnlab::why_not(ctx, "auto", a);
  EXPECT_FALSE(auto_reason.has_value()) << "auto has a next path, yet: " << auto_reason.value_or("");
  const std::optional<std::string> rules = attnlab::why_not("cudnn", a);
  EXPECT_FALSE(rules.has_value()) << "without a context only the rules are asked, and they pass: "
                                  << rules.value_or("");

  dev.poison_outputs(s);
  const attnlab::RunInfo info = attnlab::forward(ctx, a);
  EXPECT_TRUE(ran_as_asked(info.path, "flash")) << "the next path after cudnn for a large bf16 forward";
  dev.download_outputs(t, s);
  check_forward_outputs(c, t, expected);

  attnlab::ForwardArgs forced = a;
  forced.options.path = "cudnn";
  dev.poison_outputs(s);
  const Refusal r = refusal_of([&] { attnlab::forward(ctx, forced); });
  EXPECT_TRUE(r.thrown) << "a forced cudnn call ran although its graph cannot be built";
  EXPECT_EQ(r.code, attnlab::ErrorCode::unsupported) << r.message;
  EXPECT_NE(r.message.find(*reason), std::string::npos)
      << "the forced call's error '" << r.message << "' should carry why_not's reason '" << *reason << "'";
  EXPECT_TRUE(still_poisoned(dev.o, t.o, s)) << "a refused call wrote to O";
}

TEST(AutoFallback, BackwardRunsCudaNaiveWhenCudnnCannotBuild) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  const cudaStream_t s = nonblocking_stream();
  Case c = embed_case("auto", 2, 77, 131, 4, 2);
  c = with_lengths(c, random_lengths(c, rng));
  Tensors t = make_inputs(c, rng);
  const GradTensors g = make_grads(c, rng);
  DeviceForward dev(t);
  DeviceGrads dg(g);
  dev.upload_inputs(t, s);
  dg.d_o.upload(g.d_o, s);
  attnlab::Context ctx;
  ctx.set_stream(s);
  fail_cudnn_builds(ctx);
  // O and LSE for the backward, from the same context (whichever path auto takes for this small forward).
  const attnlab::ForwardArgs fa = dev.args(c, t, Seqlens::device);
  attnlab::forward(ctx, fa);
  dev.download_outputs(t, s);
  check_forward_outputs(c, t, expected_forward(c, t));
  const attnlab::BackwardArgs ba = backward_args_for(fa, dg);
  {
    attnlab::Context plain;  // control: without the fault cudnn takes the backward
    plain.set_stream(s);
    const std::optional<std::string> why = attnlab::why_not(plain, "cudnn", ba);
    EXPECT_FALSE(why.has_value()) << why.value_or("");
    EXPECT_EQ(attnlab::backward(plain, ba).path, "cudnn");
    cuda_ok(cudaStreamSynchronize(s), "stream after the control call");
  }
  const std::optional<std::string> reason = attnlab::why_not(ctx, "cudnn", ba);
  ASSERT_TRUE(reason.has_value()) << "why_not(ctx, cudnn) does not see the failing graph build";
  EXPECT_NE(reason->find("cuDNN cannot build"), std::string::npos) << *reason;
  const std::optional<std::string> auto_reason = attnlab::why_not(ctx, "auto", ba);
  EXPECT_FALSE(auto_reason.has_value()) << "auto has a next path, yet: " << auto_reason.value_or("");

  dg.poison_outputs(s);
  const attnlab::RunInfo info = attnlab::backward(ctx, ba);
  EXPECT_EQ(info.path, "cuda-naive") << "the next path after cudnn for a bf16 backward";
  GradTensors out = g;
  dg.download_outputs(out, s);
  check_backward_outputs(c, out, expected_backward(c, t, g));

  attnlab::BackwardArgs forced = ba;
  forced.options.path = "cudnn";
  dg.poison_outputs(s);
  const Refusal r = refusal_of([&] { attnlab::backward(ctx, forced); });
  EXPECT_TRUE(r.thrown) << "a forced cudnn backward ran although its graph cannot be built";
  EXPECT_EQ(r.code, attnlab::ErrorCode::unsupported) << r.message;
  EXPECT_NE(r.message.find(*reason), std::string::npos)
      << "the forced call's error '" << r.message << "' should carry why_not's reason '" << *reason << "'";
  EXPECT_TRUE(still_poisoned(dg.dq, out.dq, s)) << "a refused call wrote to dQ";
}

}  // namespace
}  // namespace attnlab_test::embed

#endif  // ATTNLAB_WITH_CUDA
