// The public API around the calls: dtype names and sizes, TensorView helpers, Context settings, the path
// listing, why_not(), build_info(), and what "auto" picks and reports.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "harness.h"

namespace attnlab_test {
namespace {

using attnlab::DType;

TEST(DTypes, NamesSizesAndParsing) {
  const std::pair<DType, const char*> names[] = {{DType::f32, "f32"},   {DType::f16, "f16"}, {DType::bf16, "bf16"},
                                                 {DType::e4m3, "e4m3"}, {DType::e5m2, "e5m2"}, {DType::i32, "i32"},
                                                 {DType::u8, "u8"}};
  for (auto [dt, name] : names) {
    EXPECT_EQ(attnlab::to_string(dt), name);
    EXPECT_EQ(attnlab::size_of(dt), elem_size(dt)) << name;
  }
  EXPECT_EQ(attnlab::to_string(attnlab::Device::cpu), "cpu");
  EXPECT_EQ(attnlab::to_string(attnlab::Device::cuda), "cuda");
  for (const char* s : {"f32", "fp32", "float32", "F32", "FP32"}) EXPECT_EQ(attnlab::parse_dtype(s), DType::f32) << s;
  for (const char* s : {"f16", "fp16", "float16"}) EXPECT_EQ(attnlab::parse_dtype(s), DType::f16) << s;
  for (const char* s : {"bf16", "bfloat16", "BF16"}) EXPECT_EQ(attnlab::parse_dtype(s), DType::bf16) << s;
  EXPECT_EQ(attnlab::parse_dtype("e4m3"), DType::e4m3);
  EXPECT_EQ(attnlab::parse_dtype("e5m2"), DType::e5m2);
}

TEST(TensorViews, ContiguousAndNumel) {
  float x[2 * 3 * 4 * 5];
  const TensorView t = TensorView::contiguous(x, DType::f32, {2, 3, 4, 5});
  EXPECT_EQ(t.rank, 4);
  EXPECT_EQ(t.data, x);
  EXPECT_EQ(t.device, attnlab::Device::cpu);
  EXPECT_EQ(t.strides[0], 60);
  EXPECT_EQ(t.strides[1], 20);
  EXPECT_EQ(t.strides[2], 5);
  EXPECT_EQ(t.strides[3], 1);
  EXPECT_EQ(t.numel(), 120);
  EXPECT_FALSE(t.empty());
  const TensorView l = TensorView::contiguous(x, DType::f32, {2, 7});
  EXPECT_EQ(l.rank, 2);
  EXPECT_EQ(l.strides[0], 7);
  EXPECT_EQ(l.numel(), 14);
  TensorView none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.numel(), 0);
}

TEST(Contexts, SettingsAndMoves) {
  attnlab::Context ctx;
  EXPECT_EQ(ctx.num_threads(), 0);
  EXPECT_EQ(ctx.stream(), nullptr);
  ctx.set_num_threads(2);
  int dummy = 0;
  ctx.set_stream(&dummy);
  attnlab::Context moved(std::move(ctx));
  EXPECT_EQ(moved.num_threads(), 2);
  EXPECT_EQ(moved.stream(), &dummy);
  attnlab::Context other;
  other = std::move(moved);
  EXPECT_EQ(other.num_threads(), 2);
}

TEST(Contexts, ReusedAcrossChangingShapes) {
  // One context for many calls whose shapes, dtypes, options and directions change every time: whatever a path
  // keeps in the context (workspaces, plans) must follow.
  ATTNLAB_TEST_RNG(rng);
  attnlab::Context shared;
  for (int i = 0; i < 24; ++i) {
    Case c;
    c.context = &shared;
    c.path = i % 3 == 0 ? "cpu-naive" : "cpu-flash";
    c.dtype = float_dtypes()[std::size_t(rng.integer(0, 2))];
    c.B = rng.integer(1, 3), c.T = rng.integer(1, 150), c.S = rng.integer(1, 150);
    c.K = rng.integer(1, 2), c.N = c.K * rng.integer(1, 3);
    c.Hqk = rng.integer(1, 80), c.Hv = rng.integer(1, 80);
    c.mask.causal = rng.chance(0.5);
    c.mask.align = rng.chance(0.5) ? attnlab::MaskAlign::top_left : attnlab::MaskAlign::bottom_right;
    c.threads = int(rng.integer(0, 3));
    if (i % 2)
      check_backward(c, rng);
    else
      check_forward(c, rng);
  }
}

TEST(Paths, ListingHasBothCpuPaths) {
  const auto paths = attnlab::list_paths();
  std::set<std::string> names;
  for (const auto& p : paths) {
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate path " << p.name;
    EXPECT_FALSE(p.summary.empty()) << p.name;
    if (!p.available) {
      EXPECT_FALSE(p.unavailable.empty()) << p.name << " is unavailable without a reason";
    }
    if (p.available) {
      EXPECT_TRUE(p.unavailable.empty()) << p.name;
    }
  }
  for (const char* cpu : {"cpu-naive", "cpu-flash"}) {
    ASSERT_TRUE(names.count(cpu)) << cpu << " missing from list_paths()";
    for (const auto& p : paths)
      if (p.name == cpu) {
        EXPECT_EQ(p.device, attnlab::Device::cpu);
        EXPECT_TRUE(p.available) << cpu << ": " << p.unavailable;
      }
  }
  EXPECT_FALSE(names.count("auto")) << "auto is a choice, not a path";
}

TEST(Paths, BuildInfo) {
  const attnlab::BuildInfo info = attnlab::build_info();
  EXPECT_FALSE(info.version.empty());
  EXPECT_FALSE(info.compiler.empty());
  EXPECT_FALSE(info.cpu_isa.empty());
  if (!info.cuda) {
    for (const auto& p : attnlab::list_paths()) EXPECT_EQ(p.device, attnlab::Device::cpu) << p.name;
  }
}

TEST(Paths, AutoPicksCpuFlashAndReportsIt) {
  ATTNLAB_TEST_RNG(rng);
  Case c;
  c.B = 2, c.T = 17, c.S = 29, c.N = 2, c.K = 1, c.Hqk = 32, c.Hv = 16;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    c.dtype = dt;
    Tensors t = make_inputs(c, rng);
    attnlab::Context ctx;
    const attnlab::RunInfo info = attnlab::forward(ctx, forward_args(c, t));
    EXPECT_EQ(info.path, "cpu-flash") << dtype_name(dt);
    check_forward_outputs(c, t, expected_forward(c, t));
    GradTensors g = make_grads(c, rng);
    const attnlab::RunInfo binfo = attnlab::backward(ctx, backward_args(c, t, g));
    EXPECT_EQ(binfo.path, "cpu-flash") << dtype_name(dt);
  }
}

