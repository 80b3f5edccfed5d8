// cpu-naive: attention computed the way the codelab's naive version does it. The whole (B, N, T, S) fp32 score
// matrix is materialized, turned into probabilities in place and multiplied with V; backward materializes P and
// then dS in the same buffer. It is the reference the other paths are measured against, so it favours plain,
// checkable loops over speed: dot products and sums accumulate in fp64, the score matrix is fp32.
//
// Work is split into tasks that never write the same output element:
//   forward          (b, n, block of query rows): scores → softmax → P·V for those rows
//   backward pass 1  (b, n, row block):  P = exp(s − lse), materialized
//   backward pass 2  (b, kv head, block of keys): dV = Σ_{heads of the group} Pᵀ·dO
//   backward pass 3  (b, n, row block):  dS = P ∘ (dO·Vᵀ − D) ∘ softcap′, overwriting P; dQ = scale · dS·K
//   backward pass 4  (b, kv head, block of keys): dK = scale · Σ_{heads of the group} dSᵀ·Q
// K and V are read in place through their strides; query head n reads KV head n / (N / K).
#include <fmt/format.h>
#if __has_include(<unistd.h>)
#include <unistd.h>  // sysconf: physical memory size
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include "core/context_impl.h"
#include "core/error.h"
#include "core/mask.h"
#include "core/numeric.h"
#include "core/parallel.h"
#include "core/path.h"
#include "cpu/score_mods.h"

