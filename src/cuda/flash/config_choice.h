// Which tile configuration of a list (tile_configs.h) a launch takes, in plain C++: launch.cuh launches the index
// this returns, and the CPU tests check it for the shared memory of the GPUs attnlab targets.
#pragma once

#include <cstddef>

namespace attnlab::cuda::flash {

template <class... Ts>
struct TypeList {};

// Shared memory a launch may use: per block (the opt-in maximum) and per SM (what resident blocks share).
struct SmemBudget {
  std::size_t per_block = 0;
  std::size_t per_sm = 0;
};

// The driver reserves this much of an SM's shared memory for each resident block (sm_80 and newer).
inline constexpr std::size_t kSmemReservedPerBlock = 1024;

// The index of the configuration to launch, or −1 when none fits.
//   pick ≥ 0 (a configuration forced by index, for tests and tuning): that one, if its shared memory fits a block.
//   pick < 0: the first whose shared memory fits a block and whose kBlocksPerSm blocks fit an SM together. A
//     configuration tuned for two blocks per SM (FA2's shape at Hqk 128: 96 KB) runs them on the H200's 228 KB, but
//     one alone on an A100 (164 KB) or an sm_86/89 GPU (100 KB), where the list's next configuration does better.
template <class... Ts>
constexpr int choose_config(TypeList<Ts...>, const SmemBudget& budget, int pick) {
  if constexpr (sizeof...(Ts) == 0) {
    return -1;
  } else {
    constexpr int n = int(sizeof...(Ts));
    constexpr std::size_t bytes[] = {std::size_t(Ts::kSmemBytes)...};
    constexpr int blocks_per_sm[] = {Ts::kBlocksPerSm...};
    if (pick >= 0) return pick < n && bytes[pick] <= budget.per_block ? pick : -1;
    for (int i = 0; i < n; ++i)
      if (bytes[i] <= budget.per_block &&
          std::size_t(blocks_per_sm[i]) * (bytes[i] + kSmemReservedPerBlock) <= budget.per_sm)
        return i;
    return -1;
  }
}

}  // namespace attnlab::cuda::flash
