// cpu-flash tile primitives: the register-blocked matrix micro-kernel, the online softmax, exp/tanh, masks and
// dtype conversion, written once with GCC vector extensions and compiled once per ISA.
//
// Included only by flash_isa_*.cpp, inside a `#pragma GCC target` region and inside namespace
// attnlab::cpu::flash::<isa>, after these are defined:
//   kLanes     floats per vector (16 for AVX-512, 8 for AVX2, 4 for SSE2)
//   kGemmRows  output rows one micro-kernel call keeps in registers
//   kGemmVecs  vectors per output row it keeps in registers (kGemmRows × kGemmVecs accumulators)
// It includes nothing: flash_plan.h has already included every header before the target region opened.
#pragma once

typedef float vf __attribute__((vector_size(kLanes * 4)));
typedef std::int32_t vi __attribute__((vector_size(kLanes * 4)));
typedef std::uint32_t vu __attribute__((vector_size(kLanes * 4)));

inline constexpr float kInf = std::numeric_limits<float>::infinity();

// Unaligned loads and stores (memcpy compiles to one vmovups): scratch is aligned, tensor rows need not be.
inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline vi load_i(const std::int32_t* p) {
  vi v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
// {x, x, ..., x} compiles to one vbroadcastss (from memory when x is loaded). `vf{} + x` would not: the compiler
// must keep the 0 + x add (it turns −0 into +0), an extra uop on the FMA ports for every broadcast.
template <class V, class T, std::size_t... I>
inline V splat_lanes(T x, std::index_sequence<I...>) {
  return V{((void)I, x)...};
}
inline vf splat(float x) { return splat_lanes<vf>(x, std::make_index_sequence<kLanes>()); }
inline vi splat_i(std::int32_t x) { return splat_lanes<vi>(x, std::make_index_sequence<kLanes>()); }
inline vf vmax(vf a, vf b) { return a > b ? a : b; }

// exp(x) for a vector: Cody–Waite range reduction x = n·ln2 + r, a degree-6 polynomial for e^r (Cephes expf, about
// 1 ulp), then 2^n added to the exponent bits. Arguments below −86.5 (results under 3e-38, negligible next to the
// row maximum's e^0 = 1) — including −inf — give exactly 0, so a masked score never turns into NaN; that bound also
// keeps n ≥ −125, so adding n to the exponent field always yields a normal float.
inline vf vexp(vf x) {
  const vf lo = splat(-86.5f), hi = splat(88.0f);
  const vi underflow = x < lo;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const vf magic = splat(12582912.0f);  // 1.5·2^23: adding it rounds to an integer held in the low mantissa bits
  const vf t = x * 1.44269504088896341f + magic;
  const vf n = t - magic;
  const vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const vf y = p * r * r + r + 1.0f;
  const vi e = ((vi)t - (vi)magic) << 23;
  return underflow ? vf{} : (vf)((vi)y + e);
}

// tanh(x): an odd polynomial near 0 (Cephes tanhf, |x| < 0.625), else 1 − 2/(e^{2|x|} + 1) with x's sign. The two
// branches avoid the cancellation the exp form suffers for small |x|.
inline vf vtanh(vf x) {
  const vf ax = (vf)((vu)x & 0x7fffffffu);
  const vf z = x * x;
  vf small = splat(-5.70498872745e-3f);
  small = small * z + 2.06390887954e-2f;
  small = small * z - 5.37397155531e-2f;
  small = small * z + 1.33314422036e-1f;
  small = small * z - 3.33332819422e-1f;
  small = small * z * x + x;
  vf large = 1.0f - 2.0f / (vexp(ax + ax) + 1.0f);
  large = (vf)((vu)large | ((vu)x & 0x80000000u));
  return ax < splat(0.625f) ? small : large;
}

// ---------------------------------------------------------------------------------------------------------------
// C (M×N) = init(C) + A (M×K) · B (K×N), f32. B's rows are contiguous (N a multiple of kLanes, loaded as vectors);
// A is read one scalar at a time and broadcast, at A[m·a_m + k·a_k], so the same kernel serves A and Aᵀ without
// transposing anything (e.g. O += P·V reads the Pᵀ tile the softmax produced).
// ---------------------------------------------------------------------------------------------------------------
enum class Init { zero, accumulate, rescale };  // C = 0, C, or C·row_scale[m] before adding A·B

struct Gemm {
  int M = 0, N = 0, K = 0;
  const float* a = nullptr;
  std::int64_t a_m = 0, a_k = 0;
  const float* b = nullptr;
  std::int64_t ldb = 0;
  float* c = nullptr;
  std::int64_t ldc = 0;
  Init init = Init::zero;
  const float* row_scale = nullptr;
};

// R rows × NV vectors of C, held in R·NV registers across the whole K loop. Per k: NV vector loads of B, R
// broadcasts of A, R·NV FMAs — FMA-bound for R, NV ≥ 4 on AVX-512.
template <int R, int NV>
inline void gemm_micro(const Gemm& g, int m0, int n0) {
  // Locals, not g's fields: the compiler cannot prove the stores to C leave *g alone.
  const std::int64_t ldc = g.ldc, ldb = g.ldb, a_m = g.a_m, a_k = g.a_k;
  const int kdim = g.K;
  const Init init = g.init;
  float* c = g.c + m0 * ldc + n0;
  vf acc[R][NV];
#pragma GCC unroll 16
  for (int m = 0; m < R; ++m) {
    const vf s = init == Init::rescale ? splat(g.row_scale[m0 + m]) : splat(1.0f);
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[m][v] = init == Init::zero ? vf{} : load(c + m * ldc + v * kLanes) * s;
  }
  const float* a = g.a + m0 * a_m;
  const float* b = g.b + n0;
  for (int k = 0; k < kdim; ++k) {
    vf bv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) bv[v] = load(b + k * ldb + v * kLanes);
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) {
      const vf av = splat(a[m * a_m + k * a_k]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[m][v] += av * bv[v];
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < R; ++m)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) store(c + m * ldc + v * kLanes, acc[m][v]);
}

