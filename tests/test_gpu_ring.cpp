// Ring attention on one GPU (include/attnlab/ring.h): the loopback communicator runs 1–4 ranks on the device, each
// rank with its own context on a non-blocking stream and its own non-blocking transfer stream (the exchange
// overlaps the attention), or everything on the legacy default stream; cudnn and flash block calls; both layouts,
// causal and not, GQA; forward and backward against the fp64 reference of the whole sequence (ring_case.h). NCCL:
// a ring of every GPU of this machine in one process (one rank when there is one GPU), where libnccl.so.2 loads.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <tuple>

#include "attnlab/ring.h"
#include "attnlab/version.h"
#include "device_mirror.h"
#include "ring_case.h"

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace attnlab_test {
namespace {

using attnlab::RingLayout;

#if ATTNLAB_WITH_CUDA
// Contexts, streams, device copies and scratch of one GPU ring, a context per local rank on devices[rank] (a
// loopback puts every rank on GPU 0); everything freed at the end of the test.
class GpuRing {
 public:
  GpuRing(const std::vector<int>& devices, bool non_blocking) {
    for (int device : devices) {
      cudaSetDevice(device);
      auto ctx = std::make_unique<attnlab::Context>();
      void* transfer = nullptr;
      if (non_blocking) {
        cudaStream_t compute = nullptr, x = nullptr;
        cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
        cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking);
        streams_.push_back(compute), streams_.push_back(x);
        ctx->set_stream(compute);
        transfer = x;
      }
      place_.contexts.push_back(ctx.get());
      place_.transfer_streams.push_back(transfer);
      contexts_.push_back(std::move(ctx));
    }
    cudaSetDevice(devices.front());
    place_.device = Device::cuda;
    place_.place = [this, devices](HostTensor& t, std::size_t local) {
      cudaSetDevice(devices[local]);
      const TensorView v = mirror_.upload(t);
      cudaSetDevice(devices.front());
      return v;
    };
    place_.fetch = [this](HostTensor& t) { mirror_.download(t); };
    place_.scratch = [this, devices](std::size_t bytes, std::size_t local) {
      void* p = nullptr;
      cudaSetDevice(devices[local]);
      EXPECT_EQ(cudaMalloc(&p, bytes == 0 ? 256 : bytes), cudaSuccess);
      cudaSetDevice(devices.front());
      scratch_.push_back(p);
      return attnlab::DeviceBuffer{p, bytes};
    };
    place_.synchronize = [this] { mirror_.synchronize(); };
  }
  ~GpuRing() {
    cudaDeviceSynchronize();
    for (void* p : scratch_) cudaFree(p);
    contexts_.clear();
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
  }
  RingPlace& place() { return place_; }

 private:
  DeviceMirror mirror_;
  RingPlace place_;
  std::vector<std::unique_ptr<attnlab::Context>> contexts_;
  std::vector<cudaStream_t> streams_;
  std::vector<void*> scratch_;
};
#else
// A build without CUDA: every test below skips (ATTNLAB_REQUIRE_GPU) before it would make one.
class GpuRing {
 public:
  GpuRing(const std::vector<int>&, bool) {}
  RingPlace& place() { return place_; }

 private:
  RingPlace place_;
};
int cudaGetDeviceCount(int* count) {
  *count = 0;
  return 0;
}
#endif

#if ATTNLAB_WITH_CUDA
// A loopback whose transfers start late: each shift first holds every transfer stream for a few milliseconds (a
// host function that sleeps), so that a block call not ordered after the transfer it needs reads the old block,
// and a transfer not ordered after the block calls that read its buffer overwrites it early. With small inputs the
// real copies finish too soon for a missing wait to show; these do not.
void CUDART_CB sleep_2ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }

class SlowLoopback final : public attnlab::RingCommunicator {
 public:
  explicit SlowLoopback(int ranks) : inner_(attnlab::loopback_communicator(ranks, Device::cuda, 0)) {}
  int size() const override { return inner_->size(); }
  const std::vector<int>& local_ranks() const override { return inner_->local_ranks(); }
  Device device() const override { return Device::cuda; }
  int device_index(std::size_t i) const override { return inner_->device_index(i); }
  std::string describe() const override { return "slow " + inner_->describe(); }
  void shift(const std::vector<const void*>& send, const std::vector<void*>& recv, std::size_t bytes,
             const std::vector<void*>& streams) override {
    for (void* s : streams) EXPECT_EQ(cudaLaunchHostFunc(static_cast<cudaStream_t>(s), sleep_2ms, nullptr), 0);
    inner_->shift(send, recv, bytes, streams);
  }