namespace attnlab::cpu {
namespace {

using core::offset_of;

constexpr std::int64_t kRowsPerTask = 16;  // query rows per row task: enough tasks to balance causal rows
constexpr std::int64_t kKeysPerTask = 64;  // keys per dK/dV task: its fp64 accumulator stays in cache

// ---------------------------------------------------------------------------------------------------------------
// Typed element access. The kernels are instantiated per dtype so the inner loops carry no dtype switch.
// ---------------------------------------------------------------------------------------------------------------
template <DType D>
inline float load(const void* base, std::int64_t offset) {
  if constexpr (D == DType::f32) return static_cast<const float*>(base)[offset];
  else if constexpr (D == DType::bf16) return core::bf16_to_float(static_cast<const std::uint16_t*>(base)[offset]);
  else return core::f16_to_float(static_cast<const std::uint16_t*>(base)[offset]);
}

template <DType D>
inline void store(void* base, std::int64_t offset, float value) {
  if constexpr (D == DType::f32) static_cast<float*>(base)[offset] = value;
  else if constexpr (D == DType::bf16) static_cast<std::uint16_t*>(base)[offset] = core::float_to_bf16(value);
  else static_cast<std::uint16_t*>(base)[offset] = core::float_to_f16(value);
}

template <DType D>
void load_row(const void* base, std::int64_t offset, std::int64_t count, float* out) {
  for (std::int64_t h = 0; h < count; ++h) out[h] = load<D>(base, offset + h);
}

template <DType D>
void store_row(void* base, std::int64_t offset, std::int64_t count, const double* in, double factor) {
  for (std::int64_t h = 0; h < count; ++h) store<D>(base, offset + h, float(in[h] * factor));
}

template <DType D>
void store_zeros(void* base, std::int64_t offset, std::int64_t count) {
  for (std::int64_t h = 0; h < count; ++h) store<D>(base, offset + h, 0.0f);
}

// x · y[offset ...] in fp64. Four partial sums: independent chains the CPU can overlap, and they keep the
// summation order fixed (the result does not depend on the compiler's vectorization choices).
template <DType D>
double dot(const float* x, const void* y, std::int64_t offset, std::int64_t count) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::int64_t h = 0;
  for (; h + 4 <= count; h += 4) {
    s0 += double(x[h + 0]) * load<D>(y, offset + h + 0);
    s1 += double(x[h + 1]) * load<D>(y, offset + h + 1);
    s2 += double(x[h + 2]) * load<D>(y, offset + h + 2);
    s3 += double(x[h + 3]) * load<D>(y, offset + h + 3);
  }
  for (; h < count; ++h) s0 += double(x[h]) * load<D>(y, offset + h);
  return (s0 + s1) + (s2 + s3);
}

// acc[0, H) = Σ_{j in [begin, end)} w[j] · kv[b, j, kvh, :]   (a row of P·V, or of dS·K)
template <DType D>
void weighted_kv_sum(const TensorView& kv, std::int64_t b, std::int64_t kvh, std::int64_t begin, std::int64_t end,
                     const float* w, std::int64_t H, double* acc) {
  std::fill(acc, acc + H, 0.0);
  for (std::int64_t j = begin; j < end; ++j) {
    const double wj = w[j];
    if (wj == 0.0) continue;  // masked or underflowed: contributes nothing
    const std::int64_t row = offset_of(kv, b, j, kvh);
    for (std::int64_t h = 0; h < H; ++h) acc[h] += wj * load<D>(kv.data, row + h);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Scores
// ---------------------------------------------------------------------------------------------------------------
// The scratch one worker owns; sized before any parallel call so that nothing inside a worker allocates.
struct Scratch {
  std::vector<float> x;    // a row of Q (or dO, or Q again in the dK pass)
  std::vector<float> row;  // one row of capped scores (backward with softcap)
  std::vector<double> acc; // output accumulators: one row, or a block of kKeysPerTask rows
};

// A query row and where it lives.
struct RowRef {
  std::int64_t b, n, kvh, i;
  core::KeyRange keys;  // visible keys from the interval masks (causal, window, sequence lengths)
};

// out[j] = softcap(scale · q_i · k_j) for the visible keys j; other entries are left alone.
template <DType D>
void capped_scores(const core::Problem& p, const RowRef& r, float* q_row, float* out) {
  const std::int64_t H = p.dims.Hqk;
  load_row<D>(p.q.data, offset_of(p.q, r.b, r.i, r.n), H, q_row);
  for (std::int64_t j = r.keys.begin; j < r.keys.end; ++j) {
    const double s = double(p.scale) * dot<D>(q_row, p.k.data, offset_of(p.k, r.b, j, r.kvh), H);
    out[j] = softcap(float(s), p.softcap);
  }
}

// A full row of the score matrix in docs/design.md §2's order: scale, softcap, bias / boolean mask, −inf where masked.
template <DType D>
void score_row(const core::Problem& p, const RowRef& r, const ElementwiseMods& mods, float* q_row, float* out) {
  const std::int64_t S = p.dims.S;
  if (r.keys.empty()) {  // (begin may lie past S then: fill the whole row)
    std::fill(out, out + S, kNegInf);
    return;
  }
  std::fill(out, out + r.keys.begin, kNegInf);
  std::fill(out + r.keys.end, out + S, kNegInf);
  capped_scores<D>(p, r, q_row, out);
  mods.apply(r.i, r.keys.begin, r.keys.end, out + r.keys.begin);
}

// In place: scores → probabilities. Returns the row's log-sum-exp, −inf (and a row of zeros) when no key is
// visible, so that a fully masked row yields O = 0 instead of 0/0.
double softmax_row(float* row, std::int64_t S) {
  const float m = *std::max_element(row, row + S);
  if (m == kNegInf) {
    std::fill(row, row + S, 0.0f);
    return -std::numeric_limits<double>::infinity();
  }
  double sum = 0;
  for (std::int64_t j = 0; j < S; ++j) {
    const double e = std::exp(double(row[j]) - double(m));
    row[j] = float(e);
    sum += e;
  }
  const double inv = 1.0 / sum;
  for (std::int64_t j = 0; j < S; ++j) row[j] = float(row[j] * inv);
  return double(m) + std::log(sum);
}

// ---------------------------------------------------------------------------------------------------------------
// Tasks
// ---------------------------------------------------------------------------------------------------------------
struct RowTask {
  std::int64_t b, n, i0, i1;
};
RowTask row_task(const core::Dims& d, std::int64_t t) {
  const std::int64_t blocks = (d.T + kRowsPerTask - 1) / kRowsPerTask;
  const std::int64_t blk = t % blocks, bn = t / blocks;
  return {bn / d.N, bn % d.N, blk * kRowsPerTask, std::min(d.T, (blk + 1) * kRowsPerTask)};
}
std::int64_t row_tasks(const core::Dims& d) { return d.B * d.N * ((d.T + kRowsPerTask - 1) / kRowsPerTask); }

struct KeyTask {
  std::int64_t b, kvh, j0, j1;
};
KeyTask key_task(const core::Dims& d, std::int64_t t) {
  const std::int64_t blocks = (d.S + kKeysPerTask - 1) / kKeysPerTask;
  const std::int64_t blk = t % blocks, bg = t / blocks;
  return {bg / d.K, bg % d.K, blk * kKeysPerTask, std::min(d.S, (blk + 1) * kKeysPerTask)};
}
std::int64_t key_tasks(const core::Dims& d) { return d.B * d.K * ((d.S + kKeysPerTask - 1) / kKeysPerTask); }

// Start of row (b, n, i) of the materialized (B, N, T, S) matrix.
template <class F>
F* matrix_row(F* matrix, const core::Dims& d, std::int64_t b, std::int64_t n, std::int64_t i) {
  return matrix + ((b * d.N + n) * d.T + i) * d.S;
}

RowRef row_ref(const core::Problem& p, std::int64_t b, std::int64_t n, std::int64_t i) {
  return {b, n, n / p.dims.group(), i, core::visible_keys(p.mask, i, p.q_len(b), p.kv_len(b))};
}

float lse_at(const core::Problem& p, std::int64_t b, std::int64_t n, std::int64_t i) {
  return static_cast<const float*>(p.lse.data)[offset_of(p.lse, b, n, i)];
}

// ---------------------------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------------------------
template <DType D>
void forward_task(const core::Problem& p, float* scores, const RowTask& t, Scratch& w) {
  const core::Dims& d = p.dims;
  const ElementwiseMods mods(p, t.b, t.n);
  // 1. scores = scale · Q·Kᵀ with softcap, bias and masks
  for (std::int64_t i = t.i0; i < t.i1; ++i)
    score_row<D>(p, row_ref(p, t.b, t.n, i), mods, w.x.data(), matrix_row(scores, d, t.b, t.n, i));
  // 2. P = softmax(scores), in place
  for (std::int64_t i = t.i0; i < t.i1; ++i) {
    const double lse = softmax_row(matrix_row(scores, d, t.b, t.n, i), d.S);
    if (p.has_lse()) static_cast<float*>(p.lse.data)[offset_of(p.lse, t.b, t.n, i)] = float(lse);
  }
  // 3. O = P·V (a row of zeros where nothing was visible)
  const std::int64_t kvh = t.n / d.group();
  for (std::int64_t i = t.i0; i < t.i1; ++i) {
    weighted_kv_sum<D>(p.v, t.b, kvh, 0, d.S, matrix_row(scores, d, t.b, t.n, i), d.Hv, w.acc.data());
    store_row<D>(p.o.data, offset_of(p.o, t.b, i, t.n), d.Hv, w.acc.data(), 1.0);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------------------------
// Pass 1: P = exp(s − lse) from the forward call's lse; rows that saw nothing (lse = −inf) are all zero.
template <DType D>
void probabilities_task(const core::Problem& p, float* matrix, const RowTask& t, Scratch& w) {
  const ElementwiseMods mods(p, t.b, t.n);
  for (std::int64_t i = t.i0; i < t.i1; ++i) {
    float* row = matrix_row(matrix, p.dims, t.b, t.n, i);
    const RowRef r = row_ref(p, t.b, t.n, i);
    const double lse = lse_at(p, t.b, t.n, i);
    if (r.keys.empty() || !(lse > -std::numeric_limits<double>::infinity())) {  // also catches a NaN lse
      std::fill(row, row + p.dims.S, 0.0f);
      continue;
    }
    score_row<D>(p, r, mods, w.x.data(), row);
    for (std::int64_t j = 0; j < p.dims.S; ++j) row[j] = float(std::exp(double(row[j]) - lse));
  }
}

// Passes 2 and 4: grad[b, j, kvh, :] = factor · Σ_{n of the group} Σ_i W[b, n, i, j] · src[b, i, n, :] for the
// task's keys, W being P (dV, src = dO) or dS (dK, src = Q). One task owns its keys across all the group's query
// heads, so GQA/MQA sums need no atomics.
template <DType D>
void key_grad_task(const core::Problem& p, const float* matrix, const TensorView& src, const TensorView& grad,
                   std::int64_t H, double factor, const KeyTask& t, Scratch& w) {
  const core::Dims& d = p.dims;
  const std::int64_t keys = t.j1 - t.j0;
  double* acc = w.acc.data();
  std::fill(acc, acc + keys * H, 0.0);
  const std::int64_t q_len = p.q_len(t.b);  // rows past q_len are zero in W
  for (std::int64_t n = t.kvh * d.group(); n < (t.kvh + 1) * d.group(); ++n) {
    for (std::int64_t i = 0; i < q_len; ++i) {
      const float* wrow = matrix_row(matrix, d, t.b, n, i);
      bool loaded = false;
      for (std::int64_t j = t.j0; j < t.j1; ++j) {
        const double wij = wrow[j];
        if (wij == 0.0) continue;
        if (!loaded) {  // read src's row only if some key of this block needs it (causal rows mostly don't)
          load_row<D>(src.data, offset_of(src, t.b, i, n), H, w.x.data());
          loaded = true;
        }
        double* a = acc + (j - t.j0) * H;
        for (std::int64_t h = 0; h < H; ++h) a[h] += wij * w.x[h];
      }
    }
  }
  for (std::int64_t j = t.j0; j < t.j1; ++j)
    store_row<D>(grad.data, offset_of(grad, t.b, j, t.kvh), H, acc + (j - t.j0) * H, factor);
}

// Pass 3: dS = P ∘ (dP − D) ∘ softcap′ with dP = dO·Vᵀ and D_i = dO_i·O_i, written over P; then dQ = scale · dS·K.
// The chain through the bias is the identity (bias gets no gradient), so dS w.r.t. the capped score is the same.
template <DType D>
void score_grad_task(const core::Problem& p, float* matrix, const RowTask& t, Scratch& w) {
  const core::Dims& d = p.dims;
  for (std::int64_t i = t.i0; i < t.i1; ++i) {
    float* row = matrix_row(matrix, d, t.b, t.n, i);
    const RowRef r = row_ref(p, t.b, t.n, i);
    const std::int64_t dq_row = offset_of(p.dq, t.b, i, t.n);
    const double lse = lse_at(p, t.b, t.n, i);
    if (r.keys.empty() || !(lse > -std::numeric_limits<double>::infinity())) {  // pass 1 left P = 0: dS = 0
      store_zeros<D>(p.dq.data, dq_row, d.Hqk);
      continue;
    }
    if (p.softcap > 0.0f) capped_scores<D>(p, r, w.x.data(), w.row.data());
    load_row<D>(p.d_o.data, offset_of(p.d_o, t.b, i, t.n), d.Hv, w.x.data());  // x = dO_i from here on
    const double Di = dot<D>(w.x.data(), p.o.data, offset_of(p.o, t.b, i, t.n), d.Hv);
    for (std::int64_t j = r.keys.begin; j < r.keys.end; ++j) {  // outside the keys P (hence dS) is already 0
      if (row[j] == 0.0f) continue;
      const double dP = dot<D>(w.x.data(), p.v.data, offset_of(p.v, t.b, j, r.kvh), d.Hv);
      double dS = double(row[j]) * (dP - Di);
      if (p.softcap > 0.0f) dS *= softcap_grad(w.row[j], p.softcap);
      row[j] = float(dS);
    }
    weighted_kv_sum<D>(p.k, t.b, r.kvh, r.keys.begin, r.keys.end, row, d.Hqk, w.acc.data());
    store_row<D>(p.dq.data, dq_row, d.Hqk, w.acc.data(), double(p.scale));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Workspace: sized with overflow checks, allocated in full before any output is written.
// ---------------------------------------------------------------------------------------------------------------
std::uint64_t physical_memory_bytes() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGE_SIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) return std::uint64_t(pages) * std::uint64_t(page);
#endif
  return std::numeric_limits<std::uint64_t>::max();  // unknown: let the allocator decide
}

// The (B, N, T, S) fp32 matrix. Refused up front when its size overflows or exceeds the machine's memory: on
// systems that overcommit, such an allocation may "succeed" and the process be killed when the pages are touched.
std::unique_ptr<float[]> allocate_matrix(const core::Dims& d) {
  std::uint64_t elems = 1, bytes = 0;
  bool overflow = false;
  for (std::int64_t x : {d.B, d.N, d.T, d.S}) overflow |= __builtin_mul_overflow(elems, std::uint64_t(x), &elems);
  overflow |= __builtin_mul_overflow(elems, std::uint64_t(sizeof(float)), &bytes);
  if (overflow)
    core::fail(ErrorCode::out_of_memory,
               "cpu-naive: the (B, N, T, S) = ({}, {}, {}, {}) fp32 score matrix needs more than 2^64 bytes; use "
               "cpu-flash, which never materializes it",
               d.B, d.N, d.T, d.S);
  const std::uint64_t memory = physical_memory_bytes();
  if (bytes > memory || bytes > std::uint64_t(std::numeric_limits<std::ptrdiff_t>::max()))
    core::fail(ErrorCode::out_of_memory,
               "cpu-naive: the (B, N, T, S) = ({}, {}, {}, {}) fp32 score matrix needs {} bytes ({:.1f} GiB), more than "
               "this host's {:.1f} GiB of memory; use cpu-flash, which never materializes it",
               d.B, d.N, d.T, d.S, bytes, double(bytes) / (1 << 30), double(memory) / (1 << 30));
  try {
    return std::unique_ptr<float[]>(new float[elems]);  // not zeroed: every task writes its rows in full
  } catch (const std::bad_alloc&) {
    core::fail(ErrorCode::out_of_memory,
               "cpu-naive: the (B, N, T, S) = ({}, {}, {}, {}) fp32 score matrix needs {} bytes of host memory, which "
               "could not be allocated; use cpu-flash, which never materializes it",
               d.B, d.N, d.T, d.S, bytes);
  }
}

std::vector<Scratch> allocate_scratch(int workers, std::int64_t x, std::int64_t row, std::int64_t acc) {
  std::vector<Scratch> scratch(std::size_t(std::max(workers, 1)));
  for (Scratch& s : scratch) {
    s.x.resize(std::size_t(x));
    s.row.resize(std::size_t(row));
    s.acc.resize(std::size_t(acc));
  }
  return scratch;
}

// What a call used, for RunInfo::workspace_bytes: the matrix (its size already checked) and the scratch.
std::size_t workspace_bytes(const core::Dims& d, const std::vector<Scratch>& scratch) {
  std::size_t bytes = std::size_t(d.B * d.N * d.T * d.S) * sizeof(float);
  for (const Scratch& s : scratch)
    bytes += (s.x.size() + s.row.size()) * sizeof(float) + s.acc.size() * sizeof(double);
  return bytes;
}

// Threads for a call: one for tiny problems, where starting threads costs more than the work.
int threads_for(const Context::Impl& ctx, const core::Dims& d) {
  const double macs = double(d.B) * double(d.N) * double(d.T) * double(d.S) * double(d.Hqk + d.Hv);
  return macs < double(1 << 18) ? 1 : ctx.threads();
}

template <DType D>
void run_forward(Context::Impl& ctx, const core::Problem& p) {
  const core::Dims& d = p.dims;
  const int threads = threads_for(ctx, d);
  const std::int64_t tasks = row_tasks(d);
  std::unique_ptr<float[]> scores = allocate_matrix(d);
  std::vector<Scratch> scratch = allocate_scratch(core::parallel_workers(tasks, threads), d.Hqk, 0, d.Hv);
  ctx.last_workspace_bytes = workspace_bytes(d, scratch);
  // Nothing below allocates or throws: outputs are written only from here on.
  core::parallel_for(ctx.pool, tasks, threads, [&](std::int64_t t, int worker) {
    forward_task<D>(p, scores.get(), row_task(d, t), scratch[std::size_t(worker)]);
  });
}

template <DType D>
void run_backward(Context::Impl& ctx, const core::Problem& p) {
  const core::Dims& d = p.dims;
  const int threads = threads_for(ctx, d);
  const std::int64_t rtasks = row_tasks(d), ktasks = key_tasks(d);
  const int workers = std::max(core::parallel_workers(rtasks, threads), core::parallel_workers(ktasks, threads));
  const std::int64_t H = std::max(d.Hqk, d.Hv);
  std::unique_ptr<float[]> matrix = allocate_matrix(d);
  std::vector<Scratch> scratch =
      allocate_scratch(workers, H, p.softcap > 0.0f ? d.S : 0, std::max<std::int64_t>(kKeysPerTask * H, H));
  ctx.last_workspace_bytes = workspace_bytes(d, scratch);
  // Nothing below allocates or throws: outputs are written only from here on.
  float* m = matrix.get();
  auto rows = [&](auto&& fn) {
    core::parallel_for(ctx.pool, rtasks, threads,
                       [&](std::int64_t t, int wk) { fn(row_task(d, t), scratch[std::size_t(wk)]); });
  };
  auto keys = [&](auto&& fn) {
    core::parallel_for(ctx.pool, ktasks, threads,
                       [&](std::int64_t t, int wk) { fn(key_task(d, t), scratch[std::size_t(wk)]); });
  };
  rows([&](const RowTask& t, Scratch& w) { probabilities_task<D>(p, m, t, w); });
  keys([&](const KeyTask& t, Scratch& w) { key_grad_task<D>(p, m, p.d_o, p.dv, d.Hv, 1.0, t, w); });
  rows([&](const RowTask& t, Scratch& w) { score_grad_task<D>(p, m, t, w); });
  keys([&](const KeyTask& t, Scratch& w) { key_grad_task<D>(p, m, p.q, p.dk, d.Hqk, double(p.scale), t, w); });
}

// ---------------------------------------------------------------------------------------------------------------
// The path
// ---------------------------------------------------------------------------------------------------------------
class NaivePath final : public core::SimplePath {
 public:
  std::string_view name() const override { return "cpu-naive"; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override {
    return "CPU reference: materializes the (B, N, T, S) fp32 score matrix like the codelab's naive version; "
           "f32/f16/bf16, every mask, forward and backward, fp64 accumulation";
  }

  std::optional<std::string> why_not(const core::Problem& p) const override {
    if (p.dtype == DType::e4m3 || p.dtype == DType::e5m2)
      return fmt::format("fp8 inputs ({}) unsupported; use f32, f16 or bf16 (fp8 runs on GPU paths only)",
                         to_string(p.dtype));
    if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
      return fmt::format("{} inputs unsupported; use f32, f16 or bf16", to_string(p.dtype));
    return std::nullopt;  // any head dims, every mask, bias, sequence lengths, GQA/MQA, both directions
  }


 protected:
  void run(Context::Impl& ctx, const core::Problem& p) const override {
    const bool fwd = p.direction == core::Direction::forward;
    switch (p.dtype) {
      case DType::f32: return fwd ? run_forward<DType::f32>(ctx, p) : run_backward<DType::f32>(ctx, p);
      case DType::f16: return fwd ? run_forward<DType::f16>(ctx, p) : run_backward<DType::f16>(ctx, p);
      case DType::bf16: return fwd ? run_forward<DType::bf16>(ctx, p) : run_backward<DType::bf16>(ctx, p);
      default: core::fail(ErrorCode::internal, "cpu-naive: run() called with {} inputs", to_string(p.dtype));
    }
  }
};

}  // namespace

const core::Path& naive_path() {
  static const NaivePath path;
  return path;
}

}  // namespace attnlab::cpu
