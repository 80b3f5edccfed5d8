// A Context's destructor never throws and never crashes, in the two situations an engine cannot rule out. A plain
// program, not a GoogleTest one: what is under test is how the process ends.
//
//   gpu_teardown sticky    A context holding handles, plans and a workspace for every CUDA path; then a kernel
//                          faults (a flash read at an address nothing is mapped at), which leaves the CUDA context
//                          in a sticky error state. Every later call must throw attnlab::Error (device_error), and
//                          destroying the context afterwards must return normally.
//   gpu_teardown at-exit   A context with static storage duration, used by every CUDA path and never destroyed by
//                          hand: its destructor runs after main returns, after the CUDA runtime's own exit handlers
//                          (the runtime starts, and registers them, after the context was constructed).
//
// Exit status: 0 passed; 1 failed (a line on stderr says why); 77 no GPU here (ctest: skipped). A destructor that
// throws ends the process through std::terminate (SIGABRT), a crash by its signal: both are failures to ctest.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/version.h"

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace {

constexpr int kSkip = 77;

#if ATTNLAB_WITH_CUDA

int fail(const std::string& why) {
  std::fprintf(stderr, "gpu_teardown: FAILED: %s\n", why.c_str());
  return 1;
}

// The CUDA paths this machine can run, or why none can ("" when some can).
std::string cuda_paths(std::vector<std::string>& available) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no usable CUDA device (") + cudaGetErrorString(status) + ")";
  if (count == 0) return "no CUDA device";
  for (const attnlab::PathInfo& p : attnlab::list_paths()) {
    if (p.device != attnlab::Device::cuda) continue;
    if (p.name == "flash-sm80" || p.name == "flash-sm90") continue;  // the kernels of path flash, which runs here
    if (p.available) {
      available.push_back(p.name);
    } else {
      std::printf("gpu_teardown: path %s unavailable here (%s)\n", p.name.c_str(), p.unavailable.c_str());
    }
  }
  return available.empty() ? "no CUDA path is available" : "";
}

bool has(const std::vector<std::string>& paths, const char* name) {
  for (const std::string& p : paths)
    if (p == name) return true;
  return false;
}

// A small bf16 problem in device memory, (B, T, N, H) = (1, 64, 2, 64), with finite inputs, and the arguments of
// its forward and backward calls.
class Problem {
 public:
  bool make() {
    constexpr std::int64_t B = 1, T = 64, N = 2, H = 64, elems = B * T * N * H;
    void* t[8] = {};
    for (void*& p : t)
      if (cudaMalloc(&p, elems * 2) != cudaSuccess) return false;
    void* lse = nullptr;
    if (cudaMalloc(&lse, B * N * T * 4) != cudaSuccess) return false;
    blocks_.assign(std::begin(t), std::end(t));
    blocks_.push_back(lse);
    std::vector<std::uint16_t> host(static_cast<std::size_t>(elems));
    for (std::size_t i = 0; i < host.size(); ++i) {
      const float x = float(int((i * 37) % 200) - 100) / 100.0f;  // in [−1, 1)
      std::uint32_t bits;
      std::memcpy(&bits, &x, 4);
      host[i] = std::uint16_t(bits >> 16);  // bf16: the upper half of the f32
    }
    for (int i : {0, 1, 2, 4})  // q, k, v, d_o
      if (cudaMemcpy(t[i], host.data(), host.size() * 2, cudaMemcpyHostToDevice) != cudaSuccess) return false;
    auto view = [&](void* p) {
      return attnlab::TensorView::contiguous(p, attnlab::DType::bf16, {B, T, N, H}, attnlab::Device::cuda);
    };
    fwd.q = view(t[0]), fwd.k = view(t[1]), fwd.v = view(t[2]), fwd.o = view(t[3]);
    fwd.lse = attnlab::TensorView::contiguous(lse, attnlab::DType::f32, {B, N, T}, attnlab::Device::cuda);
    bwd.q = fwd.q, bwd.k = fwd.k, bwd.v = fwd.v, bwd.o = fwd.o, bwd.lse = fwd.lse;
    bwd.d_o = view(t[4]), bwd.dq = view(t[5]), bwd.dk = view(t[6]), bwd.dv = view(t[7]);
    return true;
  }
  ~Problem() {
    for (void* p : blocks_) cudaFree(p);  // after a sticky error this fails; nothing to do about it
  }

  attnlab::ForwardArgs fwd;
  attnlab::BackwardArgs bwd;

 private:
  std::vector<void*> blocks_;
};

// One forward on every available path and one backward on those that have it, then a device sync: afterwards the
// context holds a cuBLAS/cuDNN handle, cuDNN graphs, and a workspace.
std::string use_every_path(attnlab::Context& ctx, Problem& p, const std::vector<std::string>& paths) {
  try {
    for (const std::string& name : paths) {
      attnlab::ForwardArgs f = p.fwd;
      f.options.path = name;
      attnlab::forward(ctx, f);
      if (name != "flash") {
        attnlab::BackwardArgs b = p.bwd;
        b.options.path = name;
        attnlab::backward(ctx, b);
      }
    }
  } catch (const std::exception& e) {
    return std::string("a call before the fault failed: ") + e.what();
  }
  const cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess) return std::string("device error after the calls: ") + cudaGetErrorString(status);
  return "";
}

