// cpu-flash forward, one query block: the FlashAttention loop. The block's Qᵀ stays in scratch; K/V blocks of Bc
// keys stream past it; each yields a score tile Sᵀ (keys × queries), which the online softmax turns into Pᵀ while
// rescaling the O accumulator; O += P·V. Extra memory: the worker's scratch (tiles and head dims only).
//
// Included only by flash_isa_*.cpp, after flash_tiles.h (see there).
#pragma once

// Adds the bias / boolean mask to the score tile (columns layout). The bias is stored by query row, the tile by key
// row, so each query's scores are gathered into a contiguous row, modified by the shared ElementwiseMods, and
// scattered back: O(Br·Bc) per tile, against O(Br·Bc·H) for the products.
inline void apply_mods_columns(const ElementwiseMods& mods, float* st, std::int64_t i0, int rows, std::int64_t s0,
                               int keys, float* tmp) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < keys; ++j) tmp[j] = st[j * kBr + r];
    mods.apply(i0 + r, s0, s0 + keys, tmp);
    for (int j = 0; j < keys; ++j) st[j * kBr + r] = tmp[j];
  }
}

// Interval mask of one key block [s0, s0 + keys) in the columns layout, from each row's absolute range.
inline void mask_block_columns(float* st, std::int64_t s0, int keys, int rows, int cols, const std::int64_t* begin,
                               const std::int64_t* end, std::int32_t* lo, std::int32_t* hi) {
  for (int r = 0; r < cols; ++r) {
    if (r < rows) {
      lo[r] = std::int32_t(std::clamp<std::int64_t>(begin[r] - s0, 0, keys));
      hi[r] = std::int32_t(std::clamp<std::int64_t>(end[r] - s0, 0, keys));
    } else {
      lo[r] = hi[r] = 0;  // padding columns see nothing
    }
  }
  mask_columns(st, keys, cols, lo, hi);
}

inline void forward_block(const core::Problem& p, const QueryBlock& blk, float* ws) {
  const core::Dims& d = p.dims;
  const QueryScratch at(d);
  const std::int64_t b = blk.b, n = blk.n, i0 = blk.i0;
  const std::int64_t kh = n / d.group();
  const int rows = int(blk.i1 - blk.i0);
  const int cols = int(round_up(rows, kLanes));  // query columns of the score tile (whole vectors)
  const int hqk = int(d.Hqk), hv = int(d.Hv);
  const int hv_vec = int(round_up(hv, kLanes));
  const std::int64_t acc_ld = round_up(std::max(d.Hqk, d.Hv), kMaxLanes);

  float* qt = ws + at.qt;
  float* st = ws + at.st;
  float* acc = ws + at.acc;
  float* m = ws + at.m;
  float* l = ws + at.l;
  float* alpha = ws + at.alpha;
  float* tmp = ws + at.tmp;
  float* kbuf = ws + at.kbuf;
  float* vbuf = ws + at.vbuf;
  const std::int64_t k_ld = round_up(d.Hqk, kMaxLanes), v_ld = round_up(d.Hv, kMaxLanes);
  auto* begin = reinterpret_cast<std::int64_t*>(ws + at.begin);
  auto* end = reinterpret_cast<std::int64_t*>(ws + at.end);
  auto* lo = reinterpret_cast<std::int32_t*>(ws + at.lo);
  auto* hi = reinterpret_cast<std::int32_t*>(ws + at.hi);

  // Scale folded into Qᵀ once, instead of into every score tile.
  load_transposed(p.q, b, i0, n, rows, hqk, cols, p.scale, qt, kBr, tmp);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < hv_vec; ++c) acc[r * acc_ld + c] = 0.0f;
  for (int r = 0; r < cols; ++r) {
    m[r] = -kInf;
    l[r] = 0.0f;
  }

  const BlockKeys keys = block_keys(p, b, i0, rows, begin, end);
  const ElementwiseMods mods(p, b, n);
  for (std::int64_t s0 = keys.any_begin; s0 < keys.any_end; s0 += kBc) {
    const int bc = int(std::min<std::int64_t>(kBc, keys.any_end - s0));
    load_rows(p.k, b, s0, kh, bc, hqk, hqk, kbuf, k_ld);  // K is only broadcast: no padding needed
    load_rows(p.v, b, s0, kh, bc, hv, hv_vec, vbuf, v_ld);

    // Sᵀ = K · (scale·Qᵀ): keys are broadcast, query rows fill the vector lanes.
    Gemm s;
    s.M = bc, s.N = cols, s.K = hqk;
    s.a = kbuf, s.a_m = k_ld, s.a_k = 1;
    s.b = qt, s.ldb = kBr;
    s.c = st, s.ldc = kBr;
    gemm(s);

    if (p.softcap > 0.0f) softcap_tile(st, kBr, bc, cols, p.softcap, nullptr);
    if (mods.any()) apply_mods_columns(mods, st, i0, rows, s0, bc, tmp);
    // Blocks every row sees whole skip the interval mask. (Padding columns then hold finite scores from zero Qᵀ
    // columns; nothing reads them.)
    if (!(keys.all_begin <= s0 && s0 + bc <= keys.all_end))
      mask_block_columns(st, s0, bc, rows, cols, begin, end, lo, hi);

    BlockPrefetch prefetch;
    if (s0 + kBc < keys.any_end) {
      const int next = int(std::min<std::int64_t>(kBc, keys.any_end - s0 - kBc));
      prefetch.add(p.k, b, s0 + kBc, kh, next, hqk);
      prefetch.add(p.v, b, s0 + kBc, kh, next, hv);
    }
    online_softmax_columns(st, bc, cols, m, l, alpha, prefetch);

    // O = alpha·O + P·V, with P read out of the Pᵀ tile (a_m = 1, a_k = Br).
    Gemm o;
    o.M = rows, o.N = hv_vec, o.K = bc;
    o.a = st, o.a_m = 1, o.a_k = kBr;
    o.b = vbuf, o.ldb = v_ld;
    o.c = acc, o.ldc = acc_ld;
    o.init = Init::rescale, o.row_scale = alpha;
    gemm(o);
  }

  // O = acc / l, LSE = m + log l; a row that saw no key (l = 0) gets O = 0 and LSE = −inf.
  for (int r = 0; r < rows; ++r) {
    const std::int64_t i = i0 + r;
    const bool seen = l[r] > 0.0f;
    const float inv = seen ? 1.0f / l[r] : 0.0f;
    for (int c = 0; c < hv; ++c) tmp[c] = acc[r * acc_ld + c] * inv;
    core::store_row(p.o.data, p.dtype, core::offset_of(p.o, b, i, n, 0), hv, tmp);
    if (p.has_lse())
      static_cast<float*>(p.lse.data)[core::offset_of(p.lse, b, n, i)] = seen ? m[r] + std::log(l[r]) : -kInf;
  }
}
