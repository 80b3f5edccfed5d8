// The GPU paths (cuda-naive, cudnn, flash) against the fp64 CPU reference, through the same harness as the CPU paths:
// odd shapes, every mask, GQA/MQA, each dtype a path supports, backward, poisoned outputs, NaN checks; plus the
// forced-unsupported errors, the graph cache under changing shapes, two host threads at once, and the naive
// path's out-of-memory error; the odd shapes again on a non-blocking stream with host sequence lengths. Every test
// skips visibly when no GPU can be used.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <tuple>

#include "attnlab/version.h"
#include "device_mirror.h"
#include "harness.h"

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace attnlab_test {
namespace {

struct Shape {
  std::int64_t T, S;
};
struct Heads {
  std::int64_t Hqk, Hv;
};

// The GPU paths under test and the dtypes each runs (the refusals are tested as errors below).
const char* const kGpuPaths[] = {"cuda-naive", "cudnn", "flash"};
bool path_supports(const std::string& path, DType dtype) { return !(path == "cudnn" && dtype == DType::f32); }
bool path_has_backward(const std::string& path) { return path != "flash"; }
// cudnn and flash move rows with 16-byte accesses: their layouts keep strides multiples of 8 elements.
bool path_needs_aligned_rows(const std::string& path) { return path == "cudnn" || path == "flash"; }

std::string sanitize(std::string name) {
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

Case gpu_case(const std::string& path, DType dtype) {
  Case c;
  c.device = Device::cuda;
  c.path = path;
  c.dtype = dtype;
  return c;
}

// ---------------------------------------------------------------------------------------------------------------
// The odd-shape grid, without a mask and with causal masks of both alignments.
// ---------------------------------------------------------------------------------------------------------------
using GridParam = std::tuple<std::string, DType, Shape, Heads>;
class GpuForwardGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(GpuForwardGrid, MatchesReference) {
  ATTNLAB_REQUIRE_GPU();
  const auto& [path, dtype, shape, heads] = GetParam();
  ATTNLAB_TEST_RNG(rng);
  Case c = gpu_case(path, dtype);
  c.T = shape.T;
  c.S = shape.S;
  c.Hqk = heads.Hqk;
  c.Hv = heads.Hv;
  const bool big = shape.T * shape.S > 2'000'000;
  const bool mid = shape.T * shape.S > 100'000;
  c.B = mid ? 1 : 2;
  c.N = big ? 1 : (mid ? 2 : 4);
  c.K = big ? 1 : (mid ? 1 : 2);
  check_forward(c, rng);
  c.mask.causal = true;
  c.mask.align = attnlab::MaskAlign::bottom_right;
  check_forward(c, rng);
  if (!big) {
    c.mask.align = attnlab::MaskAlign::top_left;
    check_forward(c, rng);
  }
}

std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  const auto& [path, dtype, shape, heads] = info.param;
  return sanitize(path + "_" + dtype_name(dtype) + "_" + std::to_string(shape.T) + "x" + std::to_string(shape.S) +
                  "_h" + std::to_string(heads.Hqk) + "x" + std::to_string(heads.Hv));
}

// Every (path, dtype) pair a path supports, times the given shapes and head dims; the pairs a path refuses are
// tested as errors below, so nothing here is skipped on a GPU.
std::vector<GridParam> grid(const std::vector<DType>& dtypes, const std::vector<Shape>& shapes,
                            const std::vector<Heads>& heads) {
  std::vector<GridParam> out;
  for (const std::string path : kGpuPaths)
    for (DType dtype : dtypes)
      if (path_supports(path, dtype))
        for (const Shape& shape : shapes)
          for (const Heads& h : heads) out.emplace_back(path, dtype, shape, h);
  return out;
}

INSTANTIATE_TEST_SUITE_P(OddShapes, GpuForwardGrid,
                         ::testing::ValuesIn(grid({DType::f32, DType::f16, DType::bf16},
                                                  {Shape{1, 1}, Shape{1, 7}, Shape{7, 1}, Shape{113, 203},
                                                   Shape{203, 113}, Shape{1023, 1024}},
                                                  {Heads{64, 64}, Heads{128, 128}})),
                         grid_name);

// 4224 × 4224: long enough for many tiles in every direction; one head keeps the fp64 reference quick.
INSTANTIATE_TEST_SUITE_P(LongSequence, GpuForwardGrid,
                         ::testing::ValuesIn(grid({DType::bf16}, {Shape{4224, 4224}}, {Heads{64, 64}})), grid_name);

// The same grid on a stream made with cudaStreamNonBlocking, which does not wait for the legacy default stream:
// a path that launches anything on the legacy stream (or on none) instead of the context's runs unordered with
// its own work there. Host sequence lengths go with device tensors, on some batches and not others, so the lengths
// must reach the kernels through the call itself.
class GpuForwardGridNonBlocking : public GpuForwardGrid {
 protected:
  // One stream for the whole binary, created on first use and never destroyed: destroying it at exit could run
  // after the CUDA runtime has gone.
  static void* stream() {
#if ATTNLAB_WITH_CUDA
    static cudaStream_t s = [] {
      cudaStream_t created = nullptr;
      const cudaError_t status = cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking);
      if (status != cudaSuccess) ADD_FAILURE() << "cudaStreamCreateWithFlags: " << cudaGetErrorString(status);
      return created;
    }();
    return s;
#else
    return nullptr;
#endif
  }
};

TEST_P(GpuForwardGridNonBlocking, HostSeqlensMatchReference) {
  ATTNLAB_REQUIRE_GPU();
  const auto& [path, dtype, shape, heads] = GetParam();
  ATTNLAB_TEST_RNG(rng);
  Case c = gpu_case(path, dtype);
  c.T = shape.T, c.S = shape.S, c.Hqk = heads.Hqk, c.Hv = heads.Hv;
  const bool mid = shape.T * shape.S > 100'000;
  c.B = mid ? 2 : 3, c.N = mid ? 1 : 4, c.K = mid ? 1 : 2;  // the grid's reference cost at the large shape
  c.stream = stream();
  ASSERT_NE(c.stream, nullptr);
  c.seqlens_on_device = false;
  check_forward(c, rng);  // no lengths: the stream alone
  // Key lengths only: one batch full, one cut to a random length, and (B = 3) one with a single key.
  c.kv_lens = {std::int32_t(c.S), std::int32_t(rng.integer(1, c.S))};
  if (c.B == 3) c.kv_lens.push_back(1);
  check_forward(c, rng);
  // Both, under a bottom-right causal mask: a batch with no queries, one with a random count.
  c.q_lens = {std::int32_t(rng.integer(1, c.T)), 0};
  if (c.B == 3) c.q_lens.push_back(std::int32_t(c.T));
  c.mask.causal = true;
  c.mask.align = attnlab::MaskAlign::bottom_right;
  check_forward(c, rng);
}

INSTANTIATE_TEST_SUITE_P(OddShapesNonBlockingStream, GpuForwardGridNonBlocking,
                         ::testing::ValuesIn(grid({DType::f32, DType::bf16},
                                                  {Shape{1, 1}, Shape{1, 7}, Shape{113, 203}, Shape{203, 113},
                                                   Shape{1023, 1024}},
                                                  {Heads{64, 64}, Heads{128, 128}})),
                         grid_name);

// Head dims other than 64/128 (cuda-naive takes any; cudnn the multiples of 8 up to 256).
INSTANTIATE_TEST_SUITE_P(OtherHeadDims, GpuForwardGrid,
                         ::testing::ValuesIn(grid({DType::bf16}, {Shape{113, 203}},
                                                  {Heads{32, 32}, Heads{96, 96}, Heads{256, 256}, Heads{192, 128}})),
                         grid_name);

// ---------------------------------------------------------------------------------------------------------------
// Every feature, on each path and dtype it supports.
// ---------------------------------------------------------------------------------------------------------------
using PathDtype = std::tuple<std::string, DType>;
class GpuFeatures : public ::testing::TestWithParam<PathDtype> {
 protected:
  void SetUp() override { ATTNLAB_REQUIRE_GPU(); }
  bool is_cudnn() const { return std::get<0>(GetParam()) == "cudnn"; }
  bool aligned_rows() const { return path_needs_aligned_rows(std::get<0>(GetParam())); }
  Case base() const {
    Case c = gpu_case(std::get<0>(GetParam()), std::get<1>(GetParam()));
    c.B = 2, c.T = 77, c.S = 131, c.N = 4, c.K = 4, c.Hqk = 64, c.Hv = 64;
    return c;
  }
};

TEST_P(GpuFeatures, GqaAndMqa) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.N = 8, c.K = 2;
  check_forward(c, rng);
  c.K = 1;
  check_forward(c, rng);
  c.mask.causal = true;
  check_forward(c, rng);
}

