// Ring attention checked as a user runs it: one sequence of fresh random inputs scattered onto R ranks (contiguous
// or zigzag slices), ring_forward then ring_backward through a communicator, the slices gathered back and held to
// the accuracy criterion of docs/design.md §2 against the fp64 reference of the whole sequence — the criterion the
// single-device call is held to. Shared by the CPU tests (test_ring.cpp) and the GPU ones (test_gpu_ring.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "attnlab/ring.h"
#include "test_support.h"

namespace attnlab_test {

struct RingCase {
  int ranks = 2;
  attnlab::RingLayout layout = attnlab::RingLayout::contiguous;
  bool causal = false;
  std::int64_t B = 1, T = 16, N = 2, K = 2, Hqk = 16, Hv = 16;
  DType dtype = DType::f32;
  std::string path = "cpu-naive";
  std::string backward_path;  // the backward calls' path; empty: `path` (flash has no backward)
  float softcap = 0.0f;
  bool backward = true;
  std::string name() const;
};

// Where a ring runs: how a host tensor reaches the ranks' device and comes back, scratch memory, and each local
// rank's context and transfer stream. The CPU version is `host_ring_place`; GPU tests make their own.
struct RingPlace {
  Device device = Device::cpu;
  // A view of local rank i's tensor on its device (a copy there, on the GPU).
  std::function<TensorView(HostTensor&, std::size_t)> place;
  std::function<void(HostTensor&)> fetch;             // the device copy back into the tensor (outputs)
  std::function<attnlab::DeviceBuffer(std::size_t, std::size_t)> scratch;  // bytes on local rank i's device
  std::function<void()> synchronize;                  // waits for the device
  std::vector<attnlab::Context*> contexts;            // one per local rank
  std::vector<void*> transfer_streams;                // one per local rank (nullptr: the context's)
};

RingPlace host_ring_place(std::vector<attnlab::Context*> contexts);

// Runs the case through `comm` at `place` and checks O, LSE and (when c.backward) dQ, dK, dV; with
// `expect_waits`, also that RingRunInfo reports the waits of every local rank.
void check_ring(const RingCase& c, attnlab::RingCommunicator& comm, RingPlace& place, Rng& rng,
                bool expect_waits = false);

}  // namespace attnlab_test