// Edge tiles: fewer rows (R) or vectors (NV) than the full register block, chosen at compile time.
template <int R, int NV = kGemmVecs>
inline void gemm_micro_nv(const Gemm& g, int m0, int n0, int nv) {
  if constexpr (NV > 1) {
    if (nv < NV) return gemm_micro_nv<R, NV - 1>(g, m0, n0, nv);
  }
  gemm_micro<R, NV>(g, m0, n0);
}
template <int R = kGemmRows>
inline void gemm_micro_rows(const Gemm& g, int m0, int n0, int rows, int nv) {
  if constexpr (R > 1) {
    if (rows < R) return gemm_micro_rows<R - 1>(g, m0, n0, rows, nv);
  }
  gemm_micro_nv<R>(g, m0, n0, nv);
}

// Column panels outermost: the K × (kGemmVecs·kLanes) panel of B stays in L1 while all rows of A stream past it.
inline void gemm(const Gemm& g) {
  for (int n0 = 0; n0 < g.N; n0 += kGemmVecs * kLanes) {
    const int nv = std::min(kGemmVecs, (g.N - n0) / kLanes);
    for (int m0 = 0; m0 < g.M; m0 += kGemmRows) gemm_micro_rows(g, m0, n0, std::min(kGemmRows, g.M - m0), nv);
  }
}

// Prefetches the lines of the next K and V blocks a few at a time from inside the softmax (compute-bound exp work),
// so the misses are in flight while the core computes. Each query block streams its head's whole K and V, which at
// long sequences live in L2 or L3; issued all at once, the prefetches would queue on the L1 fill buffers and stall
// like the copy itself.
class BlockPrefetch {
 public:
  void add(const TensorView& t, std::int64_t b, std::int64_t l0, std::int64_t head, int rows, int width) {
    if (n_ == 2 || rows <= 0) return;
    Stream& s = streams_[n_++];
    s.base = static_cast<const char*>(t.data) + core::offset_of(t, b, l0, head, 0) * std::int64_t(size_of(t.dtype));
    s.stride = t.strides[1] * std::int64_t(size_of(t.dtype));
    s.lines = int((std::int64_t(width) * std::int64_t(size_of(t.dtype)) + 63) / 64);
    s.rows = rows;
  }
  // One line of each stream.
  void step() {
    for (int i = 0; i < n_; ++i) {
      Stream& s = streams_[i];
      if (s.row >= s.rows) continue;
      __builtin_prefetch(s.base + s.row * s.stride + s.line * 64, 0, 3);
      if (++s.line == s.lines) s.line = 0, ++s.row;
    }
  }

 private:
  struct Stream {
    const char* base = nullptr;
    std::int64_t stride = 0;
    int lines = 0, rows = 0, row = 0, line = 0;
  };
  Stream streams_[2];
  int n_ = 0;
};

