// What ring_forward and ring_backward share: the shard rules, the scratch layout, views into slices, and one local
// rank's streams, events and element operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "attnlab/ring.h"
#include "core/error.h"
#include "ring/ring_ops.h"
#include "ring/ring_plan.h"

namespace attnlab::ring {

// The shape every shard of a call shares: slices of `rows` tokens.
struct SliceShape {
  std::int64_t B = 0, rows = 0, N = 0, K = 0, Hqk = 0, Hv = 0;
  DType dtype = DType::f32;
  std::size_t elem = 4;

  std::int64_t kv_elems() const { return B * rows * K * (Hqk + Hv); }  // one K/V block, K then V
  std::int64_t k_elems() const { return B * rows * K * Hqk; }
};

// The shape of q, k, v of one shard, after the ring's own rules (ring.h) are checked; `what` names the call.
SliceShape slice_shape(const TensorView& q, const TensorView& k, const TensorView& v, const Options& options,
                       bool fp8, const char* what);
// Every shard's shape, options and devices against the first and the communicator; zigzag's even length.
void check_shards(const RingCommunicator& comm, std::size_t shards, const RingOptions& ring_options,
                  const SliceShape& first, const SliceShape& shape, Device device, int device_index,
                  std::size_t local_index, const Options& first_options, const Options& options,
                  const Context* ctx, const DeviceBuffer& workspace, std::size_t workspace_bytes);

// Carves 256-byte aligned blocks out of a workspace (or counts them, when base is null).
class Carver {
 public:
  explicit Carver(void* base = nullptr) : base_(static_cast<std::byte*>(base)) {}
  void* take(std::size_t bytes) {
    void* p = base_ ? base_ + used_ : nullptr;
    used_ += (bytes + 255) / 256 * 256;
    return p;
  }
  template <class T>
  T* take_n(std::int64_t count) {
    return static_cast<T*>(take(std::size_t(count) * sizeof(T)));
  }
  std::size_t used() const { return used_; }

 private:
  std::byte* base_;
  std::size_t used_ = 0;
};

// Rows [begin, begin + rows) of a (B, T, heads, H) view (dimension 1), or of a (B, N, T) LSE view (dimension 2).
TensorView rows_of(const TensorView& t, std::int64_t begin, std::int64_t rows);
TensorView lse_rows_of(const TensorView& t, std::int64_t begin, std::int64_t rows);
// A dense (B, rows, heads, H) view of `data`.
TensorView dense4(void* data, DType dtype, Device device, int device_index, std::int64_t B, std::int64_t rows,
                  std::int64_t heads, std::int64_t H);
TensorView dense3(void* data, DType dtype, Device device, int device_index, std::int64_t a, std::int64_t b,
                  std::int64_t c);

// One local rank's place in the call: its compute stream (its context's), its transfer stream, element
// operations on the compute stream, and the events that order the two streams (GPU; no-ops on the CPU).
class RankStreams {
 public:
  RankStreams(Context& ctx, Device device, int device_index, void* transfer_stream, bool measure);
  Ops& ops() { return *ops_; }
  void* compute() const { return compute_; }
  void* transfer() const { return transfer_; }
  // The transfer stream waits for the compute stream's work so far, and the other way round.
  void transfer_waits_for_compute();
  void compute_waits_for_transfer(int which);  // `which` names the transfer (0: K/V, 1: dK/dV)
  void transfer_done(int which);               // records `which`'s transfer on the transfer stream
  // measure_waits: marks around the whole call.
  void mark_start();
  void mark_end();
  double wait_ms() const;  // waits for the call
  double total_ms() const;

