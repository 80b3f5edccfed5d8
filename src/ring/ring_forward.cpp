// ring_forward: each local rank attends its query slice to the K/V block it holds, merges the block's output into
// an f32 accumulator through the LSE, and passes the block on; the exchange for step t + 1 runs on the transfer
// stream while step t computes (double-buffered K/V). Each output row is written once, by its last block's merge
// (docs/ring.md).
//
// Per rank, in stream order (compute stream C, transfer stream X):
//   C: pack own K/V → kv[0]
//   step t:  X waits for C; shift kv[t % 2] → kv[(t + 1) % 2] on X     (t < R − 1)
//            C: block calls on kv[t % 2], merges (a row's first block sets acc, its last writes o and lse)
//            C waits for X's shift                                       (t < R − 1)
// One rank (R = 1) is the call of the whole slice itself.
// kv[(t + 1) % 2] is free when X receives into it: C's calls of step t − 1 read it, and X waited for them.
#include <limits>

#include "core/error.h"
#include "ring/ring_call.h"
#include "ring/ring_plan.h"

namespace attnlab {

namespace {

struct ForwardLayout {
  void* kv[2];
  void* o_part;
  float* lse_part;
  float* o_acc;
  float* lse_acc;
};

ForwardLayout carve(ring::Carver& c, const ring::SliceShape& s) {
  ForwardLayout l{};
  for (void*& kv : l.kv) kv = c.take(std::size_t(s.kv_elems()) * s.elem);
  l.o_part = c.take(std::size_t(s.B * s.rows * s.N * s.Hv) * s.elem);
  l.lse_part = c.take_n<float>(s.B * s.N * s.rows);
  l.o_acc = c.take_n<float>(s.B * s.rows * s.N * s.Hv);
  l.lse_acc = c.take_n<float>(s.B * s.N * s.rows);
  return l;
}

}  // namespace

std::size_t ring_workspace_size(const RingCommunicator&, const ForwardArgs& shard, const RingOptions&) {
  const ring::SliceShape s =
      ring::slice_shape(shard.q, shard.k, shard.v, shard.options, shard.fp8.has_value(), "ring_forward");
  ring::Carver c;
  carve(c, s);
  return c.used();
}

RingRunInfo ring_forward(RingCommunicator& comm, const std::vector<RingForwardShard>& local,
                         const RingOptions& options) {
  using namespace ring;
  if (local.empty()) core::fail(ErrorCode::invalid_argument, "ring_forward: no shards");
  const SliceShape shape = slice_shape(local[0].args.q, local[0].args.k, local[0].args.v, local[0].args.options,
                                       local[0].args.fp8.has_value(), "ring_forward");
  const std::size_t bytes = ring_workspace_size(comm, local[0].args, options);
  const int R = comm.size();
  const bool causal = local[0].args.options.mask.causal;
  const Device device = local[0].args.q.device;
  const gpu::DeviceScope restore_device(device == Device::cuda);

  const auto view = [&](std::size_t i, void* data, std::int64_t heads, std::int64_t H) {
    return dense4(data, shape.dtype, device, local[i].args.q.device_index, shape.B, shape.rows, heads, H);
  };
  std::vector<ForwardLayout> buffers;
  // Block call `call` of local rank i on K/V buffer `slot`: views into the rank's q and its scratch.
  const auto block_args = [&](std::size_t i, int slot, const BlockCall& call) {
    const ForwardLayout& l = buffers[i];
    ForwardArgs a = local[i].args;
    a.q = rows_of(local[i].args.q, call.q_begin, call.q_rows);
    a.k = rows_of(view(i, l.kv[slot], shape.K, shape.Hqk), call.k_begin, call.k_rows);
    a.v = rows_of(view(i, static_cast<std::byte*>(l.kv[slot]) + shape.k_elems() * std::int64_t(shape.elem), shape.K,
                       shape.Hv),
                  call.k_begin, call.k_rows);
    a.o = rows_of(view(i, l.o_part, shape.N, shape.Hv), call.q_begin, call.q_rows);
    a.lse = lse_rows_of(dense3(l.lse_part, DType::f32, device, local[i].args.q.device_index, shape.B, shape.N,
                               shape.rows),
                        call.q_begin, call.q_rows);
    a.options.mask.causal = call.causal;
    a.options.mask.align = MaskAlign::top_left;
    return a;
  };

  check_and_carve(comm, local, options, shape, bytes, "ring_forward", buffers, carve, block_args);
  RingRunInfo info;
  info.steps = R;
  const std::vector<std::unique_ptr<RankStreams>> streams = rank_streams(local, options);
  if (R == 1) {  // one block: the call of the whole slice, straight into the outputs
    whole_slice_calls(local, streams, options, info,
                      [](Context& ctx, const ForwardArgs& a) { return forward(ctx, a); });
    return info;
  }
  std::vector<RowProgress> progress;
  for (std::size_t i = 0; i < local.size(); ++i) {
    RankStreams& st = *streams[i];
    const ForwardLayout& l = buffers[i];
    progress.emplace_back(options.layout, causal, R, comm.local_ranks()[i], shape.rows);
    st.mark_start();
    st.ops().pack(l.kv[0], local[i].args.k);
    st.ops().pack(static_cast<std::byte*>(l.kv[0]) + shape.k_elems() * std::int64_t(shape.elem), local[i].args.v);
  }

  const std::size_t kv_bytes = std::size_t(shape.kv_elems()) * shape.elem;
  for (int t = 0; t < R; ++t) {
    if (t + 1 < R) {
      std::vector<const void*> send;
      std::vector<void*> recv, xs;
      for (std::size_t i = 0; i < local.size(); ++i) {
        streams[i]->transfer_waits_for_compute();
        send.push_back(buffers[i].kv[t % 2]), recv.push_back(buffers[i].kv[(t + 1) % 2]);
        xs.push_back(streams[i]->transfer());
      }
      comm.shift(send, recv, kv_bytes, xs);
      for (auto& st : streams) st->transfer_done(0);
    }
    for (std::size_t i = 0; i < local.size(); ++i) {
      const ForwardLayout& l = buffers[i];
      const int rank = comm.local_ranks()[i];
      for (const BlockCall& call :
           plan_step(options.layout, causal, R, rank, source_rank(R, rank, t), shape.rows)) {
        const RunInfo ran = forward(*local[i].ctx, block_args(i, t % 2, call));
        if (info.path.empty()) info.path = ran.path;
        ++info.block_calls;
        // Each row's first block sets the accumulator, its last writes o and lse.
        progress[i].take(call, [&](std::int64_t begin, std::int64_t count, bool first, bool last) {
          const Rows rows{shape.B, shape.rows, shape.N, shape.Hv, begin, count};
          streams[i]->ops().merge(l.o_acc, l.lse_acc, l.o_part, shape.dtype, l.lse_part, rows, first,
                                  last ? &local[i].args.o : nullptr, last ? &local[i].args.lse : nullptr);
        });
      }
      if (t + 1 < R) streams[i]->compute_waits_for_transfer(0);
    }
  }
  for (auto& st : streams) st->mark_end();
  if (options.measure_waits && device == Device::cuda)
    for (auto& st : streams) info.wait_ms.push_back(st->wait_ms()), info.total_ms.push_back(st->total_ms());
  return info;
}

}  // namespace attnlab
