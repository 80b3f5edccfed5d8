// launch_floor: what one kernel launch costs the host on this machine, the floor under every small call's
// back-to-back time (docs/perf-notes.md, "The codelab's default shape"). Empty kernels, launched back to back in 21
// groups of 500 on the default stream; prints the median host microseconds per launch as one JSON line:
//   {"empty_launch_us": …, "empty_launch_256B_us": …, "cudaGetDevice_us": …}
// The 256-byte variant carries a parameter block about the size of the flash kernel's; cudaGetDevice is the
// cheapest runtime call, a measure of the CPU itself. Compare with `attnlab bench --paths flash` (its "host ms"
// column) on the same CPU, e.g. both under `taskset -c N`: the difference is the library's own host work.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

struct SmallParams {
  int x;
};
struct LargeParams {
  char bytes[256];
};
__global__ void empty_small(SmallParams) {}
__global__ void empty_large(LargeParams) {}

bool ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "launch_floor: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

template <class Call>
double median_us_per_call(Call call) {
  constexpr int kGroups = 21, kCalls = 500;
  std::vector<double> per_call;
  for (int g = 0; g < kGroups; ++g) {
    cudaDeviceSynchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) call();
    const auto stop = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double, std::micro>(stop - start).count() / kCalls);
  }
  cudaDeviceSynchronize();
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace

int main() {
  if (!ok(cudaFree(nullptr), "CUDA initialization")) return 1;
  const SmallParams small{1};
  const LargeParams large{};
  for (int i = 0; i < 1000; ++i) empty_small<<<1, 32>>>(small);  // warm-up: first launches load the module
  if (!ok(cudaDeviceSynchronize(), "warm-up launches")) return 1;
  const double small_us = median_us_per_call([&] { empty_small<<<1, 32>>>(small); });
  const double large_us = median_us_per_call([&] { empty_large<<<32, 128>>>(large); });
  int device = 0;
  const double get_device_us = median_us_per_call([&] { cudaGetDevice(&device); });
  if (!ok(cudaGetLastError(), "launches")) return 1;
  std::printf("{\"empty_launch_us\": %.3f, \"empty_launch_256B_us\": %.3f, \"cudaGetDevice_us\": %.4f}\n", small_us,
              large_us, get_device_us);
  return 0;
}