TEST_P(GpuFeatures, SlidingWindow) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  for (auto align : {attnlab::MaskAlign::top_left, attnlab::MaskAlign::bottom_right}) {
    c.mask = {};
    c.mask.align = align;
    c.mask.window_left = 16, c.mask.window_right = 8;
    check_forward(c, rng);
    c.mask.causal = true, c.mask.window_right = -1, c.mask.window_left = 32;
    check_forward(c, rng);
  }
}

TEST_P(GpuFeatures, SequenceLengths) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.B = 3;
  c.q_lens = {77, 40, 1};
  c.kv_lens = {131, 17, 64};
  check_forward(c, rng);
  c.mask.causal = true;
  c.mask.align = attnlab::MaskAlign::bottom_right;
  check_forward(c, rng);
  c.seqlens_on_device = false;  // host lengths: the path copies them
  check_forward(c, rng);
}

TEST_P(GpuFeatures, Bias) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  c.S = 136;  // cuDNN needs bias rows 16-byte aligned; cuda-naive takes any S (GpuNaiveOnly)
  if (!is_cudnn() || c.dtype == DType::f32) {
    c.bias = BiasKind::f32;
    check_forward(c, rng);
  }
  c.bias = BiasKind::same_dtype;
  check_forward(c, rng);
  c.bias_per_batch = false;
  check_forward(c, rng);
  c.bias_per_head = false;
  c.mask.causal = true;
  check_forward(c, rng);
}

