#include "ring_ranks.h"

#include <cstring>

#include "tensors.h"

namespace lab {

RankMemory::RankMemory(std::size_t bytes, attnlab::Device device, int device_index) : bytes_(bytes) {
  if (device == attnlab::Device::cuda) {
    device_buffer_ = gpu::DeviceBuffer(bytes == 0 ? 256 : bytes, device_index);
    data_ = device_buffer_.data();
  } else {
    host_.reset(new std::byte[bytes + 256]);
    const auto addr = reinterpret_cast<std::uintptr_t>(host_.get());
    data_ = reinterpret_cast<void*>((addr + 255) / 256 * 256);
  }
}

void RankMemory::upload(const void* host) {
  if (host_)
    std::memcpy(data_, host, bytes_);
  else
    device_buffer_.upload(host, bytes_);
}

void RankMemory::download(void* host) const {
  if (host_)
    std::memcpy(host, data_, bytes_);
  else
    device_buffer_.download(host, bytes_);
}

struct RingRanks::Rank {
  std::unique_ptr<attnlab::Context> ctx;
  std::unique_ptr<gpu::Stream> compute, transfer;
  RankMemory q, k, v, o, lse, d_o, dq, dk, dv, ring_forward, ring_backward;
};

namespace {

// Rows of the full sequence's tensors: each row (width elements) is a window of a pool of 2^20 normal samples at
// an offset hashed from (tensor, row), so every rank draws the same sequence whatever the ranks, cheaply at 128k
// tokens, and no two rows are alike.
class RowSource {
 public:
  RowSource(attnlab::DType dtype, std::int64_t width, std::uint64_t seed) : width_(width), elem_(size_of(dtype)) {
    std::vector<float> pool = random_normal(kPool + width, seed, 0);
    bytes_ = encode(pool, dtype);
  }
  const std::byte* row(std::uint64_t tensor, std::int64_t g) const {
    std::uint64_t h = (tensor + 1) * 0x9E3779B97F4A7C15ull ^ std::uint64_t(g) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    return bytes_.data() + std::size_t(h % kPool) * elem_;
  }
  std::size_t row_bytes() const { return std::size_t(width_) * elem_; }

