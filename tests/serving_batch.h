// A packed variable-length batch for the serving tests: packed queries, keys packed or in a paged cache (pages
// dealt out of order, one page shared by two sequences, a spare block-table column), optional attention sinks;
// its padded fp64 reference with sinks folded in, and the check of a call's packed outputs against it by
// docs/design.md §2's criterion (rows outside every sequence must still hold their poison).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "attnlab/serving.h"
#include "reference.h"
#include "test_support.h"

namespace attnlab_test {

std::vector<std::int32_t> offsets(const std::vector<std::int64_t>& lens);

struct Batch {
  std::int64_t N = 4, K = 2, Hqk = 40, Hv = 24;
  DType dtype = DType::f32;
  std::vector<std::int64_t> q_lens, kv_lens;
  std::int64_t page_size = 0;   // 0: packed keys
  std::int64_t spare_rows = 3;  // rows of q and o past the last sequence: never read, never written
  bool with_sinks = false;      // one random logit per query head (make() fills `sinks`)

  HostTensor q, k, v, o, lse, cu_q, cu_k, k_cache, v_cache, block_table, seqlens, sinks;
  std::vector<std::vector<std::int64_t>> pages;  // per sequence, its pages in order

  std::int64_t B() const { return std::int64_t(q_lens.size()); }
  static std::int64_t max(const std::vector<std::int64_t>& v);

  void make(Rng& rng);
  // Key j of sequence b, element (head kh, dim h), from wherever the batch keeps it.
  double key(const HostTensor& packed, const HostTensor& cache, std::int64_t H, std::int64_t b, std::int64_t j,
             std::int64_t kh, std::int64_t h) const;
  attnlab::VarlenForwardArgs args(const attnlab::Options& options) const;
  // The reference of every sequence, as one padded fp64 problem with per-batch lengths.
  ref::Problem reference(const attnlab::Options& options) const;
  // A reference result (O, LSE) in the packed order of o and lse, sinks applied (rows outside every sequence: NaN).
  std::pair<std::vector<double>, std::vector<double>> packed(const ref::Problem& p, const ref::Forward& f) const;
};

// o and lse (read back to the host) against the batch's reference.
void check_outputs(const Batch& batch, const attnlab::Options& options);

}  // namespace attnlab_test