// ---------------------------------------------------------------------------------------------------------------
// Score tiles. "Rows" layout: S[query][key], keys along the lanes (backward dK/dV). "Columns" layout: Sᵀ[key][query],
// queries along the lanes (forward, backward dQ), so per-query statistics (max, sum, LSE) are plain vectors.
// ---------------------------------------------------------------------------------------------------------------

// s = cap·tanh(s / cap) over a tile of `rows` × `cols` (cols a multiple of kLanes); keeps tanh for the backward.
inline void softcap_tile(float* s, std::int64_t ld, int rows, int cols, float cap, float* tanh_out) {
  const float inv = 1.0f / cap;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; c += kLanes) {
      const vf t = vtanh(load(s + r * ld + c) * inv);
      if (tanh_out != nullptr) store(tanh_out + r * ld + c, t);
      store(s + r * ld + c, t * cap);
    }
}

// Columns layout: key jj of the tile is visible to query column r iff lo[r] ≤ jj < hi[r]; others become −inf.
inline void mask_columns(float* st, int keys, int cols, const std::int32_t* lo, const std::int32_t* hi) {
  for (int c = 0; c < cols; c += kLanes) {
    const vi vlo = load_i(lo + c), vhi = load_i(hi + c);
    for (int j = 0; j < keys; ++j) {
      const vi jj = splat_i(j);
      const vf v = load(st + j * kBr + c);
      store(st + j * kBr + c, ((jj < vlo) | (jj >= vhi)) ? splat(-kInf) : v);
    }
  }
}

// Rows layout: keys outside [lo, hi) of one row become −inf (including the padding keys up to cols).
inline void mask_row(float* s, int cols, int lo, int hi) {
  for (int j = 0; j < std::min(lo, cols); ++j) s[j] = -kInf;
  for (int j = std::max(hi, 0); j < cols; ++j) s[j] = -kInf;
}

// Online softmax over one key block, columns layout: for each query column, the running max m and sum l absorb
// this block, Sᵀ becomes Pᵀ = exp(Sᵀ − m_new), and alpha = exp(m_old − m_new) is what the O accumulator must be
// multiplied by. A column that has seen no visible key keeps m = −inf and uses 0 as its reference, so its P is 0.
inline void online_softmax_columns(float* st, int keys, int cols, float* m, float* l, float* alpha,
                                   BlockPrefetch& prefetch) {
  for (int c = 0; c < cols; c += kLanes) {
    const vf m_old = load(m + c);
    vf m_new = m_old;
    for (int j = 0; j < keys; ++j) m_new = vmax(m_new, load(st + j * kBr + c));
    const vf ref = m_new == splat(-kInf) ? vf{} : m_new;
    vf sum{};
    for (int j = 0; j < keys; ++j) {
      prefetch.step();
      const vf p = vexp(load(st + j * kBr + c) - ref);
      store(st + j * kBr + c, p);
      sum += p;
    }
    const vf a = vexp(m_old - ref);
    store(alpha + c, a);
    store(l + c, load(l + c) * a + sum);
    store(m + c, m_new);
  }
}

// Backward: P = exp(S − LSE) with the forward's LSE; a row whose LSE is −inf saw no key and has P = 0.
inline vf probs_from_lse(vf s, vf lse) { return lse == splat(-kInf) ? vf{} : vexp(s - lse); }

// Backward: dS = P ∘ (dP − D) ∘ (1 − tanh²) — the last factor only with a softcap. In place over dP.
inline vf score_grad(vf p, vf dp, vf d, const float* tanh_at) {
  vf ds = p * (dp - d);
  if (tanh_at != nullptr) {
    const vf t = load(tanh_at);
    ds *= 1.0f - t * t;
  }
  return ds;
}

