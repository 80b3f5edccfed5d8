// The flash path's choice of tile configuration (src/cuda/flash/config_choice.h over tile_configs.h's lists) for
// the shared memory of each GPU family attnlab targets. Plain C++: it runs without a GPU, so the choice on GPUs
// that the test machines do not have (A100, L4) is checked too. A 2-byte stand-in plays bf16/f16: the lists
// depend on the element's size only.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/flash/config_choice.h"
#include "cuda/flash/tile_configs.h"

namespace {

using attnlab::cuda::flash::choose_config;
using attnlab::cuda::flash::SmemBudget;
using attnlab::cuda::flash::TileConfigs;
using Half = std::uint16_t;

constexpr std::size_t KB = 1024;
// Opt-in shared memory per block and per SM (CUDA programming guide, compute capabilities).
constexpr SmemBudget kHopper{227 * KB, 228 * KB};  // sm_90: H100, H200
constexpr SmemBudget kA100{163 * KB, 164 * KB};    // sm_80
constexpr SmemBudget kAda{99 * KB, 100 * KB};      // sm_86, sm_89: L4, RTX 30xx/40xx

template <class E, int kHqk, int kHv>
int plain(const SmemBudget& b, int pick = -1) {
  return choose_config(typename TileConfigs<E, kHqk, kHv>::List{}, b, pick);
}
template <class E, int kHqk, int kHv>
int modified(const SmemBudget& b) {
  return choose_config(typename TileConfigs<E, kHqk, kHv>::ModifierList{}, b, -1);
}

// FA2's shape (96 KB, tuned for two blocks per SM) leads at Hqk 128 where two fit an SM; elsewhere the 8-warp
// configurations after it, the largest that fits.
TEST(FlashConfigs, Hqk128TakesTwoBlocksPerSmOnlyWhereTheyFit) {
  EXPECT_EQ((plain<Half, 128, 128>(kHopper)), 0);
  EXPECT_EQ((plain<Half, 128, 128>(kA100)), 2);
  EXPECT_EQ((plain<Half, 128, 128>(kAda)), 3);
  using First = attnlab::cuda::flash::KernelTraits<Half, 128, 128, 128, 64, 4, 2, false, 2>;
  static_assert(First::kSmemBytes == 96 * KB && First::kBlocksPerSm == 2);
}

// A forced configuration (ATTNLAB_FLASH_CONFIG) needs only to fit one block: tests run FA2's shape on any GPU.
TEST(FlashConfigs, AForcedConfigurationNeedsOnlyToFitABlock) {
  EXPECT_EQ((plain<Half, 128, 128>(kAda, 0)), 0);
  EXPECT_EQ((plain<Half, 128, 128>(kAda, 1)), -1);   // 224 KB
  EXPECT_EQ((plain<Half, 128, 128>(kHopper, 1)), 1);
  EXPECT_EQ((plain<Half, 128, 128>(kHopper, 4)), -1);  // past the list's end
}

// Every head-dim pair has a configuration on every sm_80+ GPU, with and without score modifiers.
template <class E, int kHqk, int kHv>
void expect_one_everywhere() {
  SCOPED_TRACE(::testing::Message() << "element bytes " << sizeof(E) << ", head dims " << kHqk << "/" << kHv);
  for (const SmemBudget& b : {kHopper, kA100, kAda}) {
    EXPECT_GE((plain<E, kHqk, kHv>(b)), 0) << "per block " << b.per_block;
    EXPECT_GE((modified<E, kHqk, kHv>(b)), 0) << "per block " << b.per_block;
  }
}
// The head-dim pairs of src/CMakeLists.txt's instances; f32 has no 256 (its accumulators spill).
template <class E>
void expect_every_pair_everywhere() {
  expect_one_everywhere<E, 32, 32>();
  expect_one_everywhere<E, 64, 64>();
  expect_one_everywhere<E, 96, 96>();
  expect_one_everywhere<E, 128, 128>();
  expect_one_everywhere<E, 192, 192>();
  expect_one_everywhere<E, 192, 128>();
  if constexpr (sizeof(E) == 2) expect_one_everywhere<E, 256, 256>();
}
TEST(FlashConfigs, EveryHeadDimRunsOnEverySm80PlusGpu) {
  expect_every_pair_everywhere<Half>();
  expect_every_pair_everywhere<float>();
}

// Nothing fits: −1, which the path turns into a refusal naming the shared memory.
TEST(FlashConfigs, NoConfigurationBelowTheSmallestTile) {
  const SmemBudget tiny{32 * KB, 33 * KB};
  EXPECT_EQ((plain<Half, 256, 256>(tiny)), -1);
  EXPECT_EQ(choose_config(attnlab::cuda::flash::TypeList<>{}, kHopper, -1), -1);
}

}  // namespace