TEST(Paths, ForcedPathsAreReported) {
  ATTNLAB_TEST_RNG(rng);
  Case c;
  c.T = 5, c.S = 6, c.Hqk = 8, c.Hv = 8;
  for (const std::string& path : cpu_paths()) {
    c.path = path;
    Tensors t = make_inputs(c, rng);
    attnlab::Context ctx;
    EXPECT_EQ(attnlab::forward(ctx, forward_args(c, t)).path, path);
    GradTensors g = make_grads(c, rng);
    EXPECT_EQ(attnlab::backward(ctx, backward_args(c, t, g)).path, path);
  }
}

TEST(Paths, WhyNot) {
  ATTNLAB_TEST_RNG(rng);
  Case c;
  c.T = 5, c.S = 6, c.Hqk = 8, c.Hv = 8;
  Tensors t = make_inputs(c, rng);
  const auto before = t.o.snapshot();
  attnlab::ForwardArgs a = forward_args(c, t);
  for (const char* path : {"auto", "cpu-naive", "cpu-flash"}) {
    const auto why = attnlab::why_not(path, a);
    EXPECT_FALSE(why.has_value()) << path << ": " << why.value_or("");
  }
  EXPECT_TRUE(t.o.same_bytes(before)) << "why_not must not run anything";
  // Unsupported: a reason, not an exception.
  a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = DType::e4m3;
  static float scales[6] = {1, 1, 1, 448, 1.0f / 448, 1};
  attnlab::Fp8ForwardScales fp8;
  fp8.descale_q = &scales[0], fp8.descale_k = &scales[1], fp8.descale_v = &scales[2];
  fp8.scale_s = &scales[3], fp8.descale_s = &scales[4], fp8.scale_o = &scales[5];
  a.fp8 = fp8;
  a.options.bias = {};
  const auto why = attnlab::why_not("cpu-naive", a);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("cpu-naive"), std::string::npos) << *why;
  // Invalid arguments and unknown paths throw.
  a = forward_args(c, t);
  EXPECT_THROW(attnlab::why_not("nope", a), attnlab::Error);
  a.k.shape[3] = 3;
  EXPECT_THROW(attnlab::why_not("auto", a), attnlab::Error);
}

}  // namespace
}  // namespace attnlab_test
