// attnlab ring attention: context parallelism over a ring of ranks (docs/ring.md).
//
// A sequence of T tokens is cut into R slices, one per rank. Each rank holds its slice of Q, K and V; the K/V
// slices travel around the ring (rank r sends to r + 1 and receives from r − 1, R − 1 times) while each rank
// attends its queries to the block it holds; the partial outputs are merged through their LSE. In the backward
// pass the K/V slices travel the same way, and each block's dK/dV accumulator travels with it and arrives back at
// its own rank after R shifts.
//
// Layouts (the slices each rank holds, self-attention: T = S):
//   contiguous  rank r holds tokens [r·T/R, (r + 1)·T/R)
//   zigzag      the sequence is cut into 2R chunks; rank r holds chunks r and 2R − 1 − r, concatenated, so that
//               under a causal mask every rank does the same work at every step (T divisible by 2R)
//
// The per-block attention is attnlab::forward / attnlab::backward on the path each shard's options name, so every
// path (CPU or GPU) runs in a ring. The exchange goes through a RingCommunicator: NCCL (one process per GPU, or
// one process driving several), or a loopback that runs the same ring inside one process on one device (CPU or
// one GPU), which is how the algorithm is tested without several GPUs.
//
// The result equals the single-device call up to rounding: the block outputs are merged in f32 and rounded to the
// output dtype once; block gradients are accumulated in f32 likewise.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/attention.h"

namespace attnlab {

enum class RingLayout : std::uint8_t { contiguous, zigzag };
ATTNLAB_API std::string_view to_string(RingLayout layout);

// ---------------------------------------------------------------------------------------------------------------
// Communicators: the ranks of one ring and the one operation the ring needs, a shift to the next rank.
// ---------------------------------------------------------------------------------------------------------------
class ATTNLAB_API RingCommunicator {
 public:
  virtual ~RingCommunicator();
  // Ranks in the ring.
  virtual int size() const = 0;
  // The ranks this process drives, ascending: one (a process per GPU) or several (one process, several GPUs, or
  // every rank of a loopback).
  virtual const std::vector<int>& local_ranks() const = 0;
  // Where the ranks' tensors live, and the GPU of local rank i (0 on the CPU).
  virtual Device device() const = 0;
  virtual int device_index(std::size_t local_index) const = 0;
  // "loopback (3 ranks, cpu)", "nccl (2 ranks, 2 local)".
  virtual std::string describe() const = 0;

  // One step of the ring, for every local rank i together: `bytes` from send[i] go to the next rank, recv[i]
  // receives the previous rank's. On the GPU the transfer is ordered on streams[i] (after the work queued there
  // before, and before the work queued after) and the call returns once it is queued; on the CPU it returns when
  // it is done. send and recv of one rank never overlap; every rank of the ring must make the same calls.
  virtual void shift(const std::vector<const void*>& send, const std::vector<void*>& recv, std::size_t bytes,
                     const std::vector<void*>& streams) = 0;
};

// A ring of `ranks` ranks inside this process, all on one device (the CPU, or GPU `device_index`): a shift copies
// each rank's send buffer into the next rank's receive buffer (cudaMemcpyAsync on the GPU). For tests and for the
// lab on one GPU. GPU: creates one CUDA event per rank, used to order each copy after both ranks' streams.
ATTNLAB_API std::unique_ptr<RingCommunicator> loopback_communicator(int ranks, Device device = Device::cpu,
                                                                   int device_index = 0);

// NCCL (https://docs.nvidia.com/deeplearning/nccl/): libattnlab does not link it; the first NCCL call loads
// libnccl.so.2 from the library search path and fails with ErrorCode::unsupported, naming the library, when it
// is not there (or in a build without CUDA).
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};
// Rank 0 makes the id and hands it to the other processes (a file, MPI, the framework's store).
ATTNLAB_API NcclUniqueId nccl_unique_id();
// One process per GPU: this process is `rank` of `ranks`, on GPU `device_index`.
ATTNLAB_API std::unique_ptr<RingCommunicator> nccl_communicator(const NcclUniqueId& id, int ranks, int rank,
                                                               int device_index);