 private:
  std::unique_ptr<attnlab::RingCommunicator> inner_;
};

TEST(GpuRingOrder, LateTransfersStillOrdered) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  for (const RingLayout layout : {RingLayout::contiguous, RingLayout::zigzag}) {
    RingCase c;
    c.ranks = 4, c.layout = layout, c.causal = true, c.dtype = DType::bf16, c.N = 4, c.K = 2, c.Hqk = 64, c.Hv = 64;
    c.T = 8 * 40, c.path = "cudnn";
    SlowLoopback comm(c.ranks);
    GpuRing ring(std::vector<int>(std::size_t(c.ranks), 0), true);
    check_ring(c, comm, ring.place(), rng, /*expect_waits=*/false);
  }
}

// NCCL's send and receive in one group: a ring of one rank sends to itself, which one GPU can run (the rings
// above never shift with one rank).
TEST(GpuRingNccl, ShiftToItself) {
  ATTNLAB_REQUIRE_GPU();
  std::unique_ptr<attnlab::RingCommunicator> comm;
  try {
    comm = attnlab::nccl_communicator(std::vector<int>{0});
  } catch (const attnlab::Error& e) {
    GTEST_SKIP() << "NCCL test skipped: " << e.what();
  }
  const std::size_t bytes = 3 << 20;
  std::vector<std::uint8_t> host(bytes), back(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) host[i] = std::uint8_t(i * 7 + 3);
  void *send = nullptr, *recv = nullptr;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaMalloc(&send, bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&recv, bytes), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaMemcpy(send, host.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemset(recv, 0, bytes);
  comm->shift({send}, {recv}, bytes, {stream});
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaMemcpy(back.data(), recv, bytes, cudaMemcpyDeviceToHost);
  EXPECT_TRUE(back == host) << "the bytes received differ from those sent";
  cudaFree(send), cudaFree(recv), cudaStreamDestroy(stream);
}
#endif

using Grid = std::tuple<int, RingLayout, bool, std::string>;
class GpuRingLoopback : public ::testing::TestWithParam<Grid> {};

TEST_P(GpuRingLoopback, MatchesTheWholeSequence) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  RingCase c;
  std::tie(c.ranks, c.layout, c.causal, c.path) = GetParam();
  if (c.path == "flash") c.backward_path = "cudnn";  // flash has no backward kernel
  c.dtype = DType::bf16, c.B = 1, c.N = 4, c.K = 2, c.Hqk = 128, c.Hv = 128;
  c.T = 2 * c.ranks * 57;  // 114 rows a rank: no multiple of a tile
  GpuRing ring(std::vector<int>(std::size_t(c.ranks), 0), /*non_blocking=*/true);
  auto comm = attnlab::loopback_communicator(c.ranks, Device::cuda, 0);
  check_ring(c, *comm, ring.place(), rng, /*expect_waits=*/c.ranks % 2 == 0);
}

// Every rank's attention and exchange on the legacy default stream (contexts given no stream, no transfer
// stream): the ring orders itself on one stream.
TEST(GpuRingFeatures, LegacyDefaultStream) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  RingCase c;
  c.ranks = 3, c.layout = RingLayout::zigzag, c.causal = true, c.dtype = DType::bf16, c.N = 4, c.K = 2;
  c.Hqk = 128, c.Hv = 128, c.T = 6 * 57, c.path = "flash", c.backward_path = "auto";
  GpuRing ring(std::vector<int>(std::size_t(c.ranks), 0), /*non_blocking=*/false);
  auto comm = attnlab::loopback_communicator(c.ranks, Device::cuda, 0);
  check_ring(c, *comm, ring.place(), rng);
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuRingLoopback,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(RingLayout::contiguous, RingLayout::zigzag),
                                            ::testing::Bool(), ::testing::Values("cudnn", "flash")),
                         [](const auto& info) {
                           return "R" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::string(attnlab::to_string(std::get<1>(info.param))) +
                                  (std::get<2>(info.param) ? "_causal_" : "_") + std::get<3>(info.param);
                         });

