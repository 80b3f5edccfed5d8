#include "ring/ring_plan.h"

#include <stdexcept>

namespace attnlab {

namespace ring {

int source_rank(int ranks, int rank, int step) { return ((rank - step) % ranks + ranks) % ranks; }

std::vector<BlockCall> plan_step(RingLayout layout, bool causal, int ranks, int rank, int src, std::int64_t rows) {
  if (rank < 0 || rank >= ranks || src < 0 || src >= ranks) throw std::out_of_range("ring::plan_step: rank");
  const BlockCall whole{0, rows, 0, rows, false};
  if (!causal) return {whole};
  if (src == rank) return {BlockCall{0, rows, 0, rows, true}};
  if (layout == RingLayout::contiguous) {
    if (src < rank) return {whole};
    return {};
  }
  const std::int64_t chunk = rows / 2;
  if (src < rank) return {BlockCall{0, rows, 0, chunk, false}};  // both query chunks after src's first chunk
  return {BlockCall{chunk, chunk, 0, rows, false}};              // the second query chunk after both of src's
}

}  // namespace ring
}  // namespace attnlab
