// ring_backward: the K/V blocks travel as in ring_forward; each rank runs the backward of its queries against the
// block it holds with the forward call's O and LSE (the softmax of the whole row: P = exp(s − LSE), D = rowsum(dO ∘
// O), so a block's gradients are exactly its share of the full ones), adds dQ into its own f32 accumulator and
// dK/dV into the block's travelling f32 accumulator, which goes on to the next rank after the step. After R steps
// every block's dK/dV has visited every rank and arrived back at its own (docs/ring.md).
//
// Per rank, in stream order (compute stream C, transfer stream X):
//   C: pack own K/V → kv[0]
//   step t:  X waits for C; shift kv[t % 2] → kv[(t + 1) % 2] on X              (t < R − 1)
//            C: block backward calls on kv[t % 2] into the part buffers; dq_acc += dq_part (a row's first block
//               sets it, its last writes dq)
//            C waits for X's dK/dV shift of step t − 1; dkv[t % 2] += dk_part, dv_part (set at t = 0)
//            X waits for C; shift dkv[t % 2] → dkv[(t + 1) % 2] on X
//            C waits for X's K/V shift                                            (t < R − 1)
//   C waits for the last dK/dV shift; dk, dv = round(dkv[R % 2])
// One rank (R = 1) is the call of the whole slice itself.
#include <limits>

#include "core/error.h"
#include "ring/ring_call.h"
#include "ring/ring_plan.h"

