// attnlab embedded in an engine, part 1: a non-blocking stream of the caller's with calls issued back to back, and
// CUDA graphs. What these show:
//   - every call is ordered on the context's stream and waits for nothing (no host, device or other-stream sync):
//     calls are queued behind a gate that holds the stream, and a call that waited would stall until the gate
//     times out;
//   - host sequence lengths are taken when the call is made: one host buffer, rewritten before every call while
//     all earlier calls are still queued, and every output matches the lengths it was called with;
//   - a call captured into a graph replays correctly with new inputs in the same buffers, reads device lengths at
//     replay and keeps the host lengths it was captured with; a capture whose call would have to grow the
//     context's workspace fails with a clear error, and the stream and context stay usable.
// The workspace and fallback contracts are in test_gpu_embed_workspace.cpp. Every test skips visibly without a GPU.
#include <gtest/gtest.h>

#include "gpu_embed.h"

#if ATTNLAB_WITH_CUDA

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace attnlab_test::embed {
namespace {

// Lengths of 1 everywhere: written into the host buffers after the last call, so a length read late (after its
// call returned) shows as a wrong output, not as the right one by luck.
Lengths ones(const Case& c) {
  return {std::vector<std::int32_t>(std::size_t(c.B), 1), std::vector<std::int32_t>(std::size_t(c.B), 1)};
}

// How long the gate holds the stream before it gives up (calls only queue behind it; under compute-sanitizer
// issuing one takes longer).
constexpr int kGateSeconds = 60;

// ---------------------------------------------------------------------------------------------------------------
// Back to back
// ---------------------------------------------------------------------------------------------------------------

// `calls` forward calls on one context and the non-blocking stream, cycling through 4 length patterns written into
// the same host buffers before each call, each into its own poisoned output; the stream is synchronized once, at
// the end. A warm-up call per pattern first (handles, graphs, workspace): the calls under test are steady-state
// ones, and more of them are queued than any small ring of staging slots could hold.
void back_to_back_forward(Case c, int calls, Rng& rng) {
  const cudaStream_t s = nonblocking_stream();
  const std::vector<Lengths> patterns = length_patterns(c, rng, 4);
  c.seqlens_on_device = false;
  c = with_lengths(c, patterns[0]);  // make_inputs makes the one host buffer per side
  Tensors t = make_inputs(c, rng);
  std::vector<Case> cases;
  std::vector<ExpectedForward> expected;
  for (const Lengths& l : patterns) {
    cases.push_back(with_lengths(c, l));
    expected.push_back(expected_forward(cases.back(), t));
  }
  DeviceForward dev(t);
  dev.upload_inputs(t, s);
  std::vector<DeviceTensor> o, lse;
  for (int i = 0; i < calls; ++i) {
    o.emplace_back(t.o);
    lse.emplace_back(t.lse);
  }
  attnlab::Context ctx;
  ctx.set_stream(s);
  for (const Lengths& l : patterns) {
    write_lengths(t, l);
    attnlab::ForwardArgs a = dev.args(c, t, Seqlens::host);
    a.o = o[0].view();
    a.lse = lse[0].view();
    attnlab::forward(ctx, a);
  }
  for (int i = 0; i < calls; ++i) {
    o[std::size_t(i)].poison(s);
    lse[std::size_t(i)].poison(s);
  }
  cuda_ok(cudaStreamSynchronize(s), "stream after warm-up");
  {
    StreamGate gate(s, kGateSeconds);
    for (int i = 0; i < calls; ++i) {
      write_lengths(t, patterns[std::size_t(i % 4)]);  // the earlier calls have not run yet: see StreamGate
      attnlab::ForwardArgs a = dev.args(c, t, Seqlens::host);
      a.o = o[std::size_t(i)].view();
      a.lse = lse[std::size_t(i)].view();
      const attnlab::RunInfo info = attnlab::forward(ctx, a);
      EXPECT_TRUE(ran_as_asked(info.path, c.path)) << "call " << i;
    }
    write_lengths(t, ones(c));
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << "the gate did not hold the stream: the test shows nothing";
    gate.release();
    cuda_ok(cudaStreamSynchronize(s), "stream after the calls");
    EXPECT_FALSE(gate.timed_out()) << "a forward call waited for its stream or the device (a synchronization)";
  }
  for (int i = 0; i < calls; ++i) {
    const std::size_t p = std::size_t(i % 4);
    SCOPED_TRACE(::testing::Message() << "call " << i << ": " << cases[p].str());
    o[std::size_t(i)].download(t.o, s);
    lse[std::size_t(i)].download(t.lse, s);
    check_forward_outputs(cases[p], t, expected[p]);
  }
}

// The backward version: one forward per pattern (into its own O and LSE), then `calls` backward calls cycling
// through the patterns, each into its own poisoned dQ/dK/dV, all queued behind the gate.
void back_to_back_backward(Case c, int calls, Rng& rng) {
  const cudaStream_t s = nonblocking_stream();
  const std::vector<Lengths> patterns = length_patterns(c, rng, 4);
  c.seqlens_on_device = false;
  c = with_lengths(c, patterns[0]);
  Tensors t = make_inputs(c, rng);
  const GradTensors g = make_grads(c, rng);
  std::vector<Case> cases;
  std::vector<ExpectedForward> expected;
  for (const Lengths& l : patterns) {
    cases.push_back(with_lengths(c, l));
    expected.push_back(expected_forward(cases.back(), t));
  }
  DeviceForward dev(t);
  dev.upload_inputs(t, s);
  std::vector<DeviceTensor> o, lse;
  for (std::size_t p = 0; p < patterns.size(); ++p) {
    o.emplace_back(t.o);
    lse.emplace_back(t.lse);
  }
  std::vector<DeviceGrads> grads;
  for (int i = 0; i < calls; ++i) grads.emplace_back(g);
  grads[0].d_o.upload(g.d_o, s);  // one d_o for every call
  attnlab::Context ctx;
  ctx.set_stream(s);
  auto forward_args_for = [&](std::size_t p) {
    attnlab::ForwardArgs a = dev.args(c, t, Seqlens::host);
    a.o = o[p].view();
    a.lse = lse[p].view();
    return a;
  };
  auto backward_call = [&](std::size_t p, std::size_t i) {
    attnlab::BackwardArgs b = backward_args_for(forward_args_for(p), grads[i]);
    b.d_o = grads[0].d_o.view();
    return attnlab::backward(ctx, b);
  };
  for (std::size_t p = 0; p < patterns.size(); ++p) {  // warm-up
    write_lengths(t, patterns[p]);
    attnlab::forward(ctx, forward_args_for(p));
    backward_call(p, 0);
  }
  for (std::size_t p = 0; p < patterns.size(); ++p) o[p].poison(s), lse[p].poison(s);
  for (DeviceGrads& d : grads) d.poison_outputs(s);
  cuda_ok(cudaStreamSynchronize(s), "stream after warm-up");
  {
    StreamGate gate(s, kGateSeconds);
    for (std::size_t p = 0; p < patterns.size(); ++p) {
      write_lengths(t, patterns[p]);
      EXPECT_TRUE(ran_as_asked(attnlab::forward(ctx, forward_args_for(p)).path, c.path));
    }
    for (int i = 0; i < calls; ++i) {
      write_lengths(t, patterns[std::size_t(i % 4)]);
      const attnlab::RunInfo info = backward_call(std::size_t(i % 4), std::size_t(i));
      EXPECT_TRUE(ran_as_asked(info.path, c.path)) << "backward call " << i;
    }
    write_lengths(t, ones(c));
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << "the gate did not hold the stream: the test shows nothing";
    gate.release();
    cuda_ok(cudaStreamSynchronize(s), "stream after the calls");
    EXPECT_FALSE(gate.timed_out()) << "a call waited for its stream or the device (a synchronization)";
  }
  std::vector<Tensors> forwards(patterns.size(), t);
  std::vector<ExpectedBackward> expected_grads;
  for (std::size_t p = 0; p < patterns.size(); ++p) {
    SCOPED_TRACE(::testing::Message() << "forward: " << cases[p].str());
    o[p].download(forwards[p].o, s);
    lse[p].download(forwards[p].lse, s);
    check_forward_outputs(cases[p], forwards[p], expected[p]);
    expected_grads.push_back(expected_backward(cases[p], forwards[p], g));  // from the O and LSE backward got
  }
  for (int i = 0; i < calls; ++i) {
    const std::size_t p = std::size_t(i % 4);
    SCOPED_TRACE(::testing::Message() << "backward call " << i << ": " << cases[p].str());
    GradTensors out = g;
    grads[std::size_t(i)].download_outputs(out, s);
    check_backward_outputs(cases[p], out, expected_grads[p]);
  }
}

class NonBlockingStream : public PathTest {};
class NonBlockingStreamBackward : public PathTest {};

TEST_P(NonBlockingStream, BackToBackHostLengths) {
  ATTNLAB_TEST_RNG(rng);
  back_to_back_forward(embed_case(path(), 4, 512, 512, 8, 8), 24, rng);
}

TEST_P(NonBlockingStream, BackToBackHostLengthsGqaCausal) {
  ATTNLAB_TEST_RNG(rng);
  Case c = embed_case(path(), 4, 512, 512, 8, 2);
  c.mask.causal = true;
  c.mask.align = attnlab::MaskAlign::bottom_right;  // with lengths, the diagonal moves with each batch's lengths
  back_to_back_forward(c, 24, rng);
}

// The reduced form, small enough for compute-sanitizer memcheck and racecheck.
TEST_P(NonBlockingStream, SanitizerBackToBackHostLengths) {
  ATTNLAB_TEST_RNG(rng);
  back_to_back_forward(embed_case(path(), 2, 96, 96, 4, 2), 6, rng);
}

TEST_P(NonBlockingStreamBackward, BackToBackHostLengths) {
  ATTNLAB_TEST_RNG(rng);
  back_to_back_backward(embed_case(path(), 4, 200, 264, 8, 2), 8, rng);
}

TEST_P(NonBlockingStreamBackward, SanitizerBackToBackHostLengths) {
  ATTNLAB_TEST_RNG(rng);
  back_to_back_backward(embed_case(path(), 2, 96, 96, 4, 2), 6, rng);
}

// One context, two streams: call 1 is queued on stream A behind a gate, then the context moves to stream B for
// call 2 with other host lengths. Both calls place their lengths in the same bytes of the context's workspace, so
// call 2 must wait — on the device — for call 1: else call 1 would read call 2's lengths, and call 2 would finish
// while A is still held.
TEST_P(NonBlockingStream, SwitchingStreamsOrdersTheContextsWorkspace) {
  ATTNLAB_TEST_RNG(rng);
  static const cudaStream_t other = [] {  // never destroyed, like nonblocking_stream()
    cudaStream_t s = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }();
  const cudaStream_t first = nonblocking_stream();
  Case c = embed_case(path(), 4, 256, 256, 4, 4);
  c.seqlens_on_device = false;
  const std::vector<Lengths> patterns = length_patterns(c, rng, 2);
  c = with_lengths(c, patterns[0]);
  Tensors t = make_inputs(c, rng);
  const Case cases[2] = {with_lengths(c, patterns[0]), with_lengths(c, patterns[1])};
  const ExpectedForward expected[2] = {expected_forward(cases[0], t), expected_forward(cases[1], t)};
  DeviceForward dev(t);
  dev.upload_inputs(t, first);
  DeviceTensor o[2] = {DeviceTensor(t.o), DeviceTensor(t.o)};
  DeviceTensor lse[2] = {DeviceTensor(t.lse), DeviceTensor(t.lse)};
  attnlab::Context ctx;
  auto run = [&](int i) {
    write_lengths(t, patterns[std::size_t(i)]);
    attnlab::ForwardArgs a = dev.args(c, t, Seqlens::host);
    a.o = o[i].view();
    a.lse = lse[i].view();
    EXPECT_TRUE(ran_as_asked(attnlab::forward(ctx, a).path, c.path)) << "call " << i;
  };
  ctx.set_stream(first);
  run(0);  // warm-up: handles, graphs and the workspace exist before the calls under test
  for (int i = 0; i < 2; ++i) o[i].poison(first), lse[i].poison(first);
  cuda_ok(cudaStreamSynchronize(first), "stream after warm-up");
  {
    StreamGate gate(first, kGateSeconds);
    run(0);
    ctx.set_stream(other);
    run(1);
    write_lengths(t, ones(c));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // far longer than call 2 takes on its own
    EXPECT_EQ(cudaStreamQuery(other), cudaErrorNotReady)
        << "the call on the new stream did not wait for the context's last use on the old one";
    gate.release();
    cuda_ok(cudaStreamSynchronize(first), "first stream");
    cuda_ok(cudaStreamSynchronize(other), "second stream");
    EXPECT_FALSE(gate.timed_out()) << "a call waited for its stream or the device (a synchronization)";
  }
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(::testing::Message() << "call " << i << ": " << cases[i].str());
    o[i].download(t.o, other);
    lse[i].download(t.lse, other);
    check_forward_outputs(cases[i], t, expected[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(GpuPaths, NonBlockingStream, ::testing::ValuesIn(kForwardPaths), path_param_name);
INSTANTIATE_TEST_SUITE_P(GpuPaths, NonBlockingStreamBackward, ::testing::ValuesIn(kBackwardPaths), path_param_name);

// ---------------------------------------------------------------------------------------------------------------
// CUDA graphs
// ---------------------------------------------------------------------------------------------------------------
class GraphCapture : public PathTest {};
class GraphCaptureBackward : public PathTest {};

constexpr int kRounds = 3;

// A call with device lengths, captured after a warm-up call; each replay gets new q, k, v and new lengths in the
// same device buffers (the first round full, the second with empty batches, the third random), and must match them.
TEST_P(GraphCapture, DeviceSeqlensReplayReadsTheBuffers) {
  ATTNLAB_TEST_RNG(rng);
  const cudaStream_t s = nonblocking_stream();
  Case c = embed_case(path(), 2, 203, 333, 4, 2);
  const std::vector<Lengths> rounds = length_patterns(c, rng, kRounds);
  c = with_lengths(c, random_lengths(c, rng));
  Tensors t = make_inputs(c, rng);
  DeviceForward dev(t);
  dev.upload_inputs(t, s);
  attnlab::Context ctx;
  ctx.set_stream(s);
  const attnlab::ForwardArgs a = dev.args(c, t, Seqlens::device);
  attnlab::forward(ctx, a);  // warm-up: handles, plans and workspace exist before the capture
  cuda_ok(cudaStreamSynchronize(s), "stream after warm-up");
  Graph graph;
  Graph::capture(graph, s, [&] { attnlab::forward(ctx, a); });
  for (int r = 0; r < kRounds; ++r) {
    const Case cr = with_lengths(c, rounds[std::size_t(r)]);
    SCOPED_TRACE(::testing::Message() << "replay " << r << ": " << cr.str());
    Tensors tr = make_inputs(cr, rng);
    dev.upload_inputs(tr, s);  // q, k, v and the device lengths, in the order of the stream
    dev.poison_outputs(s);
    graph.launch(s);
    cuda_ok(cudaStreamSynchronize(s), "stream after replay");
    dev.download_outputs(tr, s);
    check_forward_outputs(cr, tr, expected_forward(cr, tr));
  }
}

// A call with host lengths: the graph holds the values they had at capture. The host buffer is rewritten after the
// capture and before every replay, and each replay must still match the captured lengths.
TEST_P(GraphCapture, HostSeqlensReplayKeepsTheCapturedValues) {
  ATTNLAB_TEST_RNG(rng);
  const cudaStream_t s = nonblocking_stream();
  Case c = embed_case(path(), 2, 203, 333, 4, 2);
  c.seqlens_on_device = false;
  const Lengths captured = length_patterns(c, rng, 2)[1];  // an empty batch of each kind
  c = with_lengths(c, captured);
  Tensors t = make_inputs(c, rng);
  DeviceForward dev(t);
  dev.upload_inputs(t, s);
  attnlab::Context ctx;
  ctx.set_stream(s);
  const attnlab::ForwardArgs a = dev.args(c, t, Seqlens::host);
  attnlab::forward(ctx, a);
  cuda_ok(cudaStreamSynchronize(s), "stream after warm-up");
  Graph graph;
  Graph::capture(graph, s, [&] { attnlab::forward(ctx, a); });
  for (int r = 0; r < kRounds; ++r) {
    // Captured: batch 0 has no queries, batch 1 no keys. Were the replay to read the buffer, batch 0's rows would
    // be computed and batch 1's would see keys: both change the output.
    Lengths other = random_lengths(c, rng);
    other.q[0] = std::int32_t(c.T) - r;
    other.kv[1] = std::int32_t(c.S) - 1 - r;
    write_lengths(t, other);
    SCOPED_TRACE(::testing::Message() << "replay " << r << " with the host buffer rewritten: " << c.str());
    Tensors tr = make_inputs(c, rng);
    dev.upload_inputs(tr, s);
    dev.poison_outputs(s);
    graph.launch(s);
    cuda_ok(cudaStreamSynchronize(s), "stream after replay");
    dev.download_outputs(tr, s);
    check_forward_outputs(c, tr, expected_forward(c, tr));  // the captured lengths, not the buffer's
  }
}

// A call made while the stream captures, in a context that has not run it before: when the call needs scratch the
// context does not have yet, it must fail with an error naming the capture (allocating inside a capture would
// break the graph or the process), the capture is ended cleanly, and afterwards the same context runs the call and
// captures it. A path that needs no scratch for the call must simply capture it.
//   handles_first = true: the context has asked workspace_size() first, which makes its library handles and plans
//     (nothing is launched, no workspace grown), so only the workspace is missing;
//   handles_first = false: a fresh context, whose library handles are made inside the captured call too.
void capture_needing_workspace(const std::string& path, bool handles_first, Rng& rng) {
  const cudaStream_t s = nonblocking_stream();
  Case c = embed_case(path, 2, 333, 1029, 4, 2);
  c.seqlens_on_device = false;
  c = with_lengths(c, random_lengths(c, rng));
  Tensors t = make_inputs(c, rng);
  const ExpectedForward expected = expected_forward(c, t);
  DeviceForward dev(t);
  dev.upload_inputs(t, s);
  dev.poison_outputs(s);
  const attnlab::ForwardArgs a = dev.args(c, t, Seqlens::host);
  attnlab::Context ctx;
  ctx.set_stream(s);
  std::size_t need = 0;
  if (handles_first) {
    need = attnlab::workspace_size(ctx, a);
  } else {
    attnlab::Context probe;  // asked elsewhere: the context under test stays fresh
    need = attnlab::workspace_size(probe, a);
  }
  if (path == "cuda-naive") {
    EXPECT_GT(need, 0u) << "cuda-naive keeps its score matrix in the workspace";
  }
  cuda_ok(cudaStreamSynchronize(s), "stream after setup");
  Graph first;
  const Refusal r = refusal_of([&] { Graph::capture(first, s, [&] { attnlab::forward(ctx, a); }); });
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  cuda_ok(cudaStreamIsCapturing(s, &status), "cudaStreamIsCapturing");
  EXPECT_EQ(status, cudaStreamCaptureStatusNone) << "the stream was left capturing";
  if (need > 0) {
    EXPECT_TRUE(r.thrown) << "a captured call that needs " << need << " bytes of workspace in a fresh context "
                          << "succeeded: it grew memory during the capture";
    if (r.thrown) {
      EXPECT_TRUE(r.code == attnlab::ErrorCode::device_error || r.code == attnlab::ErrorCode::unsupported)
          << "code " << int(r.code) << ": " << r.message;
      EXPECT_NE(r.message.find("captur"), std::string::npos) << "the error should name the capture: " << r.message;
    }
  } else {
    EXPECT_FALSE(r.thrown) << "the call needs no workspace, yet its capture failed: " << r.message;
    if (!r.thrown) {
      first.launch(s);
      cuda_ok(cudaStreamSynchronize(s), "stream after replay");
      dev.download_outputs(t, s);
      SCOPED_TRACE("replay of the capture without warm-up");
      check_forward_outputs(c, t, expected);
    }
  }
  // The context still works, outside a capture and then inside one (now that its workspace is there).
  dev.poison_outputs(s);
  attnlab::forward(ctx, a);
  cuda_ok(cudaStreamSynchronize(s), "stream after the call");
  dev.download_outputs(t, s);
  {
    SCOPED_TRACE("the call after the failed capture");
    check_forward_outputs(c, t, expected);
  }
  Graph second;
  Graph::capture(second, s, [&] { attnlab::forward(ctx, a); });
  dev.poison_outputs(s);
  second.launch(s);
  cuda_ok(cudaStreamSynchronize(s), "stream after replay");
  dev.download_outputs(t, s);
  SCOPED_TRACE("replay of the capture after the call");
  check_forward_outputs(c, t, expected);
}

TEST_P(GraphCapture, CaptureThatMustGrowTheWorkspaceFailsCleanly) {
  ATTNLAB_TEST_RNG(rng);
  capture_needing_workspace(path(), true, rng);
}

// The same as a fresh context's very first call: no warm-up, nothing asked before.
TEST_P(GraphCapture, CaptureAsAFreshContextsFirstCallFailsCleanly) {
  ATTNLAB_TEST_RNG(rng);
  capture_needing_workspace(path(), false, rng);
}

// Forward and backward captured into one graph (a training step's attention), replayed with new q, k, v and d_o.
// Device lengths change every round; host lengths keep their captured values while the buffer is rewritten.
void capture_forward_backward(const std::string& path, Seqlens lengths, Rng& rng) {
  const cudaStream_t s = nonblocking_stream();
  Case c = embed_case(path, 2, 77, 131, 4, 2);
  const std::vector<Lengths> rounds = length_patterns(c, rng, kRounds);
  c.seqlens_on_device = lengths == Seqlens::device;
  c = with_lengths(c, random_lengths(c, rng));
  Tensors t = make_inputs(c, rng);
  const GradTensors g = make_grads(c, rng);
  DeviceForward dev(t);
  DeviceGrads dg(g);
  dev.upload_inputs(t, s);
  dg.d_o.upload(g.d_o, s);
  attnlab::Context ctx;
  ctx.set_stream(s);
  const attnlab::ForwardArgs fa = dev.args(c, t, lengths);
  const attnlab::BackwardArgs ba = backward_args_for(fa, dg);
  attnlab::forward(ctx, fa);  // warm-up
  attnlab::backward(ctx, ba);
  cuda_ok(cudaStreamSynchronize(s), "stream after warm-up");
  Graph graph;
  Graph::capture(graph, s, [&] {
    attnlab::forward(ctx, fa);
    attnlab::backward(ctx, ba);
  });
  for (int r = 0; r < kRounds; ++r) {
    Case cr = c;
    if (lengths == Seqlens::device) {
      cr = with_lengths(c, rounds[std::size_t(r)]);
    } else {
      Lengths other = random_lengths(c, rng);
      other.q[1] = std::int32_t(c.T) - 1 - r;
      if (other.q[1] == c.q_lens[1]) other.q[1] -= 1;  // never the captured value
      write_lengths(t, other);
    }
    SCOPED_TRACE(::testing::Message() << "replay " << r << ": " << cr.str());
    Tensors tr = make_inputs(cr, rng);
    GradTensors gr = make_grads(cr, rng);
    dev.upload_inputs(tr, s);
    dg.d_o.upload(gr.d_o, s);
    dev.poison_outputs(s);
    dg.poison_outputs(s);
    graph.launch(s);
    cuda_ok(cudaStreamSynchronize(s), "stream after replay");
    dev.download_outputs(tr, s);
    dg.download_outputs(gr, s);
    check_forward_outputs(cr, tr, expected_forward(cr, tr));
    check_backward_outputs(cr, gr, expected_backward(cr, tr, gr));
  }
}

TEST_P(GraphCaptureBackward, ForwardAndBackwardDeviceSeqlens) {
  ATTNLAB_TEST_RNG(rng);
  capture_forward_backward(path(), Seqlens::device, rng);
}

TEST_P(GraphCaptureBackward, ForwardAndBackwardHostSeqlens) {
  ATTNLAB_TEST_RNG(rng);
  capture_forward_backward(path(), Seqlens::host, rng);
}

INSTANTIATE_TEST_SUITE_P(GpuPaths, GraphCapture, ::testing::ValuesIn(kForwardPaths), path_param_name);
INSTANTIATE_TEST_SUITE_P(GpuPaths, GraphCaptureBackward, ::testing::ValuesIn(kBackwardPaths), path_param_name);

}  // namespace
}  // namespace attnlab_test::embed

#else  // !ATTNLAB_WITH_CUDA

#include "device_mirror.h"

// Without the CUDA paths there is nothing to embed: one test that says so.
TEST(GpuEmbed, NeedsCudaPaths) { ATTNLAB_REQUIRE_GPU(); }

#endif
