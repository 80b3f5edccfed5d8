// What the flash-sm90 tests share (test_gpu_flash_sm90*.cpp): the Hopper check, the head-dim pairs, a case on
// the path, one binary-wide non-blocking stream and a context per kernel version.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "attnlab/version.h"  // ATTNLAB_WITH_CUDA, before it is tested below

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "cuda/flash_sm90/versions.h"
#include "harness.h"

namespace attnlab_test {

inline std::string hopper_unavailable() {
  const std::string why = gpu_unavailable();
  if (!why.empty()) return why;
#if ATTNLAB_WITH_CUDA
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (major != 9 || minor != 0)
    return "flash-sm90 needs compute capability 9.0; this GPU is " + std::to_string(major) + "." +
           std::to_string(minor);
  return "";
#else
  return "built without CUDA";
#endif
}

#define ATTNLAB_REQUIRE_HOPPER()                                                   \
  do {                                                                             \
    const std::string why_not_hopper = hopper_unavailable();                       \
    if (!why_not_hopper.empty()) GTEST_SKIP() << "GPU test skipped: " << why_not_hopper; \
  } while (0)

// Head dims of Q·Kᵀ and of V.
struct Heads {
  std::int64_t qk, v;
};
constexpr Heads kEveryHeads[] = {{64, 64}, {96, 96}, {128, 128}, {192, 192}, {192, 128}, {256, 256}};

inline std::string heads_name(const Heads& h) {
  return std::to_string(h.qk) + (h.v != h.qk ? "x" + std::to_string(h.v) : "");
}

inline Case sm90_case(DType dtype, Heads heads = {128, 128}) {
  Case c;
  c.device = Device::cuda;
  c.path = "flash-sm90";
  c.dtype = dtype;
  c.Hqk = heads.qk;
  c.Hv = heads.v;
  return c;
}

// One binary-wide non-blocking stream, never destroyed (destroying it at exit could run after the runtime).
inline void* nonblocking_stream() {
#if ATTNLAB_WITH_CUDA
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    if (cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking) != cudaSuccess) ADD_FAILURE() << "no stream";
    return created;
  }();
  return s;
#else
  return nullptr;
#endif
}

// A context that runs kernel version `version` of flash-sm90.
inline attnlab::Context& version_context(int version) {
  static attnlab::Context contexts[attnlab::cuda::sm90::kVersions];  // by version number, unused ones included
  if (!attnlab::cuda::sm90::version_exists(version))
    throw std::out_of_range("flash-sm90 has no version " + std::to_string(version));
  attnlab::Tuning tuning = contexts[version].tuning();
  tuning.flash_config = version;
  contexts[version].set_tuning(tuning);
  return contexts[version];
}

}  // namespace attnlab_test
