#include "ring/ring_call.h"

#include "core/error.h"

namespace attnlab::ring {

using core::fail;

SliceShape slice_shape(const TensorView& q, const TensorView& k, const TensorView& v, const Options& options,
                       bool fp8, const char* what) {
  if (q.rank != 4 || k.rank != 4 || v.rank != 4)
    fail(ErrorCode::invalid_argument, "{}: q, k and v must be rank-4 slices (B, T/R, heads, H)", what);
  if (q.shape[1] != k.shape[1] || k.shape[1] != v.shape[1])
    fail(ErrorCode::invalid_argument,
         "{}: q, k and v slices must hold the same number of tokens (ring attention is self-attention, T = S); got "
         "{}, {} and {}",
         what, q.shape[1], k.shape[1], v.shape[1]);
  if (fp8 || q.dtype == DType::e4m3 || q.dtype == DType::e5m2)
    fail(ErrorCode::unsupported, "{}: FP8 inputs are not supported in a ring", what);
  if (!options.bias.empty() || !options.bool_mask.empty())
    fail(ErrorCode::unsupported, "{}: a bias or boolean mask has no ring form (its (T, S) matrix spans every rank)",
         what);
  if (!options.q_seqlens.empty() || !options.kv_seqlens.empty())
    fail(ErrorCode::unsupported, "{}: per-batch sequence lengths are not supported in a ring", what);
  if (options.mask.window_left >= 0 || options.mask.window_right >= 0)
    fail(ErrorCode::unsupported, "{}: a sliding window is not supported in a ring (causal or no mask)", what);
  SliceShape s;
  s.B = q.shape[0], s.rows = q.shape[1], s.N = q.shape[2], s.K = k.shape[2], s.Hqk = q.shape[3], s.Hv = v.shape[3];
  s.dtype = q.dtype;
  s.elem = size_of(q.dtype);
  return s;
}

namespace {
bool same(const SliceShape& a, const SliceShape& b) {
  return a.B == b.B && a.rows == b.rows && a.N == b.N && a.K == b.K && a.Hqk == b.Hqk && a.Hv == b.Hv &&
         a.dtype == b.dtype;
}
bool same(const Options& a, const Options& b) {
  return a.scale == b.scale && a.softcap == b.softcap && a.mask.causal == b.mask.causal && a.path == b.path;
}
}  // namespace

void check_shards(const RingCommunicator& comm, std::size_t shards, const RingOptions& ring_options,
                  const SliceShape& first, const SliceShape& shape, Device device, int device_index,
                  std::size_t local_index, const Options& first_options, const Options& options, const Context* ctx,
                  const DeviceBuffer& workspace, std::size_t workspace_bytes) {
  if (shards != comm.local_ranks().size())
    fail(ErrorCode::invalid_argument, "ring: {} shards given for the {} local ranks of {}", shards,
         comm.local_ranks().size(), comm.describe());
  if (ctx == nullptr) fail(ErrorCode::invalid_argument, "ring: shard {} has no context", local_index);
  if (!same(first, shape) || !same(first_options, options))
    fail(ErrorCode::invalid_argument,
         "ring: shard {} differs from shard 0 in shape, dtype or options (every rank holds a slice of one call)",
         local_index);
  if (device != comm.device() || (device == Device::cuda && device_index != comm.device_index(local_index)))
    fail(ErrorCode::invalid_argument, "ring: shard {}'s tensors are on {}:{}, its rank's device in {} is {}:{}",
         local_index, to_string(device), device_index, comm.describe(), to_string(comm.device()),
         comm.device_index(local_index));
  if (ring_options.layout == RingLayout::zigzag && shape.rows % 2 != 0)
    fail(ErrorCode::invalid_argument,
         "ring: the zigzag layout needs an even slice length (two chunks per rank), got {} tokens", shape.rows);
  if (workspace.bytes < workspace_bytes)
    fail(ErrorCode::invalid_argument, "ring: shard {}'s ring_workspace holds {} bytes, ring_workspace_size says {}",
         local_index, workspace.bytes, workspace_bytes);
  if (workspace_bytes > 0 && (workspace.data == nullptr || reinterpret_cast<std::uintptr_t>(workspace.data) % 256))
    fail(ErrorCode::invalid_argument, "ring: shard {}'s ring_workspace must be 256-byte aligned memory",
         local_index);
}

TensorView rows_of(const TensorView& t, std::int64_t begin, std::int64_t rows) {
  TensorView v = t;
  v.data = static_cast<std::byte*>(t.data) + begin * t.strides[1] * std::int64_t(size_of(t.dtype));
  v.shape[1] = rows;
  return v;
}

TensorView lse_rows_of(const TensorView& t, std::int64_t begin, std::int64_t rows) {
  if (t.empty()) return t;
  TensorView v = t;
  v.data = static_cast<std::byte*>(t.data) + begin * t.strides[2] * std::int64_t(size_of(t.dtype));
  v.shape[2] = rows;
  return v;
}

TensorView dense4(void* data, DType dtype, Device device, int device_index, std::int64_t B, std::int64_t rows,
                  std::int64_t heads, std::int64_t H) {
  return TensorView::contiguous(data, dtype, {B, rows, heads, H}, device, device_index);
}

TensorView dense3(void* data, DType dtype, Device device, int device_index, std::int64_t a, std::int64_t b,
                  std::int64_t c) {
  return TensorView::contiguous(data, dtype, {a, b, c}, device, device_index);
}

RankStreams::RankStreams(Context& ctx, Device device, int device_index, void* transfer_stream, bool measure)
    : device_(device),
      device_index_(device_index),
      compute_(ctx.stream()),
      transfer_(transfer_stream != nullptr ? transfer_stream : ctx.stream()),
      measure_(measure && device == Device::cuda) {
  if (device == Device::cuda) {
    ops_ = make_cuda_ops(device_index, compute_);
    computed_ = gpu::Event(device_index);
    transferred_[0] = gpu::Event(device_index);
    transferred_[1] = gpu::Event(device_index);
    if (measure_) start_ = gpu::Event(device_index, true), end_ = gpu::Event(device_index, true);
  } else {
    ops_ = make_cpu_ops();
  }
}

void RankStreams::transfer_waits_for_compute() {
  if (device_ != Device::cuda || transfer_ == compute_) return;
  gpu::set_device(device_index_);  // a null stream is the current device's legacy stream
  gpu::record(computed_.get(), compute_);
  gpu::wait(transfer_, computed_.get());
}

void RankStreams::transfer_done(int which) {
  if (device_ != Device::cuda || transfer_ == compute_) return;
  gpu::set_device(device_index_);
  gpu::record(transferred_[which].get(), transfer_);
}

void RankStreams::compute_waits_for_transfer(int which) {
  if (device_ != Device::cuda) return;
  gpu::set_device(device_index_);
  if (measure_) {
    wait_marks_.emplace_back(device_index_, true);
    gpu::record(wait_marks_.back().get(), compute_);
  }
  if (transfer_ != compute_) gpu::wait(compute_, transferred_[which].get());
  if (measure_) {
    wait_marks_.emplace_back(device_index_, true);
    gpu::record(wait_marks_.back().get(), compute_);
  }
}

void RankStreams::mark_start() {
  if (!measure_) return;
  gpu::set_device(device_index_);
  gpu::record(start_.get(), compute_);
}

void RankStreams::mark_end() {
  if (!measure_) return;
  gpu::set_device(device_index_);
  gpu::record(end_.get(), compute_);
}

double RankStreams::wait_ms() const {
  double ms = 0;
  for (std::size_t i = 0; i + 1 < wait_marks_.size(); i += 2)
    ms += gpu::elapsed_ms(wait_marks_[i].get(), wait_marks_[i + 1].get());
  return ms;
}

double RankStreams::total_ms() const { return measure_ ? gpu::elapsed_ms(start_.get(), end_.get()) : 0.0; }

}  // namespace attnlab::ring