 private:
  static constexpr std::int64_t kPool = 1 << 20;
  std::int64_t width_;
  std::size_t elem_;
  std::vector<std::byte> bytes_;
};

std::vector<std::int64_t> global_rows(const RingShape& s, int ranks, int rank) {
  std::vector<std::int64_t> rows;
  for (const auto& range : attnlab::ring_rows(s.layout, ranks, rank, s.T))
    for (std::int64_t g = range[0]; g < range[1]; ++g) rows.push_back(g);
  return rows;
}

attnlab::TensorView view(const RankMemory& m, attnlab::DType dtype, std::initializer_list<std::int64_t> shape,
                         attnlab::Device device, int device_index) {
  return attnlab::TensorView::contiguous(m.data(), dtype, shape, device, device_index);
}

}  // namespace

RingRanks::RingRanks(const RingShape& s, attnlab::RingCommunicator& comm, bool backward, std::uint64_t seed)
    : shape_(s), comm_(comm) {
  const attnlab::Device device = comm.device();
  const int R = comm.size();
  const std::int64_t rows = s.T / R;
  const std::size_t elem = attnlab::size_of(s.dtype);
  const RowSource q_rows(s.dtype, s.N * s.H, seed), kv_rows(s.dtype, s.K * s.H, seed + 1);
  for (std::size_t i = 0; i < comm.local_ranks().size(); ++i) {
    const int di = comm.device_index(i);
    const auto bytes = [&](std::int64_t heads) { return std::size_t(s.B * rows * heads * s.H) * elem; };
    auto r = std::make_unique<Rank>(Rank{
        std::make_unique<attnlab::Context>(), nullptr, nullptr,
        RankMemory(bytes(s.N), device, di), RankMemory(bytes(s.K), device, di), RankMemory(bytes(s.K), device, di),
        RankMemory(bytes(s.N), device, di), RankMemory(std::size_t(s.B * s.N * rows) * 4, device, di),
        RankMemory(backward ? bytes(s.N) : 0, device, di), RankMemory(backward ? bytes(s.N) : 0, device, di),
        RankMemory(backward ? bytes(s.K) : 0, device, di), RankMemory(backward ? bytes(s.K) : 0, device, di),
        RankMemory(0, device, di), RankMemory(0, device, di)});
    if (device == attnlab::Device::cuda) {
      r->compute = std::make_unique<gpu::Stream>(di);
      r->transfer = std::make_unique<gpu::Stream>(di);
      r->ctx->set_stream(r->compute->get());
    }
    // Scatter: the rank's rows of every tensor, batch by batch.
    const std::vector<std::int64_t> mine = global_rows(s, R, comm.local_ranks()[i]);
    const auto fill = [&](RankMemory& m, const RowSource& src, std::uint64_t tensor) {
      std::vector<std::byte> host(m.bytes());
      std::byte* out = host.data();
      for (std::int64_t b = 0; b < s.B; ++b)
        for (std::int64_t g : mine) {
          std::memcpy(out, src.row(tensor * 1000003 + std::uint64_t(b), g), src.row_bytes());
          out += src.row_bytes();
        }
      m.upload(host.data());
    };
    fill(r->q, q_rows, 0), fill(r->k, kv_rows, 1), fill(r->v, kv_rows, 2);
    if (backward) fill(r->d_o, q_rows, 3);

    const auto dt = s.dtype;
    attnlab::RingForwardShard f;
    f.ctx = r->ctx.get();
    f.args.q = view(r->q, dt, {s.B, rows, s.N, s.H}, device, di);
    f.args.k = view(r->k, dt, {s.B, rows, s.K, s.H}, device, di);
    f.args.v = view(r->v, dt, {s.B, rows, s.K, s.H}, device, di);
    f.args.o = view(r->o, dt, {s.B, rows, s.N, s.H}, device, di);
    f.args.lse = view(r->lse, attnlab::DType::f32, {s.B, s.N, rows}, device, di);
    f.args.options.path = s.path;
    f.args.options.mask.causal = s.causal;
    f.transfer_stream = r->transfer ? r->transfer->get() : nullptr;
    attnlab::RingOptions options;
    options.layout = s.layout;
    r->ring_forward = RankMemory(attnlab::ring_workspace_size(comm, f.args, options), device, di);
    f.ring_workspace = {r->ring_forward.data(), r->ring_forward.bytes()};
    if (backward) {
      attnlab::RingBackwardShard g;
      g.ctx = f.ctx, g.transfer_stream = f.transfer_stream;
      g.args.q = f.args.q, g.args.k = f.args.k, g.args.v = f.args.v, g.args.o = f.args.o, g.args.lse = f.args.lse;
      g.args.d_o = view(r->d_o, dt, {s.B, rows, s.N, s.H}, device, di);
      g.args.dq = view(r->dq, dt, {s.B, rows, s.N, s.H}, device, di);
      g.args.dk = view(r->dk, dt, {s.B, rows, s.K, s.H}, device, di);
      g.args.dv = view(r->dv, dt, {s.B, rows, s.K, s.H}, device, di);
      g.args.options = f.args.options;
      g.args.options.path = s.backward_path;
      r->ring_backward = RankMemory(attnlab::ring_workspace_size(comm, g.args, options), device, di);
      g.ring_workspace = {r->ring_backward.data(), r->ring_backward.bytes()};
      backward_.push_back(g);
    }
    forward_.push_back(f);
    ranks_.push_back(std::move(r));
  }
  // The uploads went through the legacy default stream, which the ranks' non-blocking streams do not wait for.
  if (device == attnlab::Device::cuda)
    for (std::size_t i = 0; i < comm.local_ranks().size(); ++i) gpu::synchronize(comm.device_index(i));
}

RingRanks::~RingRanks() {
  try {
    synchronize();
  } catch (...) {  // a failed call's error was reported already; the buffers go regardless
  }
}

attnlab::RingRunInfo RingRanks::forward(bool measure) {
  attnlab::RingOptions options;
  options.layout = shape_.layout;
  options.measure_waits = measure;
  attnlab::RingRunInfo info = attnlab::ring_forward(comm_, forward_, options);
  synchronize();
  return info;
}

attnlab::RingRunInfo RingRanks::backward(bool measure) {
  attnlab::RingOptions options;
  options.layout = shape_.layout;
  options.measure_waits = measure;
  attnlab::RingRunInfo info = attnlab::ring_backward(comm_, backward_, options);
  synchronize();
  return info;
}

attnlab::RingRunInfo RingRanks::single_forward() {
  attnlab::RingRunInfo info;
  info.path = attnlab::forward(*forward_.front().ctx, forward_.front().args).path;
  synchronize();
  return info;
}

attnlab::RingRunInfo RingRanks::single_backward() {
  attnlab::RingRunInfo info;
  info.path = attnlab::backward(*backward_.front().ctx, backward_.front().args).path;
  synchronize();
  return info;
}

void RingRanks::synchronize() {
  for (const auto& r : ranks_) {
    if (r->compute) r->compute->synchronize();
    if (r->transfer) r->transfer->synchronize();
  }
}

std::vector<float> RingRanks::gather(RankMemory Rank::*tensor) const {
  const int R = comm_.size();
  const std::int64_t rows = shape_.T / R, width = shape_.N * shape_.H;
  std::vector<float> full(std::size_t(shape_.B * shape_.T * width));
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    const RankMemory& m = (*ranks_[i]).*tensor;
    std::vector<std::byte> host(m.bytes());
    m.download(host.data());
    const std::vector<float> values = decode(host.data(), shape_.B * rows * width, shape_.dtype);
    const std::vector<std::int64_t> mine = global_rows(shape_, R, comm_.local_ranks()[i]);
    for (std::int64_t b = 0; b < shape_.B; ++b)
      for (std::int64_t l = 0; l < rows; ++l)
        std::memcpy(&full[std::size_t((b * shape_.T + mine[std::size_t(l)]) * width)],
                    &values[std::size_t((b * rows + l) * width)], std::size_t(width) * sizeof(float));
  }
  return full;
}

std::vector<float> RingRanks::gather_o() const { return gather(&Rank::o); }
std::vector<float> RingRanks::gather_dq() const { return gather(&Rank::dq); }

}  // namespace lab