// One process driving every rank: rank i on GPU device_indices[i] (ncclCommInitAll). The GPUs must differ.
ATTNLAB_API std::unique_ptr<RingCommunicator> nccl_communicator(const std::vector<int>& device_indices);

// ---------------------------------------------------------------------------------------------------------------
// Ring calls. Each local rank passes its shard: its context (its stream runs the attention, its path option and
// tuning choose the kernels), its slice of the tensors, and scratch memory of ring_workspace_size() bytes on its
// device (host memory on the CPU). The ring itself allocates no memory: each block call is an attnlab::forward /
// backward with the shard's own `workspace` when one is given (else the context's).
// Outputs: every rule is checked before any work, so a refused call writes nothing; once the blocks run, each output
// row is written when its last block is merged, so only a device failure midway (out of memory for a block call's
// workspace, an NCCL error) can leave some rows written and others not.
// Rules (checked on every shard before any work; each failure names its rule): q, k, v slices of one length
// (self-attention, T/R = S/R), the same shapes, dtypes and options on every shard, no bias, boolean mask, sequence
// lengths, sliding window or FP8; causal top-left or bottom-right (the same thing when T = S); zigzag needs an
// even slice length.
// ---------------------------------------------------------------------------------------------------------------
struct RingOptions {
  RingLayout layout = RingLayout::contiguous;
  // GPU: record CUDA events around every wait for a transfer and report the waits in RingRunInfo. The call then
  // waits for its own work to finish before it returns (the one call here that synchronizes; off by default).
  bool measure_waits = false;
};

struct RingForwardShard {
  Context* ctx = nullptr;
  ForwardArgs args;  // q (B, T/R, N, Hqk), k (B, T/R, K, Hqk), v (B, T/R, K, Hv), o (B, T/R, N, Hv), lse optional
  DeviceBuffer ring_workspace;
  // GPU: the stream the exchange runs on, so that it overlaps the attention on ctx's stream; nullptr = ctx's
  // stream (no overlap). It must not be ctx's stream's legacy-default twin; it is the caller's, like ctx's.
  void* transfer_stream = nullptr;
};

struct RingBackwardShard {
  Context* ctx = nullptr;
  BackwardArgs args;  // o and lse from ring_forward of the same layout; dq, dk, dv this rank's slices
  DeviceBuffer ring_workspace;
  void* transfer_stream = nullptr;
};

struct RingRunInfo {
  std::string path;     // the path of the block calls (for "auto", what the first block call resolved to)
  int steps = 0;        // ring steps (R)
  int block_calls = 0;  // attention calls made by this process's ranks
  // With RingOptions::measure_waits on the GPU: per local rank, the milliseconds its stream spent waiting for
  // transfers, and the whole call's milliseconds on that rank's stream (first block call to last store).
  std::vector<double> wait_ms, total_ms;
};

// Scratch bytes one rank's shard needs (the same on every rank), 256-byte aligned blocks inside.
ATTNLAB_API std::size_t ring_workspace_size(const RingCommunicator& comm, const ForwardArgs& shard,
                                            const RingOptions& options = {});
ATTNLAB_API std::size_t ring_workspace_size(const RingCommunicator& comm, const BackwardArgs& shard,
                                            const RingOptions& options = {});

ATTNLAB_API RingRunInfo ring_forward(RingCommunicator& comm, const std::vector<RingForwardShard>& local,
                                     const RingOptions& options = {});
ATTNLAB_API RingRunInfo ring_backward(RingCommunicator& comm, const std::vector<RingBackwardShard>& local,
                                      const RingOptions& options = {});

// The rows of the full sequence that rank `rank` of `ranks` holds under `layout`, as [begin, end) ranges in its
// local order (one range for contiguous, two for zigzag): for scattering a sequence onto ranks and gathering it.
ATTNLAB_API std::vector<std::array<std::int64_t, 2>> ring_rows(RingLayout layout, int ranks, int rank,
                                                               std::int64_t T);

}  // namespace attnlab
