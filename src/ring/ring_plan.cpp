#include "ring/ring_plan.h"

#include <algorithm>
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

std::vector<std::array<std::int64_t, 2>> segments(RingLayout layout, std::int64_t rows) {
  if (layout == RingLayout::contiguous) return {{0, rows}};
  return {{0, rows / 2}, {rows / 2, rows}};
}

std::vector<int> coverage(RingLayout layout, bool causal, int ranks, int rank, std::int64_t rows) {
  const auto segs = segments(layout, rows);
  std::vector<int> count(segs.size(), 0);
  for (int t = 0; t < ranks; ++t)
    for (const BlockCall& c : plan_step(layout, causal, ranks, rank, source_rank(ranks, rank, t), rows))
      for (std::size_t s = 0; s < segs.size(); ++s)
        if (c.q_begin <= segs[s][0] && segs[s][1] <= c.q_begin + c.q_rows) ++count[s];
  return count;
}

std::vector<BlockCall> distinct_calls(RingLayout layout, bool causal, int ranks, int rank, std::int64_t rows) {
  std::vector<BlockCall> out;
  for (int t = 0; t < ranks; ++t)
    for (const BlockCall& c : plan_step(layout, causal, ranks, rank, source_rank(ranks, rank, t), rows)) {
      const auto same = [&](const BlockCall& o) {
        return o.q_begin == c.q_begin && o.q_rows == c.q_rows && o.k_begin == c.k_begin && o.k_rows == c.k_rows &&
               o.causal == c.causal;
      };
      if (std::none_of(out.begin(), out.end(), same)) out.push_back(c);
    }
  return out;
}

}  // namespace ring
}  // namespace attnlab
