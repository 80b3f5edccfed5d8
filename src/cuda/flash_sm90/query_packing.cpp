// Packed query heads (query_packing.h).
#include "cuda/flash_sm90/query_packing.h"

#include "cuda/flash_sm90/launch.h"  // kBlockM

namespace attnlab::cuda::sm90 {

QueryPacking query_packing(const core::Problem& p, bool packed_sequences, int sms) {
  const std::int64_t group = p.dims.K > 0 ? p.dims.N / p.dims.K : 1;
  if (packed_sequences || group < 2 || group > kBlockM || p.dims.T > 64) return {};
  const QueryPacking packed{int(group), int(kBlockM / group)};
  switch (p.tuning->flash_pack_query_heads) {
    case 0: return {};
    case 1: return packed;
    default: return block_count(p, packed) >= sms ? packed : QueryPacking{};
  }
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
