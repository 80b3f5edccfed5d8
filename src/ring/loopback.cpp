// The loopback communicator: every rank of the ring in this process, on one device. A shift copies rank i's send
// buffer into rank i + 1's receive buffer: memcpy on the CPU; on the GPU cudaMemcpyAsync on the receiver's stream,
// after the sender's stream has reached the shift (an event), and the sender's stream then waits for the copy, so
// that neither rank reuses its buffer early — the ordering NCCL's send/recv pair gives across GPUs.
#include <fmt/format.h>

#include <cstring>

#include "attnlab/ring.h"
#include "core/error.h"
#include "ring/ring_ops.h"

namespace attnlab {

RingCommunicator::~RingCommunicator() = default;

namespace {

class Loopback final : public RingCommunicator {
 public:
  Loopback(int ranks, Device device, int device_index) : device_(device), device_index_(device_index) {
    for (int r = 0; r < ranks; ++r) ranks_.push_back(r);
    if (device == Device::cuda)
      for (int r = 0; r < ranks; ++r) {
        reached_.emplace_back(device_index);
        copied_.emplace_back(device_index);
      }
  }

  int size() const override { return int(ranks_.size()); }
  const std::vector<int>& local_ranks() const override { return ranks_; }
  Device device() const override { return device_; }
  int device_index(std::size_t) const override { return device_ == Device::cuda ? device_index_ : 0; }
  std::string describe() const override {
    return device_ == Device::cuda ? fmt::format("loopback ({} ranks on cuda:{})", size(), device_index_)
                                   : fmt::format("loopback ({} ranks on cpu)", size());
  }

  void shift(const std::vector<const void*>& send, const std::vector<void*>& recv, std::size_t bytes,
             const std::vector<void*>& streams) override {
    const std::size_t R = ranks_.size();
    if (send.size() != R || recv.size() != R || (device_ == Device::cuda && streams.size() != R))
      core::fail(ErrorCode::invalid_argument, "ring: a loopback shift needs a buffer (and stream) per rank");
    if (device_ == Device::cpu) {
      for (std::size_t i = 0; i < R; ++i) std::memcpy(recv[(i + 1) % R], send[i], bytes);
      return;
    }
    const ring::gpu::DeviceScope restore_device(true);
    ring::gpu::set_device(device_index_);
    for (std::size_t i = 0; i < R; ++i) ring::gpu::record(reached_[i].get(), streams[i]);
    for (std::size_t i = 0; i < R; ++i) {
      const std::size_t to = (i + 1) % R;
      if (to != i) ring::gpu::wait(streams[to], reached_[i].get());
      ring::gpu::copy_async(recv[to], send[i], bytes, streams[to]);
      ring::gpu::record(copied_[to].get(), streams[to]);
    }
    for (std::size_t i = 0; i < R; ++i)
      if ((i + 1) % R != i) ring::gpu::wait(streams[i], copied_[(i + 1) % R].get());
  }

 private:
  Device device_;
  int device_index_;
  std::vector<int> ranks_;
  std::vector<ring::gpu::Event> reached_, copied_;  // GPU: per rank
};

}  // namespace

std::unique_ptr<RingCommunicator> loopback_communicator(int ranks, Device device, int device_index) {
  if (ranks < 1 || ranks > 1024)
    core::fail(ErrorCode::invalid_argument, "ring: ranks must be in [1, 1024], got {}", ranks);
  if (device_index < 0) core::fail(ErrorCode::invalid_argument, "ring: device_index must be >= 0");
  return std::make_unique<Loopback>(ranks, device, device_index);
}

}  // namespace attnlab
