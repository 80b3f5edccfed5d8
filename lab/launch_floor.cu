// launch_floor: what a small call costs the host on this machine, split into the kernel launch (the floor under
// every small call's back-to-back time) and the library's own work (docs/perf-notes-flash-sm80.md, "The codelab's default
// shape"). Each kind of call is issued 500 times back to back per group; the kinds take turns within each of 21
// groups, so a CPU that speeds up or slows down during the run moves them all alike. Prints the median host
// microseconds per call of each kind as one JSON line:
//   empty_launch_us             an empty kernel, <<<1, 32>>>, legacy default stream (the stream `attnlab bench` uses)
//   empty_launch_256B_us        the same with a 256-byte parameter block (about the flash kernel's) and a grid
//   empty_launch_40KB_us        the 256-byte one with 40 KB of dynamic shared memory: the flash kernel's launch at
//                               that shape (grid, block, parameters, shared memory) with nothing to run
//   empty_launch_nonblocking_us the first on a stream created non-blocking, which owes the legacy stream no
//                               implicit ordering: whether that ordering costs the host anything
//   cudaGetDevice_us            the cheapest runtime call, a measure of the CPU itself
//   flash_call_us               attnlab::forward with path "flash" at the codelab's default shape (4, 128, 8, 64)
//                               bf16: validation, the path's rules, its parameters and the launch
//   auto_call_us                the same call with path "auto" (the default), which also picks flash there
//   flash_why_not_us            attnlab::why_not("flash", …) on the same arguments: the same host work without
//                               the launch
// flash_call_us − empty_launch_us is what the library adds to a launch. Run it under `taskset -c N` next to
// `attnlab bench` to compare CPUs.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "attnlab/attention.h"

namespace {

struct SmallParams {
  int x;
};
struct LargeParams {
  char bytes[256];
};
__global__ void empty_small(SmallParams) {}
__global__ void empty_large(LargeParams) {}
constexpr int kFlashSmemBytes = 40 * 1024;  // the small-problem kernel at head dim 64 (tile_configs.h)

bool ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "launch_floor: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

struct Kind {
  const char* key;
  std::function<void()> call;
  std::vector<double> per_call_us;  // one entry per group
};

// Every kind once per group, 500 calls each, the device drained before each kind's calls.
void time_interleaved(std::vector<Kind>& kinds) {
  constexpr int kGroups = 21, kCalls = 500;
  for (int g = 0; g < kGroups; ++g) {
    for (Kind& kind : kinds) {
      cudaDeviceSynchronize();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i) kind.call();
      const auto stop = std::chrono::steady_clock::now();
      kind.per_call_us.push_back(std::chrono::duration<double, std::micro>(stop - start).count() / kCalls);
    }
  }
  cudaDeviceSynchronize();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  if (!ok(cudaFree(nullptr), "CUDA initialization")) return 1;
  cudaStream_t nonblocking = nullptr;
  if (!ok(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), "cudaStreamCreateWithFlags")) return 1;

  // The codelab's default shape, BTNH, zeros: the host's work does not depend on the values.
  constexpr std::int64_t B = 4, T = 128, N = 8, H = 64;
  const std::size_t bytes = std::size_t(B * T * N * H) * 2;
  void* buffers[4] = {};
  for (void*& b : buffers) {
    if (!ok(cudaMalloc(&b, bytes), "cudaMalloc") || !ok(cudaMemset(b, 0, bytes), "cudaMemset")) return 1;
  }
  const auto view = [&](void* data) {
    return attnlab::TensorView::contiguous(data, attnlab::DType::bf16, {B, T, N, H}, attnlab::Device::cuda, 0);
  };
  attnlab::ForwardArgs args;
  args.q = view(buffers[0]), args.k = view(buffers[1]), args.v = view(buffers[2]), args.o = view(buffers[3]);
  args.options.path = "flash";
  attnlab::ForwardArgs auto_args = args;
  auto_args.options.path = "auto";
  attnlab::Context ctx;
  const std::string flash = "flash";

  const SmallParams small{1};
  const LargeParams large{};
  int device = 0;
  std::vector<Kind> kinds;
  kinds.push_back({"empty_launch_us", [&] { empty_small<<<1, 32>>>(small); }, {}});
  kinds.push_back({"empty_launch_256B_us", [&] { empty_large<<<dim3(2, 8, 4), 128>>>(large); }, {}});
  kinds.push_back(
      {"empty_launch_40KB_us", [&] { empty_large<<<dim3(2, 8, 4), 128, kFlashSmemBytes>>>(large); }, {}});
  kinds.push_back({"empty_launch_nonblocking_us", [&] { empty_small<<<1, 32, 0, nonblocking>>>(small); }, {}});
  kinds.push_back({"cudaGetDevice_us", [&] { cudaGetDevice(&device); }, {}});
  kinds.push_back({"flash_call_us", [&] { attnlab::forward(ctx, args); }, {}});
  kinds.push_back({"auto_call_us", [&] { attnlab::forward(ctx, auto_args); }, {}});
  kinds.push_back({"flash_why_not_us", [&] { (void)attnlab::why_not(flash, args); }, {}});

  try {
    for (Kind& kind : kinds)  // warm-up: the first launches load each kernel's module
      for (int i = 0; i < 1000; ++i) kind.call();
    if (auto why = attnlab::why_not(flash, args)) {
      std::fprintf(stderr, "launch_floor: flash cannot run the default shape here: %s\n", why->c_str());
      return 1;
    }
    if (!ok(cudaDeviceSynchronize(), "warm-up")) return 1;
    time_interleaved(kinds);
  } catch (const attnlab::Error& e) {
    std::fprintf(stderr, "launch_floor: %s\n", e.what());
    return 1;
  }
  if (!ok(cudaGetLastError(), "launches")) return 1;

  std::printf("{");
  for (std::size_t i = 0; i < kinds.size(); ++i)
    std::printf("%s\"%s\": %.3f", i ? ", " : "", kinds[i].key, median(kinds[i].per_call_us));
  std::printf("}\n");
  for (void* b : buffers) cudaFree(b);
  cudaStreamDestroy(nonblocking);
  return 0;
}
