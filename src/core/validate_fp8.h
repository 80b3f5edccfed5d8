// The preconditions of FP8 calls (docs/design.md §7): which dtypes go together and which scales a call needs. Part
// of validate(); kept apart so the bf16 rules read without the FP8 ones.
#pragma once

#include "attnlab/attention.h"
#include "core/problem.h"

namespace attnlab::core {

inline bool is_fp8_dtype(DType d) { return d == DType::e4m3 || d == DType::e5m2; }

// Called when q is FP8 or scales were given: o's dtype, the scales' presence; fills p.fp8_forward.
void check_fp8_forward(const ForwardArgs& args, Problem& p);
// Likewise for a backward call: o and d_o FP8, dq / dk / dv FP8 or f16 / bf16 (one dtype for the three).
void check_fp8_backward(const BackwardArgs& args, Problem& p);

}  // namespace attnlab::core