// Padded and permuted layouts whose strides stay multiples of 8 elements (16 bytes), as cuDNN requires.
Layout aligned(std::array<int, 4> order) {
  Layout l;
  l.order = order;
  l.pad = {1, 3, 2, 8};
  return l;
}

TEST_P(GpuFeatures, StridedLayoutsAndNoLse) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  const bool odd = !aligned_rows();
  c.q_layout = odd ? permuted12() : aligned({0, 2, 1, 3});
  c.k_layout = odd ? padded() : aligned({0, 1, 2, 3});
  c.v_layout = odd ? permuted12() : aligned({0, 2, 1, 3});
  c.o_layout = odd ? padded() : aligned({0, 1, 2, 3});
  c.lse_layout = permuted01();
  check_forward(c, rng);
  c.with_lse = false;
  check_forward(c, rng);
}

class GpuBackward : public GpuFeatures {};

TEST_P(GpuBackward, Backward) {
  ATTNLAB_TEST_RNG(rng);
  Case c = base();
  check_backward(c, rng);
  c.mask.causal = true;
  check_backward(c, rng);
  c.mask.align = attnlab::MaskAlign::bottom_right;
  c.N = 8, c.K = 2;
  check_backward(c, rng);
  c = base();
  c.mask.window_left = 20, c.mask.window_right = 5;
  check_backward(c, rng);
  c = base();
  c.B = 2, c.q_lens = {77, 30}, c.kv_lens = {100, 131};
  check_backward(c, rng);
  c = base();
  c.bias = is_cudnn() ? BiasKind::same_dtype : BiasKind::f32;
  c.S = 136;
  check_backward(c, rng);
  c = base();
  c.T = 1, c.S = is_cudnn() ? 9 : 1;  // cuDNN refuses a T = S = 1 backward (tested below)
  check_backward(c, rng);
}

