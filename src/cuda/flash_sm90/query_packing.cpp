// Packed query heads (query_packing.h).
#include "cuda/flash_sm90/query_packing.h"

#include "cuda/flash_sm90/traits.h"  // query_block_rows

namespace attnlab::cuda::sm90 {

QueryPacking query_packing(const core::Problem& p, int version) {
  const int rows = query_block_rows(version);
  const std::int64_t group = p.dims.K > 0 ? p.dims.N / p.dims.K : 1;
  if (group < 2 || group > rows || p.dims.T > 64) return unpacked(rows);
  const QueryPacking packed{int(group), int(rows / group)};
  return p.tuning->flash_pack_query_heads == 0 ? unpacked(rows) : packed;
}

long long block_count(const core::Problem& p, const QueryPacking& q) {
  return (p.dims.T + q.rows - 1) / q.rows * (p.dims.N / q.heads) * p.dims.B;
}

void apply_query_packing(const QueryPacking& q, KernelParams& params) {
  params.pack_heads = q.heads;
  params.pack_rows = q.rows;
  if (q.heads == 1) return;
  params.p.N /= q.heads;
  params.p.group /= q.heads;
  params.p.section_heads = 1;
}

}  // namespace attnlab::cuda::sm90
