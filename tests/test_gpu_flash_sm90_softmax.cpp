// The flash-sm90 softmax where its running row maxima are tested hardest: scores whose maxima rise from key tile to
// key tile, by a little (s26's lazy maxima keep their reference) and by far (s26 computes the tile again), against
// the fp64 CPU reference, at every kernel version built at head dim 128. Skips visibly without a GPU of compute
// capability 9.0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "attnlab/version.h"  // ATTNLAB_WITH_CUDA, before it is tested below

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "cuda/flash_sm90/traits.h"  // key_tile_rows (plain C++)
#include "device_mirror.h"
#include "harness.h"
#include "sm90_test_support.h"

namespace attnlab_test {
namespace {

using DtypeVersion = std::tuple<DType, int>;
class GpuFlashSm90Softmax : public ::testing::TestWithParam<DtypeVersion> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  int version() const { return std::get<1>(GetParam()); }
};

// Row maxima that rise from key tile to key tile: K's rows of tile t scaled by 4 + 4t (a row's maximum rises about
// 5 in log2 units a tile: s26's lazy maxima keep their reference and its probabilities reach 2^5) and by 8 · 2^t (it
// rises by 10, 20, … and past 128: the tile is computed again, where a lazy probability would have passed 2^8 and
// then overflowed). A tile is the version's own (traits.h key_tile_rows: 128 keys, 176 in s4, 160 in s29), so the
// rises fall on the kernel's tile boundaries. Without a mask and causal bottom-right, on the legacy and on a
// non-blocking stream, at head dim 128, every version built there.
TEST_P(GpuFlashSm90Softmax, RisingMaxima) {
  ATTNLAB_REQUIRE_HOPPER();
#if ATTNLAB_WITH_CUDA
  ATTNLAB_TEST_RNG(rng);
  Case c = sm90_case(dtype());
  c.context = &version_context(version());
  c.B = 1, c.T = 130, c.S = 1000, c.N = 2, c.K = 1;
  for (const bool doubling : {false, true}) {
    for (const bool causal : {false, true}) {
      c.mask.causal = causal;
      c.mask.align = attnlab::MaskAlign::bottom_right;
      c.stream = causal ? nonblocking_stream() : nullptr;
      SCOPED_TRACE(std::string(doubling ? "doubling" : "linear") + " " + c.str());
      Tensors t = make_inputs(c, rng);
      for (std::int64_t j = 0; j < c.S; ++j) {
        const double tile = double(j / attnlab::cuda::sm90::key_tile_rows(128, version()));
        const double gain = doubling ? 8.0 * std::exp2(tile) : 4.0 + 4.0 * tile;
        for (std::int64_t d = 0; d < c.Hqk; ++d) t.k.set(j * c.Hqk + d, t.k.get(j * c.Hqk + d) * gain);
      }
      const ExpectedForward expected = expected_forward(c, t);
      DeviceMirror mirror;
      const attnlab::ForwardArgs a = device_forward_args(c, t, mirror);
      mirror.synchronize();
      attnlab::Context& ctx = *c.context;
      ctx.set_stream(c.stream);
      attnlab::forward(ctx, a);
      const cudaError_t done =
          c.stream != nullptr ? cudaStreamSynchronize(static_cast<cudaStream_t>(c.stream)) : cudaSuccess;
      ctx.set_stream(nullptr);  // the context is shared by every test of this version
      ASSERT_EQ(done, cudaSuccess) << cudaGetErrorString(done);
      mirror.synchronize();
      mirror.download(t.o);
      mirror.download(t.lse);
      check_forward_outputs(c, t, expected);
    }
  }
#endif
}

// The versions built at head dim 128 (src/cuda/flash_sm90/versions.h, version_built).
INSTANTIATE_TEST_SUITE_P(Versions, GpuFlashSm90Softmax,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                                            ::testing::Values(1, 2, 3, 4, 5, 15, 26, 29, 30, 31)),
                         [](const ::testing::TestParamInfo<DtypeVersion>& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_s" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace attnlab_test