std::vector<PathDtype> supported_pairs(bool backward) {
  std::vector<PathDtype> out;
  for (const std::string path : kGpuPaths)
    for (DType dtype : {DType::f32, DType::f16, DType::bf16})
      if (path_supports(path, dtype) && (!backward || path_has_backward(path))) out.emplace_back(path, dtype);
  return out;
}

std::string pair_name(const ::testing::TestParamInfo<PathDtype>& info) {
  return sanitize(std::get<0>(info.param) + "_" + dtype_name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(GpuPaths, GpuFeatures, ::testing::ValuesIn(supported_pairs(false)), pair_name);
INSTANTIATE_TEST_SUITE_P(GpuPaths, GpuBackward, ::testing::ValuesIn(supported_pairs(true)), pair_name);

// cuda-naive alone: the features cudnn refuses, and Hv ≠ Hqk at odd sizes.
class GpuNaiveOnly : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { ATTNLAB_REQUIRE_GPU(); }
};

TEST_P(GpuNaiveOnly, SoftcapBiasBoolMaskOddSizes) {
  ATTNLAB_TEST_RNG(rng);
  Case c = gpu_case("cuda-naive", GetParam());
  c.B = 2, c.T = 45, c.S = 97, c.N = 4, c.K = 2, c.Hqk = 40, c.Hv = 72;
  c.softcap = 5.0f;
  check_forward(c, rng);
  check_backward(c, rng);
  c.softcap = 0.0f;
  c.bias = BiasKind::f32;  // odd S: bias rows of any stride
  check_forward(c, rng);
  check_backward(c, rng);
  c.bias = BiasKind::bool_mask;
  c.hidden_rows = 3;
  check_forward(c, rng);
  check_backward(c, rng);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuNaiveOnly, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); });

// ---------------------------------------------------------------------------------------------------------------
// Errors: forced means forced, and nothing is written when a call fails.
// ---------------------------------------------------------------------------------------------------------------

// A small case for the error tests: the rule, not the size, is under test.
Case tiny_case(const std::string& path, DType dtype) {
  Case c = gpu_case(path, dtype);
  c.B = 1, c.T = 16, c.S = 16, c.N = 2, c.K = 2;
  return c;
}

TEST(GpuErrors, CudnnRefusesF32WithTheRule) {
  ATTNLAB_REQUIRE_GPU();
  Case c = tiny_case("cudnn", DType::f32);
  expect_forward_refused_on_device(c, "f32");
}

TEST(GpuErrors, CudnnRefusesBoolMask) {
  ATTNLAB_REQUIRE_GPU();
  Case c = tiny_case("cudnn", DType::bf16);
  c.bias = BiasKind::bool_mask;
  expect_forward_refused_on_device(c, "mask");
}

TEST(GpuErrors, CudnnRefusesF32BiasWithHalfInputs) {
  ATTNLAB_REQUIRE_GPU();
  Case c = tiny_case("cudnn", DType::bf16);
  c.bias = BiasKind::f32;
  expect_forward_refused_on_device(c, "bias must have the inputs' dtype");
}

TEST(GpuErrors, CudnnRefusesStridesNotMultipleOf8) {
  ATTNLAB_REQUIRE_GPU();
  Case c = tiny_case("cudnn", DType::bf16);
  c.q_layout = padded();
  expect_forward_refused_on_device(c, "multiple of 8");
  c.q_layout = dense();
  c.S = 131;
  c.bias = BiasKind::same_dtype;
  expect_forward_refused_on_device(c, "multiple of 8");
}

TEST(GpuErrors, CpuPathRefusesDeviceTensors) {
  ATTNLAB_REQUIRE_GPU();
  Case c = tiny_case("cpu-flash", DType::bf16);
  expect_forward_refused_on_device(c, "cpu");
}

