// FP8 helpers on the GPU (include/attnlab/fp8.h) against the same calls on the CPU, bit for bit:
//   - quantize of f32 / f16 / bf16 tensors of odd sizes (1, 113×203, strided, permuted, padded) writes the CPU's
//     bytes (padding untouched) and the exact amax, on the legacy default stream and on a non-blocking one;
//     dequantize likewise; a tensor of no elements writes amax 0;
//   - DelayedScaling on Device::cuda, stepped with the amaxes its quantizations wrote (and 0, inf, NaN put into
//     its staging slots), equals a Device::cpu recipe fed the same amaxes: scales, scale_invs and histories;
//   - a step (quantize, update) captured in a CUDA graph: nothing in it allocates or waits for the host.
// Every test skips visibly when no GPU can be used.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnlab/fp8.h"
#include "attnlab/version.h"
#include "device_mirror.h"
#include "test_support.h"

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace attnlab_test {
namespace {

using attnlab::AmaxAlgorithm;
using attnlab::DelayedScaling;
using attnlab::DelayedScalingRecipe;
using attnlab::Fp8Pass;
using attnlab::Fp8RecipeFormat;
using attnlab::Fp8Tensor;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

#if ATTNLAB_WITH_CUDA
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// A stream for a test: the legacy default stream (nullptr) or a new non-blocking one, which does not wait for the
// legacy stream: a call that used anything but the context's stream would race here.
class TestStream {
 public:
  explicit TestStream(bool non_blocking) {
    if (non_blocking) cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~TestStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void sync() const { cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
};

// Device copies of host tensors, whole spans (padding included). Uploads finish before returning (the device is
// synchronized: a pageable copy may still be in flight when cudaMemcpy returns, and a non-blocking stream would not
// wait for it); downloads first wait for the test's stream.
class Mirror {
 public:
  ~Mirror() {
    for (auto& e : entries_) cudaFree(e.device);
  }
  TensorView upload(const HostTensor& t) {
    TensorView v = t.view();
    const std::size_t bytes = span(t);
    void* d = nullptr;
    cuda_ok(cudaMalloc(&d, bytes == 0 ? 1 : bytes), "cudaMalloc");
    entries_.push_back({t.data(), d, bytes});
    if (bytes > 0) cuda_ok(cudaMemcpy(d, t.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    v.data = d;
    v.device = Device::cuda;
    return v;
  }
  float* device_float(float value) {
    void* d = nullptr;
    cuda_ok(cudaMalloc(&d, sizeof(float)), "cudaMalloc");
    entries_.push_back({nullptr, d, 0});
    cuda_ok(cudaMemcpy(d, &value, sizeof value, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return static_cast<float*>(d);
  }
  void download(HostTensor& t, const TestStream& stream) {
    stream.sync();
    for (auto& e : entries_)
      if (e.host == t.data() && e.bytes > 0)
        cuda_ok(cudaMemcpy(t.data(), e.device, e.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  static float read_float(const float* d, const TestStream& stream) {
    stream.sync();
    float v = 0;
    cuda_ok(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return v;
  }

 private:
  static std::size_t span(const HostTensor& t) {
    std::int64_t last = 0;
    for (int d = 0; d < t.rank(); ++d) {
      if (t.shape()[std::size_t(d)] == 0) return 0;
      last += (t.shape()[std::size_t(d)] - 1) * t.strides()[std::size_t(d)];
    }
    return std::size_t(last + 1) * elem_size(t.dtype());
  }
  struct Entry {
    const void* host;
    void* device;
    std::size_t bytes;
  };
  std::vector<Entry> entries_;
};

// Random values with the specials sprinkled in: ±inf, values beyond both formats' range, tiny ones.
void fill(HostTensor& t, Rng& rng, double magnitude, bool with_nan) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double u = rng.uniform(0, 1);
    double x = rng.value() * magnitude;
    if (u < 0.01) x = i % 2 ? kInf : -kInf;
    else if (u < 0.03) x = rng.value() * 1e5;
    else if (u < 0.05) x = rng.value() * 1e-6;
    t.set(i, x);
  }
  if (with_nan && t.numel() > 0) t.set(t.numel() / 2, kNaN);
}

struct QuantizeCase {
  std::vector<std::int64_t> shape;
  int layout;  // 0 dense, 1 padded, 2 permuted12, 3 permuted01
};

Layout layout_of(int i) {
  switch (i) {
    case 1: return padded();
    case 2: return permuted12();
    case 3: return permuted01();
    default: return dense();
  }
}
#endif

// ---------------------------------------------------------------------------------------------------------------
// quantize / dequantize: the GPU writes the CPU's bytes
// ---------------------------------------------------------------------------------------------------------------
class GpuFp8Convert : public ::testing::TestWithParam<bool> {};  // non-blocking stream?

TEST_P(GpuFp8Convert, QuantizeMatchesCpuBytes) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  ATTNLAB_TEST_RNG(rng);
  TestStream stream(GetParam());
  attnlab::Context gpu_ctx, cpu_ctx;
  gpu_ctx.set_stream(stream.get());
  const QuantizeCase cases[] = {{{1}, 0},           {{113, 203}, 0},    {{113, 203}, 1},
                                {{3, 113, 203}, 2}, {{2, 17, 3, 29}, 2}, {{5, 4, 3, 31}, 3}};
  for (DType in_dtype : {DType::bf16, DType::f16, DType::f32}) {
    for (DType fp8 : {DType::e4m3, DType::e5m2}) {
      for (const QuantizeCase& c : cases) {
        for (bool with_nan : {false, true}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(in_dtype) << " → " << dtype_name(fp8) << " rank "
                                            << c.shape.size() << " layout " << c.layout << " NaN " << with_nan);
          HostTensor in(in_dtype, c.shape, layout_of(c.layout));
          fill(in, rng, 40.0, with_nan);
          HostTensor cpu_out(fp8, c.shape, layout_of((c.layout + 1) % 4));
          cpu_out.poison();
          HostTensor gpu_out(fp8, c.shape, layout_of((c.layout + 1) % 4));
          gpu_out.poison();
          const float scale = 3.7f;
          float cpu_amax = -1.0f;
          attnlab::quantize(cpu_ctx, in.view(), cpu_out.view(), &scale, &cpu_amax);

          Mirror m;
          const TensorView d_in = m.upload(in);
          const TensorView d_out = m.upload(gpu_out);
          float* d_scale = m.device_float(scale);
          float* d_amax = m.device_float(-1.0f);
          attnlab::quantize(gpu_ctx, d_in, d_out, d_scale, d_amax);
          m.download(gpu_out, stream);
          ASSERT_TRUE(gpu_out.same_bytes(cpu_out.snapshot())) << "the GPU's bytes differ from the CPU's";
          const float gpu_amax = Mirror::read_float(d_amax, stream);
          EXPECT_TRUE(same_float(gpu_amax, cpu_amax)) << "amax " << gpu_amax << " against " << cpu_amax;
          EXPECT_EQ(std::isnan(gpu_amax), with_nan);

          // And back: dequantize of the codes, into the input's dtype and layout.
          HostTensor cpu_back(in_dtype, c.shape, layout_of(c.layout));
          cpu_back.poison();
          HostTensor gpu_back(in_dtype, c.shape, layout_of(c.layout));
          gpu_back.poison();
          const float scale_inv = 1.0f / scale;
          attnlab::dequantize(cpu_ctx, cpu_out.view(), cpu_back.view(), &scale_inv);
          const TensorView d_back = m.upload(gpu_back);
          float* d_scale_inv = m.device_float(scale_inv);
          attnlab::dequantize(gpu_ctx, d_out, d_back, d_scale_inv);
          m.download(gpu_back, stream);
          ASSERT_TRUE(gpu_back.same_bytes(cpu_back.snapshot())) << "dequantize: the GPU's bytes differ";
        }
      }
    }
  }
#endif
}

// Every code of both formats (NaNs of both signs, e5m2's infinities, subnormals), into every float dtype.
TEST_P(GpuFp8Convert, DequantizeEveryCode) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  TestStream stream(GetParam());
  attnlab::Context gpu_ctx, cpu_ctx;
  gpu_ctx.set_stream(stream.get());
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    for (DType out_dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (float scale_inv : {1.0f, 0.3f, 1e-3f, 3e4f}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(fp8) << " → " << dtype_name(out_dtype) << " · " << scale_inv);
        HostTensor codes(fp8, {2, 8, 16}, padded());
        for (int c = 0; c < 256; ++c) codes.set(c, double(c));  // FP8 tensors take raw bytes
        HostTensor cpu_out(out_dtype, {2, 8, 16}, permuted01()), gpu_out(out_dtype, {2, 8, 16}, permuted01());
        cpu_out.poison();
        gpu_out.poison();
        attnlab::dequantize(cpu_ctx, codes.view(), cpu_out.view(), &scale_inv);
        Mirror m;
        const TensorView d_codes = m.upload(codes), d_out = m.upload(gpu_out);
        attnlab::dequantize(gpu_ctx, d_codes, d_out, m.device_float(scale_inv));
        m.download(gpu_out, stream);
        EXPECT_TRUE(gpu_out.same_bytes(cpu_out.snapshot())) << "the GPU's bytes differ from the CPU's";
      }
    }
  }
#endif
}

TEST_P(GpuFp8Convert, NoElementsWritesAmaxZero) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  TestStream stream(GetParam());
  attnlab::Context ctx;
  ctx.set_stream(stream.get());
  Mirror m;
  float* d_scale = m.device_float(1.0f);
  float* d_amax = m.device_float(5.0f);
  const TensorView in = TensorView::contiguous(nullptr, DType::f16, {0, 7}, Device::cuda);
  const TensorView out = TensorView::contiguous(nullptr, DType::e5m2, {0, 7}, Device::cuda);
  attnlab::quantize(ctx, in, out, d_scale, d_amax);
  EXPECT_EQ(Mirror::read_float(d_amax, stream), 0.0f);
#endif
}

INSTANTIATE_TEST_SUITE_P(Streams, GpuFp8Convert, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "NonBlocking" : "LegacyDefault"); });

// ---------------------------------------------------------------------------------------------------------------
// DelayedScaling: the device kernel against the CPU recipe
// ---------------------------------------------------------------------------------------------------------------
struct RecipeCase {
  std::size_t len;
  AmaxAlgorithm algo;
  int margin;
  Fp8RecipeFormat format;
};

#if ATTNLAB_WITH_CUDA
::testing::AssertionResult same_state(DelayedScaling& gpu, attnlab::Context& gpu_ctx, DelayedScaling& cpu,
                                      attnlab::Context& cpu_ctx) {
  for (int t = 0; t < attnlab::kFp8TensorCount; ++t) {
    const attnlab::Fp8TensorState g = gpu.read(gpu_ctx, Fp8Tensor(t)), c = cpu.read(cpu_ctx, Fp8Tensor(t));
    if (!same_float(g.scale, c.scale) || !same_float(g.scale_inv, c.scale_inv))
      return ::testing::AssertionFailure() << "tensor " << t << ": scale " << g.scale << " / " << g.scale_inv
                                           << " against " << c.scale << " / " << c.scale_inv;
    if (g.amax_history.size() != c.amax_history.size()) return ::testing::AssertionFailure() << "history length";
    for (std::size_t i = 0; i < g.amax_history.size(); ++i)
      if (!same_float(g.amax_history[i], c.amax_history[i]))
        return ::testing::AssertionFailure() << "tensor " << t << ": history[" << i << "] " << g.amax_history[i]
                                             << " against " << c.amax_history[i];
  }
  return ::testing::AssertionSuccess();
}

// One pass of a training step on both recipes: each of the pass's tensors is quantized on the GPU with the GPU
// recipe's scale (its amax going to the staging slot; now and then 0, inf or NaN is put there instead), the CPU
// recipe's staging slot gets what the GPU's holds, the CPU's quantization must give the same bytes, then both update.
void run_pass(Fp8Pass pass, DelayedScaling& gpu, attnlab::Context& gpu_ctx, DelayedScaling& cpu,
              attnlab::Context& cpu_ctx, const TestStream& stream, Rng& rng) {
  const int first = pass == Fp8Pass::forward ? 0 : 5;
  for (int t = first; t < first + 5; ++t) {
    const Fp8Tensor tensor = Fp8Tensor(t);
    const attnlab::Fp8TensorScaling g = gpu.tensor(tensor), c = cpu.tensor(tensor);
    const double u = rng.uniform(0, 1);
    if (u < 0.1) {
      const float special = u < 0.04 ? 0.0f : u < 0.07 ? kInf : kNaN;
      cuda_ok(cudaMemcpyAsync(g.amax, &special, sizeof special, cudaMemcpyHostToDevice, stream.get()), "amax");
      stream.sync();
    } else {
      HostTensor x(DType::bf16, {rng.integer(1, 40), 67});
      fill(x, rng, std::exp(rng.uniform(-8, 8)), false);
      for (std::int64_t i = 0; i < x.numel(); ++i)  // finite values only: inf is tested through the special slot
        if (std::isinf(x.get(i))) x.set(i, 1.0);
      Mirror m;
      HostTensor gq(gpu.dtype(tensor), x.shape()), cq(cpu.dtype(tensor), x.shape());
      const TensorView d_x = m.upload(x), d_q = m.upload(gq);
      attnlab::quantize(gpu_ctx, d_x, d_q, g.scale, g.amax);
      m.download(gq, stream);
      attnlab::quantize(cpu_ctx, x.view(), cq.view(), c.scale, nullptr);
      EXPECT_TRUE(gq.same_bytes(cq.snapshot())) << "tensor " << t << ": the recipes' scales quantize differently";
    }
    *c.amax = Mirror::read_float(g.amax, stream);
  }
  gpu.update(gpu_ctx, pass);
  cpu.update(cpu_ctx, pass);
}
#endif

class GpuFp8Recipe : public ::testing::TestWithParam<RecipeCase> {};

TEST_P(GpuFp8Recipe, MatchesCpuRecipe) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  ATTNLAB_TEST_RNG(rng);
  const RecipeCase& rc = GetParam();
  DelayedScalingRecipe r;
  r.amax_history_len = rc.len;
  r.amax_compute_algo = rc.algo;
  r.margin = rc.margin;
  r.format = rc.format;
  for (bool non_blocking : {false, true}) {
    SCOPED_TRACE(non_blocking ? "non-blocking stream" : "legacy default stream");
    TestStream stream(non_blocking);
    attnlab::Context gpu_ctx, cpu_ctx;
    gpu_ctx.set_stream(stream.get());
    DelayedScaling gpu(gpu_ctx, r, Device::cuda);
    DelayedScaling cpu(cpu_ctx, r, Device::cpu);
    ASSERT_TRUE(same_state(gpu, gpu_ctx, cpu, cpu_ctx)) << "initial state";
    for (int n = 0; n < 12; ++n) {
      run_pass(Fp8Pass::forward, gpu, gpu_ctx, cpu, cpu_ctx, stream, rng);
      run_pass(Fp8Pass::backward, gpu, gpu_ctx, cpu, cpu_ctx, stream, rng);
      ASSERT_TRUE(same_state(gpu, gpu_ctx, cpu, cpu_ctx)) << "after step " << n;
    }
  }
#endif
}

// Lengths below, at and above one block of the update kernel (256 threads) and TransformerEngine's default.
INSTANTIATE_TEST_SUITE_P(
    Recipes, GpuFp8Recipe,
    ::testing::Values(RecipeCase{1, AmaxAlgorithm::max, 0, Fp8RecipeFormat::hybrid},
                      RecipeCase{5, AmaxAlgorithm::max, 0, Fp8RecipeFormat::hybrid},
                      RecipeCase{5, AmaxAlgorithm::most_recent, 2, Fp8RecipeFormat::hybrid},
                      RecipeCase{16, AmaxAlgorithm::max, 1, Fp8RecipeFormat::e4m3},
                      RecipeCase{257, AmaxAlgorithm::max, 0, Fp8RecipeFormat::hybrid},
                      RecipeCase{700, AmaxAlgorithm::most_recent, 0, Fp8RecipeFormat::e4m3},
                      RecipeCase{1024, AmaxAlgorithm::max, 0, Fp8RecipeFormat::hybrid}),
    [](const auto& info) {
      const RecipeCase& c = info.param;
      std::string name = "L";
      name += std::to_string(c.len);
      name += c.algo == AmaxAlgorithm::max ? "_max" : "_most_recent";
      name += "_margin";
      name += std::to_string(c.margin);
      name += c.format == Fp8RecipeFormat::hybrid ? "_hybrid" : "_e4m3";
      return name;
    });

// quantize and update in a CUDA graph, replayed: no allocation, no host wait, nothing outside the stream.
TEST(GpuFp8RecipeGraph, StepCapturedAndReplayed) {
  ATTNLAB_REQUIRE_GPU();
#if ATTNLAB_WITH_CUDA
  TestStream stream(true);
  attnlab::Context gpu_ctx, cpu_ctx;
  gpu_ctx.set_stream(stream.get());
  DelayedScalingRecipe r;
  r.amax_history_len = 4;
  DelayedScaling gpu(gpu_ctx, r, Device::cuda);
  DelayedScaling cpu(cpu_ctx, r, Device::cpu);
  HostTensor x(DType::f32, {9, 31});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, double(i % 13) - 6.0);
  HostTensor xq(DType::e4m3, {9, 31});
  Mirror m;
  const TensorView d_x = m.upload(x), d_q = m.upload(xq);
  stream.sync();
  const attnlab::Fp8TensorScaling g = gpu.tensor(Fp8Tensor::q);
  cudaGraph_t graph = nullptr;
  cuda_ok(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  attnlab::quantize(gpu_ctx, d_x, d_q, g.scale, g.amax);
  gpu.update(gpu_ctx, Fp8Pass::forward);
  cuda_ok(cudaStreamEndCapture(stream.get(), &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int n = 0; n < 3; ++n) {
    cuda_ok(cudaGraphLaunch(exec, stream.get()), "cudaGraphLaunch");
    *cpu.tensor(Fp8Tensor::q).amax = 6.0f;
    cpu.update(cpu_ctx, Fp8Pass::forward);
  }
  stream.sync();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_TRUE(same_state(gpu, gpu_ctx, cpu, cpu_ctx));
  EXPECT_EQ(gpu.read(gpu_ctx, Fp8Tensor::q).scale, 448.0f / 6.0f);
#endif
}

TEST(GpuFp8RecipeErrors, BadDeviceIndex) {
  ATTNLAB_REQUIRE_GPU();
  attnlab::Context ctx;
  try {
    DelayedScaling recipe(ctx, {}, Device::cuda, 4096);
    ADD_FAILURE() << "device index 4096 accepted";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(e.code(), attnlab::ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA device index 4096"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnlab_test