// ---------------------------------------------------------------------------------------------------------------
// Loading tensor rows as f32. Half-precision conversions are written as branch-free integer code the compiler
// vectorizes (no F16C needed): they run once per key block, inside the hot loop of every query block.
// ---------------------------------------------------------------------------------------------------------------
inline void convert_row(const TensorView& t, std::int64_t offset, int count, float* out) {
  if (t.dtype == DType::f32) {
    // Inline vector copy: rows are short (one head), and a libc memcpy call per row cost ~20% of the forward.
    const float* in = static_cast<const float*>(t.data) + offset;
    int i = 0;
    for (; i + kLanes <= count; i += kLanes) store(out + i, load(in + i));
    for (; i < count; ++i) out[i] = in[i];
    return;
  }
  const std::uint16_t* h = static_cast<const std::uint16_t*>(t.data) + offset;
  if (t.dtype == DType::bf16) {
    for (int i = 0; i < count; ++i) {
      const std::uint32_t bits = std::uint32_t(h[i]) << 16;
      std::memcpy(out + i, &bits, 4);
    }
    return;
  }
  // f16: shift exponent+mantissa into place, then multiply by 2^112 to rebias the exponent (15 → 127); this also
  // turns f16 subnormals into the right f32 normals. Inf/NaN (exponent 31) get the f32 all-ones exponent.
  for (int i = 0; i < count; ++i) {
    const std::uint32_t sign = std::uint32_t(h[i] & 0x8000u) << 16;
    const std::uint32_t body = h[i] & 0x7fffu;
    std::uint32_t shifted = body << 13;
    float mag;
    std::memcpy(&mag, &shifted, 4);
    mag *= 5.192296858534828e33f;  // 2^112
    std::uint32_t bits;
    std::memcpy(&bits, &mag, 4);
    bits = body >= 0x7c00u ? (0x7f800000u | shifted) : bits;
    bits |= sign;
    std::memcpy(out + i, &bits, 4);
  }
}

// rows × width elements of a (B, L, heads, H) tensor, starting at sequence index l0 of (b, head), as f32 rows of
// `ld` floats, zero-padded to `padded` columns.
//
// K and V blocks always go through this copy into dense scratch, even from f32 tensors: in the common (B, S, K, H)
// layout their rows sit a power-of-two stride apart (K·H·4 bytes), which maps a whole block onto a few L1 sets.
// Measured on the P·V product alone: 171 GFLOP/s from dense rows, 138 from rows 2 KiB apart. The copy costs Bc·H
// loads and stores per block.
inline void load_rows(const TensorView& t, std::int64_t b, std::int64_t l0, std::int64_t head, int rows, int width,
                      int padded, float* out, std::int64_t ld) {
  for (int r = 0; r < rows; ++r) {
    float* row = out + r * ld;
    convert_row(t, core::offset_of(t, b, l0 + r, head, 0), width, row);
    for (int c = width; c < padded; ++c) row[c] = 0.0f;
  }
}

// The same rows transposed and scaled: out[h·ld + r] = scale·t[b, l0 + r, head, h]; columns rows ≤ r < cols are 0.
// Runs once per task (a stationary block), so the scattered stores do not matter.
inline void load_transposed(const TensorView& t, std::int64_t b, std::int64_t l0, std::int64_t head, int rows,
                            int width, int cols, float scale, float* out, std::int64_t ld, float* tmp) {
  for (int r = 0; r < rows; ++r) {
    convert_row(t, core::offset_of(t, b, l0 + r, head, 0), width, tmp);
    for (int h = 0; h < width; ++h) out[h * ld + r] = tmp[h] * scale;
  }
  for (int h = 0; h < width; ++h)
    for (int r = rows; r < cols; ++r) out[h * ld + r] = 0.0f;
}

// Visible key range of each of the block's rows, and the two intervals the block loop needs: `any` (keys some row
// sees: the only key blocks worth visiting) and `all` (keys every row sees: blocks inside need no interval mask).
struct BlockKeys {
  std::int64_t any_begin = 0, any_end = 0, all_begin = 0, all_end = 0;
};
inline BlockKeys block_keys(const core::Problem& p, std::int64_t b, std::int64_t i0, int rows, std::int64_t* begin,
                            std::int64_t* end) {
  const std::int64_t q_len = p.q_len(b), kv_len = p.kv_len(b);
  BlockKeys k{std::numeric_limits<std::int64_t>::max(), 0, 0, std::numeric_limits<std::int64_t>::max()};
  for (int r = 0; r < rows; ++r) {
    const core::KeyRange kr = core::visible_keys(p.mask, i0 + r, q_len, kv_len);
    begin[r] = kr.begin;
    end[r] = kr.end;
    if (!kr.empty()) {
      k.any_begin = std::min(k.any_begin, kr.begin);
      k.any_end = std::max(k.any_end, kr.end);
    }
    k.all_begin = std::max(k.all_begin, kr.begin);
    k.all_end = std::min(k.all_end, kr.end);
  }
  if (k.any_end <= k.any_begin) k.any_begin = k.any_end = 0;
  return k;
}
