// clock_probe: the SM clock each call of a back-to-back sequence of attention calls ran at, to tell a kernel that
// needs more cycles apart from one that runs at a lower clock (docs/perf-notes-flash-sm90.md, "Head dim 64 at 8k
// causal"). After every call a one-thread probe kernel on the same stream spins for 20 µs of the global timer and
// counts the SM's cycles meanwhile: cycles / ns is the clock the GPU ran at as the call ended (the power limit moves
// it over milliseconds, so within a call of a millisecond or more the probe's reading holds). CUDA events around
// each call time it alone, the probe outside them. With group > 1 the calls run in groups of that many with nothing
// between them, events and probe around each group (as `attnlab bench` times groups of 20 calls): a kernel whose
// time depends on what runs between its calls shows it.
//   clock_probe B T N H causal(0|1) path calls [gap_ms] [group]
// Inputs are drawn from N(0, 1) once, as `attnlab bench` draws them (the power a kernel draws depends on the data).
// gap_ms > 0 sleeps between groups (the device drained first), for the isolated rate. Tuning comes from the
// environment as for any context (ATTNLAB_FLASH_CONFIG picks a flash-sm90 version). Prints one JSON line per group
// ({"call": its first call, "ms" per call, "mhz", "mcycles" per call}) and a last one with the medians over the
// second half of the groups.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attnlab/attention.h"

namespace {

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Cycles and nanoseconds over a spin of `spin_ns` on one SM. The global timer ticks in steps coarser than a cycle,
// so both ends are taken as the timer changes: the spin starts at a tick and ends at the first tick past spin_ns.
__global__ void probe(std::uint64_t* out, int slot, std::uint64_t spin_ns) {
  const std::uint64_t before = global_ns();
  std::uint64_t t0 = before;
  while (t0 == before) t0 = global_ns();
  const long long c0 = clock64();
  std::uint64_t t1 = t0;
  while (t1 - t0 < spin_ns) t1 = global_ns();
  const long long c1 = clock64();
  out[2 * slot] = std::uint64_t(c1 - c0);
  out[2 * slot + 1] = t1 - t0;
}

bool ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "clock_probe: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: clock_probe B T N H causal(0|1) path calls [gap_ms] [group]\n");
    return 2;
  }
  const std::int64_t B = std::atoll(argv[1]), T = std::atoll(argv[2]), N = std::atoll(argv[3]),
                     H = std::atoll(argv[4]);
  const bool causal = std::atoi(argv[5]) != 0;
  const std::string path = argv[6];
  const int calls = std::atoi(argv[7]);
  const int gap_ms = argc > 8 ? std::atoi(argv[8]) : 0;
  const int group = argc > 9 ? std::atoi(argv[9]) : 1;
  if (B <= 0 || T <= 0 || N <= 0 || H <= 0 || calls <= 0 || gap_ms < 0 || group <= 0 || calls % group != 0) {
    std::fprintf(stderr, "clock_probe: B, T, N, H, calls and group must be positive, gap_ms not negative, and calls "
                         "a multiple of group\n");
    return 2;
  }
  const int groups = calls / group;
  constexpr std::uint64_t kSpinNs = 20000;

  const std::size_t elements = std::size_t(B * T * N * H);
  std::vector<__nv_bfloat16> host(elements);
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> normal;
  void* buffers[4] = {};
  for (int i = 0; i < 4; ++i) {
    if (!ok(cudaMalloc(&buffers[i], elements * 2), "cudaMalloc")) return 1;
    for (auto& x : host) x = __float2bfloat16(i < 3 ? normal(rng) : 0.0f);
    if (!ok(cudaMemcpy(buffers[i], host.data(), elements * 2, cudaMemcpyHostToDevice), "cudaMemcpy")) return 1;
  }
  std::uint64_t* readings = nullptr;
  if (!ok(cudaMalloc(&readings, sizeof(std::uint64_t) * 2 * std::size_t(groups)), "cudaMalloc")) return 1;
  std::vector<cudaEvent_t> marks(2 * std::size_t(groups));
  for (auto& e : marks)
    if (!ok(cudaEventCreate(&e), "cudaEventCreate")) return 1;

  const auto view = [&](void* data) {
    return attnlab::TensorView::contiguous(data, attnlab::DType::bf16, {B, T, N, H}, attnlab::Device::cuda, 0);
  };
  attnlab::ForwardArgs args;
  args.q = view(buffers[0]), args.k = view(buffers[1]), args.v = view(buffers[2]), args.o = view(buffers[3]);
  args.options.path = path;
  args.options.mask.causal = causal;
  attnlab::Context ctx;
  try {
    for (int i = 0; i < 3; ++i) attnlab::forward(ctx, args);  // plans, modules, workspace
    if (!ok(cudaDeviceSynchronize(), "warm-up")) return 1;
    for (int g = 0; g < groups; ++g) {
      if (gap_ms > 0) {
        cudaDeviceSynchronize();
        std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
      }
      cudaEventRecord(marks[2 * std::size_t(g)], nullptr);
      for (int i = 0; i < group; ++i) attnlab::forward(ctx, args);
      cudaEventRecord(marks[2 * std::size_t(g) + 1], nullptr);
      probe<<<1, 1>>>(readings, g, kSpinNs);
    }
  } catch (const attnlab::Error& e) {
    std::fprintf(stderr, "clock_probe: %s\n", e.what());
    return 1;
  }
  if (!ok(cudaDeviceSynchronize(), "calls")) return 1;
  std::vector<std::uint64_t> r(2 * std::size_t(groups));
  if (!ok(cudaMemcpy(r.data(), readings, r.size() * sizeof(std::uint64_t), cudaMemcpyDeviceToHost), "readback"))
    return 1;
  std::vector<double> ms_half, mhz_half, mcycles_half;
  for (int g = 0; g < groups; ++g) {
    float group_ms = 0.0f;
    cudaEventElapsedTime(&group_ms, marks[2 * std::size_t(g)], marks[2 * std::size_t(g) + 1]);
    const double ms = double(group_ms) / group;
    const double mhz = double(r[2 * std::size_t(g)]) * 1e3 / double(r[2 * std::size_t(g) + 1]);
    const double mcycles = ms * mhz / 1e3;
    std::printf("{\"call\": %d, \"ms\": %.4f, \"mhz\": %.0f, \"mcycles\": %.4f}\n", g * group, ms, mhz, mcycles);
    if (g >= groups / 2) ms_half.push_back(ms), mhz_half.push_back(mhz), mcycles_half.push_back(mcycles);
  }
  std::printf("{\"B\": %lld, \"T\": %lld, \"N\": %lld, \"H\": %lld, \"causal\": %s, \"path\": \"%s\", \"calls\": %d, "
              "\"gap_ms\": %d, \"group\": %d, \"ms_median\": %.4f, \"mhz_median\": %.0f, \"mcycles_median\": %.4f}\n",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(N),
              static_cast<long long>(H), causal ? "true" : "false", path.c_str(), calls, gap_ms, group, median(ms_half),
              median(mhz_half), median(mcycles_half));
  for (auto& e : marks) cudaEventDestroy(e);
  for (void* b : buffers) cudaFree(b);
  cudaFree(readings);
  return 0;
}
