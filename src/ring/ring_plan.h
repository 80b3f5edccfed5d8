// What each ring step computes: for rank r holding the K/V block of rank src, the attention calls between its
// query rows and that block's key rows, in local row numbers, with the mask each one needs. Pure arithmetic, no
// tensors: ring_forward and ring_backward walk the same plan.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "attnlab/ring.h"

namespace attnlab::ring {

struct BlockCall {
  std::int64_t q_begin = 0, q_rows = 0;  // query rows of the rank's slice
  std::int64_t k_begin = 0, k_rows = 0;  // key rows of the block it holds
  bool causal = false;                   // top-left causal over the call's own rows (the diagonal block)
};

// The rank holding the K/V block at `step` (0 … ranks − 1): src = rank − step (mod ranks).
int source_rank(int ranks, int rank, int step);

// Calls of one step: empty when no query of `rank` sees a key of `src` (causal, src after rank in the sequence).
// `rows` is the slice length T/R.
//   contiguous: one call, full (src < rank or no mask), causal on the diagonal (src = rank);
//   zigzag:     rank r holds chunks (r, 2R − 1 − r) of 2R; on the diagonal one causal call over both chunks (the
//               local order keeps the global one there), src < r: every query against src's first chunk, src > r:
//               the second query chunk against both of src's chunks — each step the same work, T/R · T/(2R).
std::vector<BlockCall> plan_step(RingLayout layout, bool causal, int ranks, int rank, int src, std::int64_t rows);

// The rank's rows in the pieces no block call splits, as [begin, end): the slice (contiguous), or its two chunks
// (zigzag). Every call's query rows are a union of them.
std::vector<std::array<std::int64_t, 2>> segments(RingLayout layout, std::int64_t rows);
// How many calls of `rank`'s R steps take each segment's rows (every segment is taken at least once: by step 0).
std::vector<int> coverage(RingLayout layout, bool causal, int ranks, int rank, std::int64_t rows);

// Every call of `rank`'s R steps, each shape and place once (what validation must see before any work).
std::vector<BlockCall> distinct_calls(RingLayout layout, bool causal, int ranks, int rank, std::int64_t rows);

}  // namespace attnlab::ring
