// FP8 attention on the GPU for tests: random e4m3 problems (reference_fp8.h's Problem), and one call's device
// tensors and scales, uploaded, poisoned, run through the public API and read back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "device_mirror.h"
#include "reference_fp8.h"
#include "reference_fp8_backward.h"
#include "test_support.h"

namespace attnlab_test {

// Why FP8 GPU tests cannot run here ("" when they can): no GPU, or one below compute capability 9.0.
std::string fp8_gpu_unavailable();
// The compute capability × 10 of device 0 (0 without a GPU).
int gpu_compute_capability();

#define ATTNLAB_REQUIRE_FP8_GPU()                                                      \
  do {                                                                                 \
    const std::string why_no_fp8 = ::attnlab_test::fp8_gpu_unavailable();             \
    if (!why_no_fp8.empty()) GTEST_SKIP() << "FP8 GPU test skipped: " << why_no_fp8;   \
  } while (0)

// Random real tensors quantized as a recipe quantizes them (scale = 448 / amax, so the largest code is 448), with
// varied magnitudes so the descales differ between q, k and v. No scale_o (set it for an e4m3 O).
fp8ref::Problem random_fp8_problem(Rng& rng, std::int64_t B, std::int64_t T, std::int64_t S, std::int64_t N,
                                   std::int64_t K, std::int64_t Hqk, std::int64_t Hv, bool causal,
                                   bool bottom_right, float scale_s);

struct Fp8Result {
  std::vector<std::uint8_t> o;  // e4m3 codes, dense (B, T, N, Hv)
  std::vector<float> lse;       // dense (B, N, T)
  float amax_s = 0, amax_o = 0;
};

// One forward call of `p` on device 0: q, k, v codes, the scales of p (descales, scale_s, 1 / scale_s, scale_o),
// O (e4m3 when p.scale_o is set, else `o_dtype`) and LSE poisoned (NaN codes / NaN floats), amaxes poisoned NaN.
class Fp8Call {
 public:
  Fp8Call(const fp8ref::Problem& p, bool non_blocking_stream, attnlab::DType o_dtype = attnlab::DType::e4m3);
  ~Fp8Call();
  Fp8Call(const Fp8Call&) = delete;
  Fp8Call& operator=(const Fp8Call&) = delete;

  // Runs the call on the chosen path (throws what attnlab throws) and waits for the stream.
  attnlab::RunInfo run(const std::string& path);
  Fp8Result result();
  void poison_outputs();
  bool o_untouched();  // O still holds the poison
  void use_host_seqlens(std::vector<std::int32_t> q, std::vector<std::int32_t> kv);
  void drop_scale_o();
  void drop_lse();  // a call without LSE (cuDNN then builds its inference graph)
  void drop_amaxes();  // amax_s and amax_o left null (the poisoned floats stay as they are)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct Fp8BackwardResult {
  std::vector<std::uint8_t> dq, dk, dv;  // codes in the gradients' format, dense
  float amax_dp = 0, amax_dq = 0, amax_dk = 0, amax_dv = 0;
};

// One FP8 backward call of `p` with the forward's O, LSE and the dO of `in`: gradients in `grad_format` with the
// scales of `in` (dq.scale … required), poisoned before the call, amaxes poisoned NaN.
class Fp8BackwardCall {
 public:
  Fp8BackwardCall(const fp8ref::Problem& p, const fp8ref::BackwardInputs& in, bool non_blocking_stream);
  ~Fp8BackwardCall();
  Fp8BackwardCall(const Fp8BackwardCall&) = delete;
  Fp8BackwardCall& operator=(const Fp8BackwardCall&) = delete;
  attnlab::RunInfo run(const std::string& path);
  Fp8BackwardResult result();
  bool outputs_untouched();  // dq, dk, dv still the poison, the amaxes still NaN

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnlab_test
