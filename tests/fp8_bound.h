// The error bound of FP8 attention's forward against the fp64 reference on the same decoded inputs, derived in
// test_fp8_reference.cpp's opening comment: per element of O,
//   |o_fp8 − o_f64| ≤ (2^-4 + 2^-20) · Σ_j p_j |v_j|  +  2^-10 / scale_s · Σ_j |v_j|
// (sums over the row's visible keys), plus, for an e4m3 O, its own rounding max(2^-4 · |o|, 2^-10 / scale_o).
// The CPU reference (reference_fp8.h) and every GPU FP8 path are held to it.
#pragma once

#include <vector>

#include "reference_fp8.h"

namespace attnlab_test::fp8ref {

// One bound per element of O (dense (B, T, N, Hv)), without O's own rounding.
std::vector<double> o_bound(const Problem& p);

// O's own rounding when it is stored as e4m3 with scale_o, after dividing by scale_o.
double o_rounding_bound(double o, double scale_o);

}  // namespace attnlab_test::fp8ref
