#include "ring_case.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "reference.h"

namespace attnlab_test {

using attnlab::RingLayout;

std::string RingCase::name() const {
  std::ostringstream s;
  s << "R" << ranks << "_" << attnlab::to_string(layout) << (causal ? "_causal" : "") << "_B" << B << "_T" << T
    << "_N" << N << "_K" << K << "_H" << Hqk << (Hv != Hqk ? "x" + std::to_string(Hv) : "") << "_"
    << dtype_name(dtype) << (softcap > 0 ? "_softcap" : "");
  return s.str();
}

RingPlace host_ring_place(std::vector<attnlab::Context*> contexts) {
  RingPlace p;
  p.device = Device::cpu;
  p.place = [](HostTensor& t, std::size_t) { return t.view(); };
  p.fetch = [](HostTensor&) {};
  auto blocks = std::make_shared<std::vector<std::unique_ptr<std::uint64_t[]>>>();
  p.scratch = [blocks](std::size_t bytes, std::size_t) {
    // 256-byte aligned, as the ring asks of its workspace.
    blocks->emplace_back(new std::uint64_t[bytes / 8 + 64]);
    auto addr = reinterpret_cast<std::uintptr_t>(blocks->back().get());
    return attnlab::DeviceBuffer{reinterpret_cast<void*>((addr + 255) / 256 * 256), bytes};
  };
  p.synchronize = [] {};
  p.transfer_streams.assign(contexts.size(), nullptr);
  p.contexts = std::move(contexts);
  return p;
}

namespace {

// Global rows of rank r's slice, in its local order.
std::vector<std::int64_t> rank_rows(const RingCase& c, int r) {
  std::vector<std::int64_t> rows;
  for (const auto& range : attnlab::ring_rows(c.layout, c.ranks, r, c.T))
    for (std::int64_t g = range[0]; g < range[1]; ++g) rows.push_back(g);
  return rows;
}

// (B, T, heads, H) dense values: the rows of `rows`, in that order.
std::vector<double> take_rows(const std::vector<double>& full, std::int64_t B, std::int64_t T, std::int64_t width,
                              const std::vector<std::int64_t>& rows) {
  std::vector<double> out;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t g : rows)
      out.insert(out.end(), full.begin() + (b * T + g) * width, full.begin() + (b * T + g + 1) * width);
  return out;
}

void put_rows(std::vector<double>& full, std::int64_t B, std::int64_t T, std::int64_t width,
              const std::vector<std::int64_t>& rows, const std::vector<double>& slice) {
  const std::int64_t R = std::int64_t(rows.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t l = 0; l < R; ++l)
      for (std::int64_t e = 0; e < width; ++e) full[(b * T + rows[l]) * width + e] = slice[(b * R + l) * width + e];
}

// LSE (B, N, T): the same, along the last dimension.
void put_lse_rows(std::vector<double>& full, std::int64_t B, std::int64_t N, std::int64_t T,
                  const std::vector<std::int64_t>& rows, const std::vector<double>& slice) {
  const std::int64_t R = std::int64_t(rows.size());
  for (std::int64_t bn = 0; bn < B * N; ++bn)
    for (std::int64_t l = 0; l < R; ++l) full[bn * T + rows[l]] = slice[bn * R + l];
}

std::vector<double> take_lse_rows(const std::vector<double>& full, std::int64_t B, std::int64_t N, std::int64_t T,
                                  const std::vector<std::int64_t>& rows) {
  std::vector<double> out;
  for (std::int64_t bn = 0; bn < B * N; ++bn)
    for (std::int64_t g : rows) out.push_back(full[bn * T + g]);
  return out;
}

HostTensor tensor_of(DType dtype, std::vector<std::int64_t> shape, const std::vector<double>& values) {
  HostTensor t(dtype, std::move(shape));
  t.set_values(values);
  return t;
}

HostTensor poisoned(DType dtype, std::vector<std::int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  t.poison();
  return t;
}

// The block of rank `q_rows`' queries against the keys `k_rows` of the whole sequence's problem, with the
// whole sequence's causal mask as a boolean mask over the block.
ref::Problem block_problem(const RingCase& c, const ref::Problem& p, const std::vector<std::int64_t>& q_rows,
                           const std::vector<std::int64_t>& k_rows) {
  const std::int64_t T = c.T;
  ref::Problem b = p;
  b.T = std::int64_t(q_rows.size()), b.S = std::int64_t(k_rows.size()), b.causal = false;
  b.q = take_rows(p.q, c.B, T, c.N * c.Hqk, q_rows);
  b.k = take_rows(p.k, c.B, T, c.K * c.Hqk, k_rows);
  b.v = take_rows(p.v, c.B, T, c.K * c.Hv, k_rows);
  b.mask.assign(std::size_t(b.T * b.S), 1);
  for (std::int64_t i = 0; i < b.T; ++i)
    for (std::int64_t j = 0; j < b.S; ++j) b.mask[std::size_t(i * b.S + j)] = !c.causal || k_rows[j] <= q_rows[i];
  return b;
}

// The ring's O from block partials merged through their LSE in fp64: every (rank, source block) partial is the
// in-dtype naive attention of the rank's queries over the block's visible keys (ref::forward_in_dtype, its O rounded
// to the dtype, as a block call returns it) or, without `in_dtype`, the block's exact result with its O rounded to
// the dtype and its LSE to f32, as a block call returns them (with one rank, the single call's exact result).
std::vector<double> ring_merge(const RingCase& c, const ref::Problem& p, bool in_dtype) {
  const std::int64_t T = c.T;
  std::vector<double> o(std::size_t(c.B * T * c.N * c.Hv), 0.0);
  std::vector<double> lse(std::size_t(c.B * c.N * T), -std::numeric_limits<double>::infinity());
  for (int r = 0; r < c.ranks; ++r) {
    const std::vector<std::int64_t> q_rows = rank_rows(c, r);
    for (int src = 0; src < c.ranks; ++src) {
      const std::vector<std::int64_t> k_rows = rank_rows(c, src);
      const ref::Problem b = block_problem(c, p, q_rows, k_rows);
      ref::Forward part = in_dtype ? ref::forward_in_dtype(b, c.dtype) : ref::forward(b);
      if (!in_dtype && c.ranks > 1) {
        for (double& x : part.o) x = round_to(c.dtype, x);
        for (double& x : part.lse) x = std::isfinite(x) ? round_to(DType::f32, x) : x;
      }
      for (std::int64_t bb = 0; bb < c.B; ++bb)
        for (std::int64_t n = 0; n < c.N; ++n)
          for (std::int64_t i = 0; i < b.T; ++i) {
            const double lp = part.lse[std::size_t((bb * c.N + n) * b.T + i)];
            if (!(lp > -std::numeric_limits<double>::infinity())) continue;
            double& la = lse[std::size_t((bb * c.N + n) * T + q_rows[i])];
            const double m = std::max(la, lp), merged = m + std::log(std::exp(la - m) + std::exp(lp - m));
            for (std::int64_t h = 0; h < c.Hv; ++h) {
              double& acc = o[std::size_t(((bb * T + q_rows[i]) * c.N + n) * c.Hv + h)];
              acc = acc * std::exp(la - merged) +
                    part.o[std::size_t(((bb * b.T + i) * c.N + n) * c.Hv + h)] * std::exp(lp - merged);
            }
            la = merged;
          }
    }
  }
  return o;
}

// The ring computed naively in the dtype, the "ref_same_dtype" of a ring: its in-dtype partials merged in fp64
// (ring_merge), then rounded once more. A ring's O carries one rounding more than the single call's (the partials'),
// which every ring does (its block calls return the dtype); the criterion's factor 2 then applies to this
// computation, as FlashAttention's applies to the naive computation of its own algorithm.
std::vector<double> ring_o_in_dtype(const RingCase& c, const ref::Problem& p) {
  std::vector<double> o = ring_merge(c, p, true);
  for (double& x : o) x = round_to(c.dtype, x);
  return o;
}

// The ring's O from its own inputs, the criterion's "exact result from the call's own inputs" for a ring
// (test_support.h), as ring_grads_given is for its gradients: the blocks' exact outputs rounded as block calls return
// them, merged exactly. A ring that computes every block exactly is still off by this merge's distance to ref64 plus
// the final rounding's half ulp; the floor it sets covers that and nothing else. Without it the 2·max|…| term can
// come out below that inherent error: where the naive reference's partial of a block rounds to the other side of a
// boundary than the exact partial, its error at that element is smaller than the exact computation's (bf16, R = 4
// zigzag, T = 8: O = −2.53125 = round(−2.52382), the exact partials' merge, against ref64 −2.51921 — off by 0.01204,
// where 2·max|ring_o_in_dtype − ref64| gave 0.01067).
std::vector<double> ring_o_given(const RingCase& c, const ref::Problem& p) { return ring_merge(c, p, false); }

// The ring's gradients from its own inputs: for every (rank, source block) pair the exact gradients of the block
// (fp64, from the O and LSE the backward is given, as ref::backward computes them for a single call), each rounded
// to the dtype as a block call returns it, then summed in fp64. This is the criterion's "exact result from the
// call's own inputs" for a ring (test_support.h): its block gradients are rounded before they are summed, which
// every ring does; the floor it sets covers that rounding and nothing else. With one rank it is the single call's.
ref::Backward ring_grads_given(const RingCase& c, const ref::Problem& p, const std::vector<double>& d_o,
                               const std::vector<double>& o, const std::vector<double>& lse) {
  const std::int64_t T = c.T;
  ref::Backward sum{std::vector<double>(p.q.size()), std::vector<double>(p.k.size()), std::vector<double>(p.v.size())};
  for (int r = 0; r < c.ranks; ++r) {
    const std::vector<std::int64_t> q_rows = rank_rows(c, r);
    const std::vector<double> d_o_r = take_rows(d_o, c.B, T, c.N * c.Hv, q_rows);
    const std::vector<double> o_r = take_rows(o, c.B, T, c.N * c.Hv, q_rows);
    const std::vector<double> lse_r = take_lse_rows(lse, c.B, c.N, T, q_rows);
    for (int src = 0; src < c.ranks; ++src) {
      const std::vector<std::int64_t> k_rows = rank_rows(c, src);
      ref::Problem b = block_problem(c, p, q_rows, k_rows);
      ref::Backward g = ref::backward(b, d_o_r, &o_r, &lse_r);
      if (c.ranks > 1)
        for (auto* v : {&g.dq, &g.dk, &g.dv})
          for (double& x : *v) x = round_to(c.dtype, x);
      std::vector<double> dq(sum.dq.size()), dk(sum.dk.size()), dv(sum.dv.size());
      put_rows(dq, c.B, T, c.N * c.Hqk, q_rows, g.dq);
      put_rows(dk, c.B, T, c.K * c.Hqk, k_rows, g.dk);
      put_rows(dv, c.B, T, c.K * c.Hv, k_rows, g.dv);
      for (std::size_t i = 0; i < dq.size(); ++i) sum.dq[i] += dq[i];
      for (std::size_t i = 0; i < dk.size(); ++i) sum.dk[i] += dk[i];
      for (std::size_t i = 0; i < dv.size(); ++i) sum.dv[i] += dv[i];
    }
  }
  return sum;
}

struct Shard {
  std::vector<std::int64_t> rows;
  HostTensor q, k, v, o, lse, d_o, dq, dk, dv;
  TensorView qv, kv, vv, ov, lsev, d_ov, dqv, dkv, dvv;
};

}  // namespace