namespace attnlab {

namespace {

struct BackwardLayout {
  void* kv[2];
  float* dkv[2];
  float* dq_acc;
  void* dq_part;
  void* dk_part;
  void* dv_part;
};

BackwardLayout carve(ring::Carver& c, const ring::SliceShape& s) {
  BackwardLayout l{};
  for (void*& kv : l.kv) kv = c.take(std::size_t(s.kv_elems()) * s.elem);
  for (float*& dkv : l.dkv) dkv = c.take_n<float>(s.kv_elems());
  l.dq_acc = c.take_n<float>(s.B * s.rows * s.N * s.Hqk);
  l.dq_part = c.take(std::size_t(s.B * s.rows * s.N * s.Hqk) * s.elem);
  l.dk_part = c.take(std::size_t(s.B * s.rows * s.K * s.Hqk) * s.elem);
  l.dv_part = c.take(std::size_t(s.B * s.rows * s.K * s.Hv) * s.elem);
  return l;
}

}  // namespace

std::size_t ring_workspace_size(const RingCommunicator&, const BackwardArgs& shard, const RingOptions&) {
  const ring::SliceShape s =
      ring::slice_shape(shard.q, shard.k, shard.v, shard.options, shard.fp8.has_value(), "ring_backward");
  ring::Carver c;
  carve(c, s);
  return c.used();
}

RingRunInfo ring_backward(RingCommunicator& comm, const std::vector<RingBackwardShard>& local,
                          const RingOptions& options) {
  using namespace ring;
  if (local.empty()) core::fail(ErrorCode::invalid_argument, "ring_backward: no shards");
  const SliceShape shape = slice_shape(local[0].args.q, local[0].args.k, local[0].args.v, local[0].args.options,
                                       local[0].args.fp8.has_value(), "ring_backward");
  const std::size_t bytes = ring_workspace_size(comm, local[0].args, options);
  const int R = comm.size();
  const bool causal = local[0].args.options.mask.causal;
  const Device device = local[0].args.q.device;
  const gpu::DeviceScope restore_device(device == Device::cuda);
  const auto view = [&](std::size_t i, void* data, std::int64_t heads, std::int64_t H) {
    return dense4(data, shape.dtype, device, local[i].args.q.device_index, shape.B, shape.rows, heads, H);
  };
  const auto v_of = [&](void* kv) {
    return static_cast<std::byte*>(kv) + shape.k_elems() * std::int64_t(shape.elem);
  };

  std::vector<BackwardLayout> buffers;
  // Block call `call` of local rank i on K/V buffer `slot`: views into the rank's tensors and its scratch.
  const auto block_args = [&](std::size_t i, int slot, const BlockCall& call) {
    const BackwardLayout& l = buffers[i];
    const BackwardArgs& sa = local[i].args;
    BackwardArgs a = sa;
    a.q = rows_of(sa.q, call.q_begin, call.q_rows);
    a.o = rows_of(sa.o, call.q_begin, call.q_rows);
    a.d_o = rows_of(sa.d_o, call.q_begin, call.q_rows);
    a.lse = lse_rows_of(sa.lse, call.q_begin, call.q_rows);
    a.k = rows_of(view(i, l.kv[slot], shape.K, shape.Hqk), call.k_begin, call.k_rows);
    a.v = rows_of(view(i, v_of(l.kv[slot]), shape.K, shape.Hv), call.k_begin, call.k_rows);
    a.dq = rows_of(view(i, l.dq_part, shape.N, shape.Hqk), call.q_begin, call.q_rows);
    a.dk = rows_of(view(i, l.dk_part, shape.K, shape.Hqk), call.k_begin, call.k_rows);
    a.dv = rows_of(view(i, l.dv_part, shape.K, shape.Hv), call.k_begin, call.k_rows);
    a.options.mask.causal = call.causal;
    a.options.mask.align = MaskAlign::top_left;
    return a;
  };

  check_and_carve(comm, local, options, shape, bytes, "ring_backward", buffers, carve, block_args);
  RingRunInfo info;
  info.steps = R;
  const std::vector<std::unique_ptr<RankStreams>> streams = rank_streams(local, options);
  if (R == 1) {  // one block: the call of the whole slice, straight into the outputs
    whole_slice_calls(local, streams, options, info,
                      [](Context& ctx, const BackwardArgs& a) { return backward(ctx, a); });
    return info;
  }
  std::vector<RowProgress> progress;
  for (std::size_t i = 0; i < local.size(); ++i) {
    RankStreams& st = *streams[i];
    const BackwardLayout& l = buffers[i];
    progress.emplace_back(options.layout, causal, R, comm.local_ranks()[i], shape.rows);
    st.mark_start();
    st.ops().pack(l.kv[0], local[i].args.k);
    st.ops().pack(v_of(l.kv[0]), local[i].args.v);
  }

  // One shift of every local rank's buffers together (ring.h: every rank makes the same calls in the same order).
  const auto shift = [&](auto pick, std::size_t bytes_each, int which) {
    std::vector<const void*> send;
    std::vector<void*> recv, xs;
    for (std::size_t i = 0; i < local.size(); ++i) {
      streams[i]->transfer_waits_for_compute();
      const auto [from, to] = pick(buffers[i]);
      send.push_back(from), recv.push_back(to), xs.push_back(streams[i]->transfer());
    }
    comm.shift(send, recv, bytes_each, xs);
    for (auto& st : streams) st->transfer_done(which);
  };
  constexpr int kKv = 0, kDkv = 1;

  const std::size_t kv_bytes = std::size_t(shape.kv_elems()) * shape.elem;
  const std::size_t dkv_bytes = std::size_t(shape.kv_elems()) * sizeof(float);
  for (int t = 0; t < R; ++t) {
    if (t + 1 < R)
      shift([&](const BackwardLayout& l) { return std::pair<const void*, void*>(l.kv[t % 2], l.kv[(t + 1) % 2]); },
            kv_bytes, kKv);
    for (std::size_t i = 0; i < local.size(); ++i) {
      const BackwardLayout& l = buffers[i];
      RankStreams& st = *streams[i];
      const int rank = comm.local_ranks()[i];
      const std::vector<BlockCall> calls =
          plan_step(options.layout, causal, R, rank, source_rank(R, rank, t), shape.rows);
      for (const BlockCall& call : calls) {
        const RunInfo ran = backward(*local[i].ctx, block_args(i, t % 2, call));
        if (info.path.empty()) info.path = ran.path;
        ++info.block_calls;
        // Each row's first block sets dq's accumulator, its last writes dq.
        progress[i].take(call, [&](std::int64_t begin, std::int64_t count, bool first, bool last) {
          const Rows rows{shape.B, shape.rows, shape.N, shape.Hqk, begin, count};
          st.ops().accumulate(l.dq_acc, l.dq_part, shape.dtype, rows, first, last ? &local[i].args.dq : nullptr);
        });
      }
      if (t > 0) st.compute_waits_for_transfer(kDkv);
      float* dk_acc = l.dkv[t % 2];
      float* dv_acc = dk_acc + shape.k_elems();
      for (const BlockCall& call : calls) {  // step 0's call takes every key row: it sets the accumulator
        st.ops().accumulate(dk_acc, l.dk_part, shape.dtype,
                            Rows{shape.B, shape.rows, shape.K, shape.Hqk, call.k_begin, call.k_rows}, t == 0, nullptr);
        st.ops().accumulate(dv_acc, l.dv_part, shape.dtype,
                            Rows{shape.B, shape.rows, shape.K, shape.Hv, call.k_begin, call.k_rows}, t == 0, nullptr);
      }
    }
    shift([&](const BackwardLayout& l) {
            return std::pair<const void*, void*>(l.dkv[t % 2], l.dkv[(t + 1) % 2]);
          },
          dkv_bytes, kDkv);
    if (t + 1 < R)
      for (auto& st : streams) st->compute_waits_for_transfer(kKv);
  }

  for (std::size_t i = 0; i < local.size(); ++i) {
    RankStreams& st = *streams[i];
    const BackwardLayout& l = buffers[i];
    st.compute_waits_for_transfer(kDkv);
    const float* dk = l.dkv[R % 2];  // home after R shifts of the accumulator
    st.ops().store(local[i].args.dk, dk);
    st.ops().store(local[i].args.dv, dk + shape.k_elems());
    st.mark_end();
  }
  if (options.measure_waits && device == Device::cuda)
    for (auto& st : streams) info.wait_ms.push_back(st->wait_ms()), info.total_ms.push_back(st->total_ms());
  return info;
}

}  // namespace attnlab