 private:
  Device device_;
  int device_index_;
  void* compute_;
  void* transfer_;
  bool measure_;
  std::unique_ptr<Ops> ops_;
  gpu::Event computed_, transferred_[2];
  std::vector<gpu::Event> wait_marks_;  // pairs around each wait, when measuring
  gpu::Event start_, end_;
};

// Which block of a row is its first (it sets the accumulator) and which its last (it writes the output), per
// segment of the rank's rows (ring_plan.h), as the rank's calls come.
class RowProgress {
 public:
  RowProgress(RingLayout layout, bool causal, int ranks, int rank, std::int64_t rows)
      : segments_(segments(layout, rows)), cover_(coverage(layout, causal, ranks, rank, rows)), seen_(cover_.size()) {}
  // fn(begin, count, first, last) for each segment of the call's query rows.
  template <class Fn>
  void take(const BlockCall& call, Fn&& fn) {
    for (std::size_t s = 0; s < segments_.size(); ++s) {
      const auto [begin, end] = segments_[s];
      if (begin < call.q_begin || call.q_begin + call.q_rows < end) continue;
      const bool first = seen_[s] == 0;
      const bool last = ++seen_[s] == cover_[s];
      fn(begin, end - begin, first, last);
    }
  }

 private:
  std::vector<std::array<std::int64_t, 2>> segments_;
  std::vector<int> cover_, seen_;
};

// Every rule on every shard, before any work (ring.h): the ring's own (check_shards); the shard's tensors as the
// whole slice's call would take them (why_not validates shapes, dtypes, devices and strides); then every distinct
// block call of the rank's steps on the views it will use (why_not validates them and asks the path). Carves each
// shard's scratch into `buffers` on the way: block_args(i, slot, call) reads them.
template <class Shard, class Layout, class Carve, class BlockArgs>
void check_and_carve(const RingCommunicator& comm, const std::vector<Shard>& local, const RingOptions& options,
                     const SliceShape& shape, std::size_t bytes, const char* what, std::vector<Layout>& buffers,
                     Carve&& carve, BlockArgs&& block_args) {
  const bool causal = local[0].args.options.mask.causal;
  for (std::size_t i = 0; i < local.size(); ++i) {
    const Shard& sh = local[i];
    const SliceShape s = slice_shape(sh.args.q, sh.args.k, sh.args.v, sh.args.options, sh.args.fp8.has_value(), what);
    check_shards(comm, local.size(), options, shape, s, sh.args.q.device, sh.args.q.device_index, i,
                 local[0].args.options, sh.args.options, sh.ctx, sh.ring_workspace, bytes);
    if (auto why = why_not(*sh.ctx, sh.args.options.path, sh.args))
      core::fail(ErrorCode::unsupported, "{}: shard {}: {}", what, i, *why);
    Carver c(sh.ring_workspace.data);
    buffers.push_back(carve(c, shape));
    for (const BlockCall& call : distinct_calls(options.layout, causal, comm.size(), comm.local_ranks()[i], shape.rows))
      if (auto why = why_not(*sh.ctx, sh.args.options.path, block_args(i, 0, call)))
        core::fail(ErrorCode::unsupported, "{}: the block calls cannot run: {}", what, *why);
  }
}

// Each local rank's streams and element operations.
template <class Shard>
std::vector<std::unique_ptr<RankStreams>> rank_streams(const std::vector<Shard>& local, const RingOptions& options) {
  std::vector<std::unique_ptr<RankStreams>> streams;
  for (const Shard& sh : local)
    streams.push_back(std::make_unique<RankStreams>(*sh.ctx, sh.args.q.device, sh.args.q.device_index,
                                                    sh.transfer_stream, options.measure_waits));
  return streams;
}

// A ring of one rank: each shard's call of its whole slice through `call` (forward or backward), straight into its
// outputs, its stream time recorded when measure_waits asks (waits: none).
template <class Shard, class Call>
void whole_slice_calls(const std::vector<Shard>& local, const std::vector<std::unique_ptr<RankStreams>>& streams,
                       const RingOptions& options, RingRunInfo& info, Call&& call) {
  for (std::size_t i = 0; i < local.size(); ++i) {
    auto a = local[i].args;
    a.options.mask.align = MaskAlign::top_left;  // = bottom-right: T = S
    streams[i]->mark_start();
    info.path = call(*local[i].ctx, a).path;
    streams[i]->mark_end();
    ++info.block_calls;
  }
  if (options.measure_waits && local[0].args.q.device == Device::cuda)
    for (const auto& st : streams) info.wait_ms.push_back(0.0), info.total_ms.push_back(st->total_ms());
}

}  // namespace attnlab::ring
