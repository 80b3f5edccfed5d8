// The NCCL communicator: the ring's shift as one ncclSend to the next rank and one ncclRecv from the previous
// rank per local rank, inside one NCCL group (so that one process driving several GPUs, or a send and a receive
// of one rank, never deadlock on each other's order).
// libattnlab does not link NCCL: its functions are looked up in libnccl.so.2 when the first communicator is made
// (dlopen), so the library runs where NCCL is not installed and a ring over NCCL names what is missing. The types
// come from nccl.h (shipped with the CUDA toolkit); a build without it, or without CUDA, refuses by name.
#include <fmt/format.h>

#include "attnlab/ring.h"
#include "attnlab/version.h"
#include "core/error.h"
#include "ring/ring_ops.h"

#if ATTNLAB_WITH_CUDA && __has_include(<nccl.h>) && __has_include(<dlfcn.h>)
#define ATTNLAB_RING_NCCL 1
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <type_traits>
#else
#define ATTNLAB_RING_NCCL 0
#endif

namespace attnlab {

#if ATTNLAB_RING_NCCL
namespace {

// NCCL's entry points, from the shared library found at run time.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

const NcclApi& nccl() {
  static NcclApi api;
  static std::string problem;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      problem = fmt::format("ring: NCCL is not available: libnccl.so.2 could not be loaded ({}); install NCCL or put "
                            "its lib folder on LD_LIBRARY_PATH",
                            why ? why : "not found");
      return;
    }
    const auto find = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr && problem.empty()) problem = fmt::format("ring: libnccl.so.2 has no {}", name);
    };
    find(api.get_unique_id, "ncclGetUniqueId");
    find(api.comm_init_rank, "ncclCommInitRank");
    find(api.comm_init_all, "ncclCommInitAll");
    find(api.comm_destroy, "ncclCommDestroy");
    find(api.group_start, "ncclGroupStart");
    find(api.group_end, "ncclGroupEnd");
    find(api.send, "ncclSend");
    find(api.recv, "ncclRecv");
    find(api.error_string, "ncclGetErrorString");
  });
  if (!problem.empty()) core::fail(ErrorCode::unsupported, "{}", problem);
  return api;
}

void check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  core::fail(ErrorCode::device_error, "ring: {} failed: {}", what, nccl().error_string(result));
}

class Nccl final : public RingCommunicator {
 public:
  Nccl(int size, std::vector<int> ranks, std::vector<int> devices, std::vector<ncclComm_t> comms)
      : size_(size), ranks_(std::move(ranks)), devices_(std::move(devices)), comms_(std::move(comms)) {}
  ~Nccl() override {
    for (ncclComm_t comm : comms_) nccl().comm_destroy(comm);  // errors at teardown are ignored
  }

  int size() const override { return size_; }
  const std::vector<int>& local_ranks() const override { return ranks_; }
  Device device() const override { return Device::cuda; }
  int device_index(std::size_t local_index) const override { return devices_.at(local_index); }
  std::string describe() const override {
    return fmt::format("nccl ({} ranks, {} in this process)", size_, ranks_.size());
  }

  void shift(const std::vector<const void*>& send, const std::vector<void*>& recv, std::size_t bytes,
             const std::vector<void*>& streams) override {
    if (send.size() != ranks_.size() || recv.size() != ranks_.size() || streams.size() != ranks_.size())
      core::fail(ErrorCode::invalid_argument, "ring: an NCCL shift needs a buffer and a stream per local rank");
    const NcclApi& api = nccl();
    check(api.group_start(), "ncclGroupStart");
    // The group is always closed, also when a send or receive fails to queue: a thread left inside a group would
    // put every later NCCL call of the process into it.
    ncclResult_t failed = ncclSuccess;
    const char* what = "";
    for (std::size_t i = 0; i < ranks_.size() && failed == ncclSuccess; ++i) {
      const int next = (ranks_[i] + 1) % size_, previous = (ranks_[i] + size_ - 1) % size_;
      auto* stream = static_cast<cudaStream_t>(streams[i]);
      failed = api.send(send[i], bytes, ncclInt8, next, comms_[i], stream), what = "ncclSend";
      if (failed == ncclSuccess)
        failed = api.recv(recv[i], bytes, ncclInt8, previous, comms_[i], stream), what = "ncclRecv";
    }
    const ncclResult_t ended = api.group_end();
    check(failed, what);
    check(ended, "ncclGroupEnd");
  }

 private:
  int size_;
  std::vector<int> ranks_, devices_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace

NcclUniqueId nccl_unique_id() {
  ncclUniqueId id;
  check(nccl().get_unique_id(&id), "ncclGetUniqueId");
  NcclUniqueId out;
  static_assert(sizeof(id.internal) == sizeof(out.bytes));
  std::memcpy(out.bytes.data(), id.internal, sizeof(id.internal));
  return out;
}

std::unique_ptr<RingCommunicator> nccl_communicator(const NcclUniqueId& id, int ranks, int rank, int device_index) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    core::fail(ErrorCode::invalid_argument, "ring: nccl_communicator needs 0 <= rank < ranks, got rank {} of {}",
               rank, ranks);
  const NcclApi& api = nccl();
  ncclUniqueId nid;
  std::memcpy(nid.internal, id.bytes.data(), sizeof(nid.internal));
  const ring::gpu::DeviceScope restore_device(true);
  ring::gpu::set_device(device_index);
  ncclComm_t comm = nullptr;
  check(api.comm_init_rank(&comm, ranks, nid, rank), "ncclCommInitRank");
  return std::make_unique<Nccl>(ranks, std::vector<int>{rank}, std::vector<int>{device_index},
                                std::vector<ncclComm_t>{comm});
}

std::unique_ptr<RingCommunicator> nccl_communicator(const std::vector<int>& device_indices) {
  if (device_indices.empty()) core::fail(ErrorCode::invalid_argument, "ring: nccl_communicator needs a GPU");
  for (std::size_t i = 0; i < device_indices.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (device_indices[i] == device_indices[j])
        core::fail(ErrorCode::invalid_argument,
                   "ring: nccl_communicator: GPU {} is named twice (NCCL takes one rank per GPU; the loopback "
                   "communicator runs several ranks on one device)",
                   device_indices[i]);
  const NcclApi& api = nccl();
  const ring::gpu::DeviceScope restore_device(true);
  std::vector<ncclComm_t> comms(device_indices.size());
  check(api.comm_init_all(comms.data(), int(comms.size()), device_indices.data()), "ncclCommInitAll");
  std::vector<int> ranks;
  for (std::size_t i = 0; i < device_indices.size(); ++i) ranks.push_back(int(i));
  return std::make_unique<Nccl>(int(comms.size()), std::move(ranks), device_indices, std::move(comms));
}

#else

namespace {
[[noreturn]] void no_nccl() {
  core::fail(ErrorCode::unsupported, "ring: this build of attnlab has no NCCL support (it needs CUDA and nccl.h at "
                                     "build time)");
}
}  // namespace

NcclUniqueId nccl_unique_id() { no_nccl(); }
std::unique_ptr<RingCommunicator> nccl_communicator(const NcclUniqueId&, int, int, int) { no_nccl(); }
std::unique_ptr<RingCommunicator> nccl_communicator(const std::vector<int>&) { no_nccl(); }

#endif

}  // namespace attnlab
