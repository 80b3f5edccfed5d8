// The public helpers of the ring layouts (include/attnlab/ring.h): names and the rows each rank holds.
#include "attnlab/ring.h"

namespace attnlab {

std::string_view to_string(RingLayout layout) {
  return layout == RingLayout::zigzag ? "zigzag" : "contiguous";
}

std::vector<std::array<std::int64_t, 2>> ring_rows(RingLayout layout, int ranks, int rank, std::int64_t T) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw Error(ErrorCode::invalid_argument, "ring_rows: rank must be in [0, ranks)");
  if (layout == RingLayout::contiguous) {
    if (T % ranks != 0) throw Error(ErrorCode::invalid_argument, "ring_rows: T must be divisible by the ranks");
    const std::int64_t rows = T / ranks;
    return {{rank * rows, (rank + 1) * rows}};
  }
  if (T % (2 * ranks) != 0)
    throw Error(ErrorCode::invalid_argument, "ring_rows: zigzag needs T divisible by 2 · ranks");
  const std::int64_t chunk = T / (2 * ranks);
  const std::int64_t second = 2 * ranks - 1 - rank;
  return {{rank * chunk, (rank + 1) * chunk}, {second * chunk, (second + 1) * chunk}};
}

}  // namespace attnlab
