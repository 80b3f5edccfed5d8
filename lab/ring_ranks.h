// The ranks of one `attnlab ring` run (ring.cpp): each rank's slices of Q, K, V, dO and its outputs, its context
// and streams, its ring scratch, on the rank's device; the full sequence's inputs scattered onto them and the
// outputs gathered back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <attnlab/attention.h>
#include <attnlab/ring.h>

#include "gpu.h"

namespace lab {

struct RingShape {
  std::int64_t B = 1, T = 0, N = 32, K = 8, H = 128;
  attnlab::DType dtype = attnlab::DType::bf16;
  bool causal = true;
  attnlab::RingLayout layout = attnlab::RingLayout::zigzag;
  std::string path = "auto";
  std::string backward_path = "auto";
};

// Host or device memory of one rank (256-byte aligned on the host, as the ring's scratch must be).
class RankMemory {
 public:
  RankMemory(std::size_t bytes, attnlab::Device device, int device_index);
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host);   // all bytes
  void download(void* host) const;

 private:
  std::unique_ptr<std::byte[]> host_;
  gpu::DeviceBuffer device_buffer_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class RingRanks {
 public:
  // Places the slices of the full sequence whose rows are drawn by row_values (ring.cpp) on every local rank of
  // `comm`; with `backward`, dO and the gradients too. Scratch of ring_workspace_size for each direction.
  RingRanks(const RingShape& s, attnlab::RingCommunicator& comm, bool backward, std::uint64_t seed);
  ~RingRanks();

  // The ring calls, waiting for every rank's streams before they return.
  attnlab::RingRunInfo forward(bool measure);
  attnlab::RingRunInfo backward(bool measure);
  // The plain attnlab::forward / backward of the first local rank's tensors (the whole sequence when the ring has
  // one rank), waiting for its stream; RunInfo's path in the returned path.
  attnlab::RingRunInfo single_forward();
  attnlab::RingRunInfo single_backward();
  void synchronize();  // every rank's streams
  // O (and dQ) of the whole sequence, gathered from the ranks as f32, (B, T, N, H).
  std::vector<float> gather_o() const;
  std::vector<float> gather_dq() const;

 private:
  struct Rank;
  std::vector<float> gather(RankMemory Rank::*tensor) const;
  RingShape shape_;
  attnlab::RingCommunicator& comm_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<attnlab::RingForwardShard> forward_;
  std::vector<attnlab::RingBackwardShard> backward_;
};

}  // namespace lab