TEST(GpuErrors, NaiveWorkspaceTooLargeIsAnError) {
  ATTNLAB_REQUIRE_GPU();
  // (B, N, T, S) = (1, 16, 2^18, 2^18) scores need 4 TiB: a clear out-of-memory error, O untouched.
  Case c = gpu_case("cuda-naive", DType::bf16);
  c.B = 1, c.T = 1 << 18, c.S = 1 << 18, c.N = 16, c.K = 1, c.Hqk = 8, c.Hv = 8;
  c.with_lse = false;
  Rng rng(fresh_seed());
  Tensors t = make_inputs(c, rng);
  DeviceMirror mirror;
  attnlab::ForwardArgs a = device_forward_args(c, t, mirror);
  attnlab::Context ctx;
  try {
    attnlab::forward(ctx, a);
    ADD_FAILURE() << "expected out_of_memory";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(e.code(), attnlab::ErrorCode::out_of_memory) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda-naive"), std::string::npos) << e.what();
  }
  const auto before = t.o.snapshot();
  mirror.download(t.o);
  EXPECT_TRUE(t.o.same_bytes(before)) << "a failed call wrote to O";
  // The context (and the device) stay usable afterwards.
  Case small = gpu_case("cuda-naive", DType::bf16);
  small.B = 1, small.T = 33, small.S = 65, small.N = 2, small.K = 1;
  check_forward(small, rng);
}

// auto: flash for small half-precision forward calls (lowest per-call cost), cudnn for large ones and for
// backward, flash for f32 forward (fused 3xTF32 beats the naive chain). RunInfo names the member of family flash
// that ran (f32 runs on flash-sm80 only).
TEST(GpuAuto, PicksByDtypeAndSize) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  Case c = gpu_case("auto", DType::bf16);
  c.B = 1, c.T = 64, c.S = 64, c.N = 2, c.K = 2;
  c.expect_path = "flash";
  check_forward(c, rng);
  c.expect_path = "cudnn";  // flash has no backward: the backward call goes to cudnn
  check_backward(c, rng);
  c.dtype = DType::f32;
  c.expect_path = "flash-sm80";
  check_forward(c, rng);
  c.dtype = DType::f16;
  c.T = 2048, c.S = 2048, c.N = 2, c.K = 1;  // 4·N·T·S·H = 2.1 GFLOP > 2^30
  c.expect_path = "cudnn";
  check_forward(c, rng);
}

// ---------------------------------------------------------------------------------------------------------------
// The cudnn graph cache under many shapes (more than the cache holds), and two host threads at once.
// ---------------------------------------------------------------------------------------------------------------
TEST(GpuCudnn, ManyShapesThroughTheGraphCache) {
  ATTNLAB_REQUIRE_GPU();
  ATTNLAB_TEST_RNG(rng);
  attnlab::Context shared;  // one context for all calls: the cache must key on every shape and option
  for (int i = 0; i < 80; ++i) {
    Case c = gpu_case("cudnn", i % 2 ? DType::bf16 : DType::f16);
    c.B = rng.integer(1, 3), c.T = rng.integer(1, 300), c.S = rng.integer(1, 300);
    c.N = 4, c.K = rng.chance(0.5) ? 4 : 1;
    c.mask.causal = rng.chance(0.5);
    c.mask.align = rng.chance(0.5) ? attnlab::MaskAlign::top_left : attnlab::MaskAlign::bottom_right;
    c.context = &shared;
    check_forward(c, rng);
  }
}

TEST(GpuThreads, TwoHostThreadsAtOnce) {
  ATTNLAB_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  auto worker = [seed](int id) {
    Rng rng(seed + std::uint64_t(id));
    for (int i = 0; i < 12; ++i) {
      Case c = gpu_case(i % 2 ? "cudnn" : "cuda-naive", DType::bf16);
      c.B = 2, c.T = 50 + 13 * i, c.S = 70 + 7 * i, c.N = 4, c.K = 2;
      c.mask.causal = (i + id) % 2 == 0;
      check_forward(c, rng);
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
}

}  // namespace
}  // namespace attnlab_test
