// cpu-flash: what the drivers (flash_forward.cpp, flash_backward.cpp) and the per-ISA kernels (flash_isa_*.cpp)
// share — tile sizes, the layout of one worker's scratch, the unit of work of each kernel, and the table of kernel
// entry points that flash.cpp chooses from at run time.
//
// This header also includes every standard and core header the kernels use. The kernels are compiled inside a
// `#pragma GCC target` region; a header parsed for the first time inside such a region would compile its inline
// functions for that ISA, and the linker could then hand those (AVX-512) copies to code that runs on any x86-64.
// Including everything here, before the region opens, keeps every shared inline function baseline.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <utility>

#include "attnlab/attention.h"
#include "core/mask.h"
#include "core/context_impl.h"
#include "core/numeric.h"
#include "core/problem.h"
#include "cpu/score_mods.h"

namespace attnlab::cpu::flash {

// Query rows per block (Br) and keys per block (Bc). Both are multiples of the widest vector (16 floats), so every
// scratch row is a whole number of vectors on every ISA. 64 × 64 keeps one block's score tile (16 KiB) in L1.
inline constexpr int kBr = 64;
inline constexpr int kBc = 64;
inline constexpr int kMaxLanes = 16;

inline constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// Rows of query head n of batch b that one forward / backward-dQ task owns: [i0, i1).
struct QueryBlock {
  std::int64_t b = 0, n = 0, i0 = 0, i1 = 0;
};
// Keys of KV head kh of batch b that one backward-dK/dV task owns: [s0, s1).
struct KeyBlock {
  std::int64_t b = 0, kh = 0, s0 = 0, s1 = 0;
};

// Offsets (in floats, each 64-byte aligned) of the arrays in one worker's scratch. Every array is sized by tile
// sizes and head dims only: nothing grows with T or S.
struct ScratchLayout {
  std::size_t total = 0;
  std::size_t take(std::int64_t floats) {
    const std::size_t at = total;
    total += std::size_t(round_up(floats, kMaxLanes));
    return at;
  }
};

// Forward and backward-dQ: the query block is stationary, K/V blocks stream past it.
struct QueryScratch : ScratchLayout {
  std::size_t qt, dot, st, dpt, tanh, acc, kbuf, vbuf, m, l, alpha, lse, dsum, begin, end, lo, hi, tmp;
  explicit QueryScratch(const core::Dims& d) {
    const std::int64_t hqk = round_up(d.Hqk, kMaxLanes), hv = round_up(d.Hv, kMaxLanes);
    qt = take(d.Hqk * kBr);     // Qᵀ·scale, [Hqk][Br]: query rows along the vector lanes
    dot = take(d.Hv * kBr);     // dOᵀ, [Hv][Br] (backward only)
    st = take(kBc * kBr);       // Sᵀ then Pᵀ, [Bc][Br]
    dpt = take(kBc * kBr);      // dPᵀ then dSᵀ (backward only)
    tanh = take(kBc * kBr);     // tanh(s / softcap) (backward with softcap only)
    acc = take(kBr * std::max(hqk, hv));  // O (forward) or dQ (backward) accumulator, [Br][H]
    kbuf = take(kBc * hqk);     // K block as dense f32 rows
    vbuf = take(kBc * hv);      // V block as f32 rows
    m = take(kBr);              // running max, running sum, rescale factor of the online softmax
    l = take(kBr);
    alpha = take(kBr);
    lse = take(kBr);            // backward: LSE and D = rowsum(dO∘O) of the block's rows
    dsum = take(kBr);
    begin = take(2 * kBr);      // visible key range of each row (int64)
    end = take(2 * kBr);
    lo = take(kBr);             // the same range relative to the current key block (int32)
    hi = take(kBr);
    tmp = take(std::max<std::int64_t>({hqk, hv, kBc}));
  }
};

// Backward dK/dV: the key block is stationary, query blocks of every head of its group stream past it.
struct KeyScratch : ScratchLayout {
  std::size_t kt, vt, qbuf, dobuf, s, dp, tanh, dk, dv, lse, dsum, begin, end, tmp;
  explicit KeyScratch(const core::Dims& d) {
    const std::int64_t hqk = round_up(d.Hqk, kMaxLanes), hv = round_up(d.Hv, kMaxLanes);
    kt = take(d.Hqk * kBc);  // Kᵀ·scale, [Hqk][Bc]: keys along the vector lanes
    vt = take(d.Hv * kBc);   // Vᵀ, [Hv][Bc]
    qbuf = take(kBr * hqk);  // Q rows of the current query block, f32
    dobuf = take(kBr * hv);  // dO rows
    s = take(kBr * kBc);     // S then P, [Br][Bc]
    dp = take(kBr * kBc);    // dP then dS
    tanh = take(kBr * kBc);
    dk = take(kBc * hqk);    // accumulators, [Bc][H]
    dv = take(kBc * hv);
    lse = take(kBr);
    dsum = take(kBr);
    begin = take(2 * kBr);
    end = take(2 * kBr);
    tmp = take(std::max<std::int64_t>({hqk, hv, kBc}));
  }
};

// Backward, before the tasks: D = rowsum(dO ∘ O), a row per vector lane (flash_backward_kernel.h, backward_row_dots).
struct RowDotsScratch : ScratchLayout {
  std::size_t o_t, d_o_t, tmp;
  explicit RowDotsScratch(const core::Dims& d) {
    o_t = take(d.Hv * kMaxLanes);    // O of one lane's worth of rows, transposed: [Hv][lanes]
    d_o_t = take(d.Hv * kMaxLanes);  // dO likewise
    tmp = take(d.Hv);                // one converted row
  }
};

// The entry points compiled once per ISA. None of them allocates or throws.
struct Kernels {
  const char* isa;
  int lanes;
  // O and LSE rows of one query block.
  void (*forward_block)(const core::Problem&, const QueryBlock&, float* scratch);
  // D = rowsum(dO ∘ O) of one (batch, query head)'s T rows into d_sum (0 for rows past the query length).
  void (*backward_row_dots)(const core::Problem&, std::int64_t b, std::int64_t n, float* d_sum, float* scratch);
  // dK and dV rows of one key block (summed over the query heads of its group); d_sum is D, (B, N, T) dense.
  void (*backward_key_block)(const core::Problem&, const float* d_sum, const KeyBlock&, float* scratch);
  // dQ rows of one query block.
  void (*backward_query_block)(const core::Problem&, const float* d_sum, const QueryBlock&, float* scratch);
};

// One block of scratch per worker, allocated in one piece before any worker starts: a bad_alloc then leaves every
// output untouched, and nothing inside the workers can fail.
class Workspace {
 public:
  Workspace(int workers, std::size_t floats_per_worker)
      : stride_(std::size_t(round_up(std::int64_t(floats_per_worker), kMaxLanes))) {
    const std::size_t bytes = std::max<std::size_t>(1, std::size_t(workers) * stride_) * sizeof(float);
    data_.reset(static_cast<float*>(::operator new(bytes, std::align_val_t(64))));
  }
  float* worker(int w) const { return data_.get() + std::size_t(w) * stride_; }

 private:
  struct Free {
    void operator()(float* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  std::size_t stride_;
  std::unique_ptr<float, Free> data_;
};

// The drivers: split the call into tasks, allocate the scratch, run the kernels on ctx.threads() threads.
void run_forward(const Kernels& kernels, Context::Impl& ctx, const core::Problem& p);
void run_backward(const Kernels& kernels, Context::Impl& ctx, const core::Problem& p);

// The widest kernel set this CPU runs (AVX-512, AVX2+FMA, or baseline SSE2).
const Kernels& select_kernels();

// Per-ISA tables (defined in flash_isa_*.cpp). Only select_kernels() calls these, after checking the CPU.
const Kernels* kernels_avx512();
const Kernels* kernels_avx2();
const Kernels* kernels_baseline();

}  // namespace attnlab::cpu::flash