void check_ring(const RingCase& c, attnlab::RingCommunicator& comm, RingPlace& place, Rng& rng, bool expect_waits) {
  SCOPED_TRACE(c.name() + " through " + comm.describe());
  ASSERT_EQ(comm.size(), c.ranks);
  ASSERT_EQ(comm.local_ranks().size(), place.contexts.size());
  const std::int64_t T = c.T;
  ref::Problem p;
  p.B = c.B, p.T = T, p.S = T, p.N = c.N, p.K = c.K, p.Hqk = c.Hqk, p.Hv = c.Hv;
  p.scale = 1.0 / std::sqrt(double(c.Hqk));
  p.softcap = c.softcap;
  p.causal = c.causal;
  const auto random_values = [&](std::vector<std::int64_t> shape) {
    HostTensor t(c.dtype, std::move(shape));
    t.fill_random(rng);
    return t.values();  // rounded to the dtype
  };
  p.q = random_values({c.B, T, c.N, c.Hqk});
  p.k = random_values({c.B, T, c.K, c.Hqk});
  p.v = random_values({c.B, T, c.K, c.Hv});
  const std::vector<double> d_o = random_values({c.B, T, c.N, c.Hv});

  // Scatter: each local rank's slices, outputs poisoned (NaN) so that an element the ring does not write fails.
  std::vector<Shard> shards(comm.local_ranks().size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    Shard& s = shards[i];
    s.rows = rank_rows(c, comm.local_ranks()[i]);
    const std::int64_t rows = std::int64_t(s.rows.size());
    s.q = tensor_of(c.dtype, {c.B, rows, c.N, c.Hqk}, take_rows(p.q, c.B, T, c.N * c.Hqk, s.rows));
    s.k = tensor_of(c.dtype, {c.B, rows, c.K, c.Hqk}, take_rows(p.k, c.B, T, c.K * c.Hqk, s.rows));
    s.v = tensor_of(c.dtype, {c.B, rows, c.K, c.Hv}, take_rows(p.v, c.B, T, c.K * c.Hv, s.rows));
    s.d_o = tensor_of(c.dtype, {c.B, rows, c.N, c.Hv}, take_rows(d_o, c.B, T, c.N * c.Hv, s.rows));
    s.o = poisoned(c.dtype, {c.B, rows, c.N, c.Hv});
    s.lse = poisoned(DType::f32, {c.B, c.N, rows});
    s.dq = poisoned(c.dtype, {c.B, rows, c.N, c.Hqk});
    s.dk = poisoned(c.dtype, {c.B, rows, c.K, c.Hqk});
    s.dv = poisoned(c.dtype, {c.B, rows, c.K, c.Hv});
    s.qv = place.place(s.q, i), s.kv = place.place(s.k, i), s.vv = place.place(s.v, i);
    s.d_ov = place.place(s.d_o, i), s.ov = place.place(s.o, i), s.lsev = place.place(s.lse, i);
    s.dqv = place.place(s.dq, i), s.dkv = place.place(s.dk, i), s.dvv = place.place(s.dv, i);
  }

  attnlab::RingOptions options;
  options.layout = c.layout;
  options.measure_waits = expect_waits;
  std::vector<attnlab::RingForwardShard> forward(shards.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    attnlab::ForwardArgs& a = forward[i].args;
    a.q = shards[i].qv, a.k = shards[i].kv, a.v = shards[i].vv, a.o = shards[i].ov, a.lse = shards[i].lsev;
    a.options.path = c.path;
    a.options.mask.causal = c.causal;
    a.options.softcap = c.softcap;
    forward[i].ctx = place.contexts[i];
    forward[i].transfer_stream = place.transfer_streams[i];
    forward[i].ring_workspace = place.scratch(attnlab::ring_workspace_size(comm, a, options), i);
  }
  attnlab::RingRunInfo ran;
  place.synchronize();  // the uploads, before the ranks' streams read them
  try {
    ran = attnlab::ring_forward(comm, forward, options);
  } catch (const attnlab::Error& e) {
    FAIL() << "ring_forward threw: " << e.what();
  }
  place.synchronize();
  // Block calls, counted independently of the library's plan: a rank computes against every block it sees any
  // key of — all R unmasked or zigzag (which spreads the causal work over every step), r + 1 contiguous causal.
  int expected_calls = 0;
  for (int r : comm.local_ranks())
    expected_calls += c.causal && c.layout == RingLayout::contiguous ? r + 1 : c.ranks;
  EXPECT_EQ(ran.steps, c.ranks);
  EXPECT_EQ(ran.block_calls, expected_calls);
  if (expect_waits) {
    EXPECT_EQ(ran.wait_ms.size(), shards.size());
    for (std::size_t i = 0; i < ran.wait_ms.size(); ++i) {
      EXPECT_GE(ran.wait_ms[i], 0.0);
      EXPECT_GE(ran.total_ms[i], ran.wait_ms[i]);
    }
  }

  std::vector<double> o(std::size_t(c.B * T * c.N * c.Hv)), lse(std::size_t(c.B * c.N * T));
  for (Shard& s : shards) {
    place.fetch(s.o), place.fetch(s.lse);
    EXPECT_EQ(s.o.count_nan(), 0) << "O of a rank left unwritten";
    put_rows(o, c.B, T, c.N * c.Hv, s.rows, s.o.values());
    put_lse_rows(lse, c.B, c.N, T, s.rows, s.lse.values());
  }
  const ref::Forward f64 = ref::forward(p), same = ref::forward_in_dtype(p, c.dtype);
  const std::vector<double> o_given = ring_o_given(c, p);
  EXPECT_TRUE(meets_criterion("O", c.dtype, o, f64.o, c.dtype == DType::f32 ? same.o : ring_o_in_dtype(c, p),
                              &o_given));
  EXPECT_TRUE(meets_criterion("LSE", DType::f32, lse, f64.lse, same.lse));
  if (!c.backward) return;

  std::vector<attnlab::RingBackwardShard> backward(shards.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    attnlab::BackwardArgs& a = backward[i].args;
    const Shard& s = shards[i];
    a.q = s.qv, a.k = s.kv, a.v = s.vv, a.o = s.ov, a.lse = s.lsev, a.d_o = s.d_ov;
    a.dq = s.dqv, a.dk = s.dkv, a.dv = s.dvv;
    a.options = forward[i].args.options;
    if (!c.backward_path.empty()) a.options.path = c.backward_path;
    backward[i].ctx = place.contexts[i];
    backward[i].transfer_stream = place.transfer_streams[i];
    backward[i].ring_workspace = place.scratch(attnlab::ring_workspace_size(comm, a, options), i);
  }
  place.synchronize();
  try {
    ran = attnlab::ring_backward(comm, backward, options);
  } catch (const attnlab::Error& e) {
    FAIL() << "ring_backward threw: " << e.what();
  }
  place.synchronize();
  EXPECT_EQ(ran.block_calls, expected_calls);
  std::vector<double> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  for (Shard& s : shards) {
    place.fetch(s.dq), place.fetch(s.dk), place.fetch(s.dv);
    EXPECT_EQ(s.dq.count_nan() + s.dk.count_nan() + s.dv.count_nan(), 0) << "a gradient of a rank left unwritten";
    put_rows(dq, c.B, T, c.N * c.Hqk, s.rows, s.dq.values());
    put_rows(dk, c.B, T, c.K * c.Hqk, s.rows, s.dk.values());
    put_rows(dv, c.B, T, c.K * c.Hv, s.rows, s.dv.values());
  }
  // The references take the O and LSE the backward was given, as the single-device tests do (harness.cpp), and the
  // floor of the criterion is the ring's own exact result from them (ring_grads_given).
  const ref::Backward g64 = ref::backward(p, d_o), g_same = ref::backward_in_dtype(p, d_o, c.dtype, &o),
                      given = ring_grads_given(c, p, d_o, o, lse);
  EXPECT_TRUE(meets_criterion("dQ", c.dtype, dq, g64.dq, g_same.dq, &given.dq, true));
  EXPECT_TRUE(meets_criterion("dK", c.dtype, dk, g64.dk, g_same.dk, &given.dk, true));
  EXPECT_TRUE(meets_criterion("dV", c.dtype, dv, g64.dv, g_same.dv, &given.dv, true));
}

}  // namespace attnlab_test