// A call after the sticky error: must throw attnlab::Error with code device_error. Returns what went wrong ("" ok).
template <class Call>
std::string expect_device_error(const std::string& what, Call call) {
  try {
    call();
  } catch (const attnlab::Error& e) {
    if (e.code() == attnlab::ErrorCode::device_error) return "";
    return what + ": attnlab::Error with code " + std::to_string(int(e.code())) + " (not device_error): " + e.what();
  } catch (const std::exception& e) {
    return what + ": threw something other than attnlab::Error: " + e.what();
  }
  return what + ": returned normally although the CUDA context has a sticky error";
}

int sticky() {
  std::vector<std::string> paths;
  if (const std::string why = cuda_paths(paths); !why.empty()) {
    std::printf("gpu_teardown: skipped: %s\n", why.c_str());
    return kSkip;
  }
  Problem p;
  if (!p.make()) return fail("could not set up device buffers");
  auto ctx = std::make_unique<attnlab::Context>();
  if (const std::string why = use_every_path(*ctx, p, paths); !why.empty()) return fail(why);

  // The fault: q 16-byte aligned (the arguments are valid to look at) but pointing where nothing is mapped.
  attnlab::ForwardArgs bogus = p.fwd;
  bogus.q.data = reinterpret_cast<void*>(std::uintptr_t(0x10000));
  bogus.options.path = has(paths, "flash") ? "flash" : paths.front();
  try {
    attnlab::forward(*ctx, bogus);  // launches; the fault comes asynchronously
  } catch (const attnlab::Error& e) {
    std::printf("gpu_teardown: the faulting call itself threw: %s\n", e.what());
  }
  const cudaError_t fault = cudaDeviceSynchronize();
  if (fault == cudaSuccess) return fail("reading q at 0x10000 did not fault: no sticky error to test with");
  std::printf("gpu_teardown: the kernel faulted: %s\n", cudaGetErrorString(fault));

  std::vector<std::string> problems;
  for (const std::string& name : paths) {
    attnlab::ForwardArgs f = p.fwd;
    f.options.path = name;
    problems.push_back(expect_device_error("forward on " + name, [&] { attnlab::forward(*ctx, f); }));
    if (name == "flash") continue;
    attnlab::BackwardArgs b = p.bwd;
    b.options.path = name;
    problems.push_back(expect_device_error("backward on " + name, [&] { attnlab::backward(*ctx, b); }));
  }
  {
    attnlab::Context fresh;  // a context made after the fault fails the same way, and goes quietly too
    attnlab::ForwardArgs f = p.fwd;
    f.options.path = paths.front();
    problems.push_back(expect_device_error("forward on a new context", [&] { attnlab::forward(fresh, f); }));
  }
  ctx.reset();  // the destructor under test: it must return (a throw would end the process in std::terminate)
  int failures = 0;
  for (const std::string& why : problems)
    if (!why.empty()) failures = fail(why);
  if (failures != 0) return failures;
  std::printf("gpu_teardown sticky: passed (every call after the fault threw device_error; context destroyed)\n");
  return 0;
}

// Constructed before main, so destroyed after main returns and after the CUDA runtime's exit handlers (registered
// once the runtime starts, inside main). The reporter, constructed before it, is destroyed after it and says so.
struct ExitReporter {
  bool armed = false;
  ~ExitReporter() {
    if (armed) std::printf("gpu_teardown at-exit: the global context's destructor returned\n");
  }
};
ExitReporter exit_reporter;
attnlab::Context global_context;

int at_exit() {
  std::vector<std::string> paths;
  if (const std::string why = cuda_paths(paths); !why.empty()) {
    std::printf("gpu_teardown: skipped: %s\n", why.c_str());
    return kSkip;
  }
  // An engine's stream, never destroyed: the context's last use of it is in its destructor, at exit.
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return fail("cudaStreamCreate");
  global_context.set_stream(stream);
  {
    Problem p;
    if (!p.make()) return fail("could not set up device buffers");
    if (const std::string why = use_every_path(global_context, p, paths); !why.empty()) return fail(why);
  }
  exit_reporter.armed = true;
  std::printf("gpu_teardown at-exit: calls done; the context is destroyed at exit\n");
  std::fflush(stdout);
  return 0;
}

#endif  // ATTNLAB_WITH_CUDA

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "sticky" && mode != "at-exit") {
    std::fprintf(stderr, "usage: gpu_teardown sticky|at-exit\n");
    return 2;
  }
#if ATTNLAB_WITH_CUDA
  return mode == "sticky" ? sticky() : at_exit();
#else
  std::printf("gpu_teardown: skipped: attnlab was built without CUDA\n");
  return kSkip;
#endif
}
