// Forward accuracy of every CPU path and dtype over the odd-shape grid of docs/design.md §2: T×S ∈ {1×1, 1×7, 7×1,
// 113×203, 203×113, 1023×1024} and head dims Hqk/Hv ∈ {64/64, 40/72, 128/128}, each without a mask and with causal
// masks of both alignments, against the fp64 reference by the criterion
// max|out − ref64| ≤ 2·max|ref_dtype − ref64| + 1e-5.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "harness.h"

namespace attnlab_test {
namespace {

struct Shape {
  std::int64_t T, S;
};
struct Heads {
  std::int64_t Hqk, Hv;
};

using GridParam = std::tuple<std::string, DType, Shape, Heads>;

class ForwardGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(ForwardGrid, MatchesReference) {
  const auto& [path, dtype, shape, heads] = GetParam();
  ATTNLAB_TEST_RNG(rng);
  Case c;
  c.path = path;
  c.dtype = dtype;
  c.T = shape.T;
  c.S = shape.S;
  c.Hqk = heads.Hqk;
  c.Hv = heads.Hv;
  const bool big = shape.T * shape.S > 100000;
  // Small B·N for the big shapes keeps the fp64 reference quick; the small ones get batches and GQA.
  c.B = big ? 1 : 2;
  c.N = big ? 1 : 4;
  c.K = big ? 1 : 2;
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
  std::string name = path + "_" + dtype_name(dtype) + "_" + std::to_string(shape.T) + "x" + std::to_string(shape.S) +
                     "_h" + std::to_string(heads.Hqk) + "x" + std::to_string(heads.Hv);
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    OddShapes, ForwardGrid,
    ::testing::Combine(::testing::Values(std::string("cpu-naive"), std::string("cpu-flash")),
                       ::testing::Values(DType::f32, DType::f16, DType::bf16),
                       ::testing::Values(Shape{1, 1}, Shape{1, 7}, Shape{7, 1}, Shape{113, 203}, Shape{203, 113},
                                         Shape{1023, 1024}),
                       ::testing::Values(Heads{64, 64}, Heads{40, 72}, Heads{128, 128})),
    grid_name);

// Bigger magnitudes (peaked softmax, scores of ±25 typical and ±100 at the extremes) must not overflow exp or lose
// the LSE.
class ForwardLargeScores : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(ForwardLargeScores, MatchesReference) {
  const auto& [path, dtype] = GetParam();
  ATTNLAB_TEST_RNG(rng);
  Case c;
  c.path = path;
  c.dtype = dtype;
  c.B = 2, c.T = 37, c.S = 129, c.N = 2, c.K = 1, c.Hqk = 40, c.Hv = 24;
  c.input_scale = 2.0;
  c.scale = 1.0f;
  check_forward(c, rng);
}

std::string path_dtype_name(const ::testing::TestParamInfo<std::tuple<std::string, DType>>& info) {
  std::string name = std::get<0>(info.param) + "_" + dtype_name(std::get<1>(info.param));
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPaths, ForwardLargeScores,
                         ::testing::Combine(::testing::Values(std::string("cpu-naive"), std::string("cpu-flash")),
                                            ::testing::Values(DType::f32, DType::f16, DType::bf16)),
                         path_dtype_name);

}  // namespace
}  // namespace attnlab_test
