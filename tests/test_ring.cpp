// Ring attention on the CPU paths through the loopback communicator (include/attnlab/ring.h): 1–4 ranks, both
// layouts, causal and not, MHA/GQA/MQA, split head dims, f32 and bf16, forward and backward, each against the fp64
// reference of the whole sequence (ring_case.h); the step plan against brute force; and every rule refused before
// anything is written.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <tuple>

#include "attnlab/ring.h"
#include "ring/ring_plan.h"
#include "ring_case.h"

namespace attnlab_test {
namespace {

using attnlab::RingLayout;

// Every (query, key) pair a causal or full mask shows is computed exactly once over the R steps of every rank,
// and no hidden pair is computed — checked in global rows, by brute force over the plan.
TEST(RingPlan, EveryVisiblePairOnceAndNoOther) {
  for (RingLayout layout : {RingLayout::contiguous, RingLayout::zigzag})
    for (bool causal : {false, true})
      for (int R = 1; R <= 5; ++R) {
        const std::int64_t T = 2 * R * 3;  // three tokens a chunk
        const std::int64_t rows = T / R;
        std::multiset<std::pair<std::int64_t, std::int64_t>> seen;
        std::vector<std::vector<std::int64_t>> global(R);
        for (int r = 0; r < R; ++r)
          for (const auto& range : attnlab::ring_rows(layout, R, r, T))
            for (std::int64_t g = range[0]; g < range[1]; ++g) global[r].push_back(g);
        int calls = 0;
        for (int r = 0; r < R; ++r)
          for (int t = 0; t < R; ++t) {
            const int src = attnlab::ring::source_rank(R, r, t);
            for (const auto& call : attnlab::ring::plan_step(layout, causal, R, r, src, rows)) {
              ++calls;
              for (std::int64_t i = 0; i < call.q_rows; ++i)
                for (std::int64_t j = 0; j < call.k_rows; ++j) {
                  if (call.causal && j > i) continue;
                  seen.insert({global[r][call.q_begin + i], global[src][call.k_begin + j]});
                }
            }
          }
        SCOPED_TRACE(std::string(attnlab::to_string(layout)) + (causal ? " causal R=" : " R=") + std::to_string(R));
        std::int64_t expected = 0;
        for (std::int64_t i = 0; i < T; ++i)
          for (std::int64_t j = 0; j < T; ++j)
            if (!causal || j <= i) {
              ++expected;
              EXPECT_EQ(seen.count({i, j}), 1u) << "pair (" << i << ", " << j << ")";
            }
        EXPECT_EQ(std::int64_t(seen.size()), expected) << "hidden pairs computed";
        EXPECT_LE(calls, R * R);
      }
}

// Under a causal mask the zigzag layout gives every rank the same work at every step but the first.
TEST(RingPlan, ZigzagBalancesCausalWork) {
  const int R = 4;
  const std::int64_t rows = 8;
  for (int t = 1; t < R; ++t) {
    std::set<std::int64_t> work;
    for (int r = 0; r < R; ++r) {
      std::int64_t w = 0;
      for (const auto& call : attnlab::ring::plan_step(RingLayout::zigzag, true, R, r,
                                                       attnlab::ring::source_rank(R, r, t), rows))
        w += call.q_rows * call.k_rows;
      work.insert(w);
    }
    EXPECT_EQ(work.size(), 1u) << "step " << t;
  }
}

TEST(RingRows, PartitionTheSequence) {
  for (RingLayout layout : {RingLayout::contiguous, RingLayout::zigzag})
    for (int R = 1; R <= 4; ++R) {
      const std::int64_t T = 8 * R;
      std::vector<int> owner(std::size_t(T), -1);
      for (int r = 0; r < R; ++r)
        for (const auto& range : attnlab::ring_rows(layout, R, r, T))
          for (std::int64_t g = range[0]; g < range[1]; ++g) {
            EXPECT_EQ(owner[std::size_t(g)], -1);
            owner[std::size_t(g)] = r;
          }
      for (int o : owner) EXPECT_NE(o, -1);
    }
  EXPECT_THROW(attnlab::ring_rows(RingLayout::zigzag, 3, 0, 9), attnlab::Error);
  EXPECT_THROW(attnlab::ring_rows(RingLayout::contiguous, 2, 2, 8), attnlab::Error);
}

// The ring on the CPU paths: ranks × layout × mask, each against the fp64 reference of the whole sequence.
using Grid = std::tuple<int, RingLayout, bool>;
class RingCpu : public ::testing::TestWithParam<Grid> {};

// `rng` is the test's one generator: its cases draw from it in turn, so the seed a failure prints replays every case
// of the test (a generator per case would hand ATTNLAB_TEST_SEED's seed to the test's first case, not the failing one).
void run_case(const RingCase& c, Rng& rng) {
  auto comm = attnlab::loopback_communicator(c.ranks);
  std::vector<std::unique_ptr<attnlab::Context>> owned;
  std::vector<attnlab::Context*> contexts;
  for (int r = 0; r < c.ranks; ++r) {
    owned.push_back(std::make_unique<attnlab::Context>());
    owned.back()->set_num_threads(1);
    contexts.push_back(owned.back().get());
  }
  RingPlace place = host_ring_place(contexts);
  check_ring(c, *comm, place, rng);
}

TEST_P(RingCpu, MatchesTheWholeSequence) {
  ATTNLAB_TEST_RNG(rng);
  RingCase c;
  std::tie(c.ranks, c.layout, c.causal) = GetParam();
  for (std::int64_t chunk : {1, 7}) {  // T = 2R (one token a chunk) and an odd chunk
    c.T = 2 * c.ranks * chunk;
    c.path = "cpu-naive", c.dtype = DType::f32, c.B = 1, c.N = 2, c.K = 2;
    run_case(c, rng);
    c.path = "cpu-flash", c.dtype = DType::bf16, c.N = 4, c.K = 2, c.B = 2;  // GQA
    run_case(c, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, RingCpu,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(RingLayout::contiguous, RingLayout::zigzag),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return "R" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::string(attnlab::to_string(std::get<1>(info.param))) +
                                  (std::get<2>(info.param) ? "_causal" : "");
                         });

// One token a chunk: every block of a step holds one key per chunk, so most gradients are sums of a few rounded
// block gradients (the case the criterion's ring floor is for: ring_case.cpp, ring_grads_given).
TEST(RingCpuFeatures, OneTokenChunksF16Mqa) {
  ATTNLAB_TEST_RNG(rng);
  RingCase c;
  c.ranks = 3, c.layout = RingLayout::zigzag, c.causal = true, c.T = 6;
  c.N = 8, c.K = 1, c.Hqk = 64, c.Hv = 64, c.path = "cpu-flash", c.dtype = DType::f16;
  for (int i = 0; i < 5; ++i) run_case(c, rng);
}

TEST(RingCpuFeatures, MqaSplitHeadDimsSoftcapF16) {
  ATTNLAB_TEST_RNG(rng);
  RingCase c;
  c.ranks = 3, c.layout = RingLayout::zigzag, c.causal = true, c.T = 6 * 5;
  c.N = 4, c.K = 1, c.Hqk = 32, c.Hv = 16, c.path = "cpu-flash", c.dtype = DType::f16, c.softcap = 5.0f;
  run_case(c, rng);
  c.layout = RingLayout::contiguous, c.causal = false, c.path = "auto", c.dtype = DType::f32;
  run_case(c, rng);
  c.ranks = 3, c.causal = true, c.T = 3 * 37, c.N = 2, c.K = 1, c.Hqk = 6, c.Hv = 8, c.path = "cpu-naive";
  c.dtype = DType::f16;  // odd slices, head dims apart and no multiple of 4 (test_gpu_ring.cpp's on cuda-naive)
  run_case(c, rng);
}

// ---------------------------------------------------------------------------------------------------------------
// Refusals: each names its rule, before any output element is written.
// ---------------------------------------------------------------------------------------------------------------
struct Refusal {
  attnlab::ErrorCode code;
  std::string message;
};

// Two ranks of 6 tokens each; `edit` spoils shard `which`; returns the error and checks the outputs untouched.
Refusal refused(const std::function<void(attnlab::RingForwardShard&, std::vector<HostTensor>&)>& edit,
                RingLayout layout = RingLayout::contiguous, int shards_given = 2, std::int64_t rows = 6) {
  auto comm = attnlab::loopback_communicator(2);
  attnlab::Context ctx;
  Rng rng(7);
  std::vector<std::vector<HostTensor>> keep(2);
  std::vector<attnlab::RingForwardShard> shards(static_cast<std::size_t>(shards_given));
  std::vector<std::vector<std::uint64_t>> scratch(2);
  attnlab::RingOptions options;
  options.layout = layout;
  for (int i = 0; i < shards_given; ++i) {
    auto& t = keep[std::size_t(i)];
    t.emplace_back(DType::f32, std::vector<std::int64_t>{1, rows, 2, 8});
    t.emplace_back(DType::f32, std::vector<std::int64_t>{1, rows, 2, 8});
    t.emplace_back(DType::f32, std::vector<std::int64_t>{1, rows, 2, 8});
    t.emplace_back(DType::f32, std::vector<std::int64_t>{1, rows, 2, 8});
    for (int j = 0; j < 3; ++j) t[std::size_t(j)].fill_random(rng);
    t[3].poison();
    attnlab::RingForwardShard& s = shards[std::size_t(i)];
    s.ctx = &ctx;
    s.args.q = t[0].view(), s.args.k = t[1].view(), s.args.v = t[2].view(), s.args.o = t[3].view();
    edit(s, t);
    std::size_t bytes = 0;
    try {
      bytes = attnlab::ring_workspace_size(*comm, s.args, options);
    } catch (const attnlab::Error&) {
      bytes = 1 << 16;
    }
    scratch[std::size_t(i)].resize(bytes / 8 + 64);
    if (s.ring_workspace.bytes == 0) {  // an edit may set its own
      auto addr = reinterpret_cast<std::uintptr_t>(scratch[std::size_t(i)].data());
      s.ring_workspace = {reinterpret_cast<void*>((addr + 255) / 256 * 256), bytes};
    }
  }
  const auto before = keep[0][3].snapshot();
  Refusal r{attnlab::ErrorCode::ok, ""};
  try {
    attnlab::ring_forward(*comm, shards, options);
  } catch (const attnlab::Error& e) {
    r = {e.code(), e.what()};
  }
  if (r.code != attnlab::ErrorCode::ok) {
    EXPECT_TRUE(keep[0][3].same_bytes(before)) << "O written by a refused call";
  }
  return r;
}

TEST(RingRules, RefusedBeforeAnyWork) {
  const auto none = [](attnlab::RingForwardShard&, std::vector<HostTensor>&) {};
  EXPECT_EQ(refused(none).code, attnlab::ErrorCode::ok);  // the baseline runs

  const auto expect = [](const Refusal& r, attnlab::ErrorCode code, const std::string& fragment) {
    EXPECT_EQ(r.code, code) << r.message;
    EXPECT_NE(r.message.find(fragment), std::string::npos) << r.message;
  };
  expect(refused([](auto& s, auto&) { s.args.options.mask.window_left = 3; }), attnlab::ErrorCode::unsupported,
         "sliding window");
  HostTensor bias(DType::f32, {1, 1, 6, 6});
  expect(refused([&](auto& s, auto&) { s.args.options.bias = bias.view(); }), attnlab::ErrorCode::unsupported,
         "bias");
  HostTensor lens = int_tensor({3});
  expect(refused([&](auto& s, auto&) { s.args.options.kv_seqlens = lens.view(); }), attnlab::ErrorCode::unsupported,
         "sequence lengths");
  HostTensor short_k(DType::f32, {1, 5, 2, 8}), short_v(DType::f32, {1, 5, 2, 8});
  expect(refused([&](auto& s, auto&) { s.args.k = short_k.view(), s.args.v = short_v.view(); }),
         attnlab::ErrorCode::invalid_argument, "self-attention");
  expect(refused(none, RingLayout::zigzag, 2, 5), attnlab::ErrorCode::invalid_argument, "even slice length");
  expect(refused(none, RingLayout::contiguous, 1), attnlab::ErrorCode::invalid_argument, "1 shards given");
  expect(refused([](auto& s, auto&) { s.ring_workspace = {s.ring_workspace.data, 16}; }),
         attnlab::ErrorCode::invalid_argument, "ring_workspace holds 16 bytes");
  bool second = false;
  expect(refused([&](auto& s, auto&) { s.args.options.mask.causal = second, second = true; }),
         attnlab::ErrorCode::invalid_argument, "differs from shard 0");
  expect(refused([](auto& s, auto&) { s.ctx = nullptr; }), attnlab::ErrorCode::invalid_argument, "no context");
  // The shard's own tensors are validated as a call would validate them: K with another head dim than Q, O of
  // another dtype, a strided last dimension.
  HostTensor narrow_k(DType::f32, {1, 6, 2, 4});
  const Refusal k_head = refused([&](auto& s, auto&) { s.args.k = narrow_k.view(); });
  EXPECT_EQ(k_head.code, attnlab::ErrorCode::invalid_argument) << k_head.message;
  HostTensor half_o(DType::bf16, {1, 6, 2, 8});
  const Refusal o_dtype = refused([&](auto& s, auto&) { s.args.o = half_o.view(); });
  EXPECT_EQ(o_dtype.code, attnlab::ErrorCode::invalid_argument) << o_dtype.message;
  EXPECT_NE(o_dtype.message.find("dtype"), std::string::npos) << o_dtype.message;
  const Refusal strided = refused([](auto& s, auto&) { s.args.v.strides[3] = 2, s.args.v.shape[3] = 4; });
  EXPECT_NE(strided.code, attnlab::ErrorCode::ok) << strided.message;
  // A path that cannot run the block calls: cudnn takes no f32 (and no CPU tensors).
  const Refusal path = refused([](auto& s, auto&) { s.args.options.path = "cudnn"; });
  EXPECT_NE(path.code, attnlab::ErrorCode::ok);
  EXPECT_NE(path.message.find("cudnn"), std::string::npos) << path.message;
}

TEST(RingRules, NcclNamedWhenMissing) {
  // Without CUDA or libnccl.so.2 the NCCL communicator refuses by name; where NCCL loads, a ring of one GPU per
  // rank is made by the GPU tests instead.
  try {
    auto comm = attnlab::nccl_communicator(std::vector<int>{0});
    SUCCEED() << "NCCL loaded: " << comm->describe();
  } catch (const attnlab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("NCCL"), std::string::npos) << e.what();
  }
  EXPECT_THROW(attnlab::loopback_communicator(0), attnlab::Error);
}

}  // namespace
}  // namespace attnlab_test