TEST(GpuRingFeatures, OddSlicesHeadDim64F16) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  RingCase c;
  c.ranks = 3, c.layout = RingLayout::zigzag, c.causal = true, c.T = 6 * 1;  // one token a chunk
  c.dtype = DType::f16, c.N = 8, c.K = 1, c.Hqk = 64, c.Hv = 64, c.path = "auto";
  GpuRing ring(std::vector<int>(std::size_t(c.ranks), 0), true);
  auto comm = attnlab::loopback_communicator(c.ranks, Device::cuda, 0);
  check_ring(c, *comm, ring.place(), rng);
  c.T = 6 * 57, c.causal = false, c.layout = RingLayout::contiguous;  // 114 rows a rank
  check_ring(c, *comm, ring.place(), rng);
}

// Head dims that are no multiple of 8 and apart (Hqk 6, Hv 8) on cuda-naive, which takes any: the dV accumulator
// follows dK's and is not 16-byte aligned, the element kernels must take their scalar form there; odd slices.
TEST(GpuRingFeatures, OddSplitHeadDimsNaive) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  RingCase c;
  c.ranks = 3, c.layout = RingLayout::contiguous, c.causal = true, c.T = 3 * 37;
  c.dtype = DType::f16, c.N = 2, c.K = 1, c.Hqk = 6, c.Hv = 8, c.path = "cuda-naive";
  GpuRing ring(std::vector<int>(std::size_t(c.ranks), 0), true);
  auto comm = attnlab::loopback_communicator(c.ranks, Device::cuda, 0);
  check_ring(c, *comm, ring.place(), rng);
}

// NCCL: one process driving every GPU here, one rank each.
TEST(GpuRingNccl, EveryGpuOfThisMachine) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  int devices = 0;
  cudaGetDeviceCount(&devices);
  std::vector<int> list;
  for (int d = 0; d < devices; ++d) list.push_back(d);
  std::unique_ptr<attnlab::RingCommunicator> comm;
  try {
    comm = attnlab::nccl_communicator(list);
  } catch (const attnlab::Error& e) {
    GTEST_SKIP() << "NCCL test skipped: " << e.what();
  }
  RingCase c;
  c.ranks = devices, c.causal = true, c.layout = RingLayout::zigzag, c.dtype = DType::bf16;
  c.B = 1, c.N = 4, c.K = 2, c.Hqk = 128, c.Hv = 128, c.T = 2 * devices * 100, c.path = "auto";
  GpuRing ring(list, true);
  check_ring(c, *comm, ring.place(), rng, true);
  RecordProperty("nccl_ranks", devices);
}

// NCCL, one process per GPU (ncclCommInitRank through an id this process makes): here a ring of one rank, which
// every machine with a GPU can run; several processes need several GPUs.
TEST(GpuRingNccl, OneProcessPerGpuApi) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  std::unique_ptr<attnlab::RingCommunicator> comm;
  try {
    comm = attnlab::nccl_communicator(attnlab::nccl_unique_id(), 1, 0, 0);
  } catch (const attnlab::Error& e) {
    GTEST_SKIP() << "NCCL test skipped: " << e.what();
  }
  EXPECT_EQ(comm->size(), 1);
  RingCase c;
  c.ranks = 1, c.causal = true, c.dtype = DType::bf16, c.N = 4, c.K = 4, c.Hqk = 64, c.Hv = 64, c.T = 300;
  c.path = "cudnn";
  GpuRing ring(std::vector<int>(std::size_t(c.ranks), 0), true);
  check_ring(c, *comm, ring.place(), rng);
  EXPECT_THROW(attnlab::nccl_communicator(attnlab::nccl_unique_id(), 2, 2, 0), attnlab::Error);
  EXPECT_THROW(attnlab::nccl_communicator(std::vector<int>{0, 0}), attnlab::Error);
}

}  // namespace
}  // namespace attnlab_test
