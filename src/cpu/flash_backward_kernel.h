// cpu-flash backward (FlashAttention-2 style, from the forward's LSE), split so no two workers ever write the same
// gradient element:
//   key block (pass 1):   a block of Bc keys of one KV head is stationary; the query blocks of every query head of
//                          its group stream past it; P, dP and dS are recomputed and dK, dV accumulate in scratch.
//   query block (pass 2): a block of Br query rows is stationary; K/V blocks stream past it; P, dP and dS are
//                          recomputed again and dQ accumulates in scratch.
// With s = scale·q·k (softcapped, + bias, masked), P = exp(s − LSE), D = rowsum(dO∘O):
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P∘(dP − D)∘(1 − tanh²),  dQ = scale·dS·K,  dK = scale·dSᵀ·Q.
//
// Included only by flash_isa_*.cpp, after flash_tiles.h and flash_forward_kernel.h (see there).
#pragma once

// D_i = dO_i · O_i for the T rows of one (batch, query head), summed as the gemm sums each element of dP = dO·Vᵀ:
// in order over the head dim, one vector multiply-add per step (fused where the gemm's are), a row in each lane. A
// row that sees one key has O = V_j exactly, and then dP_ij − D_i is exactly 0, as it is mathematically; summed any
// other way (a scalar loop, whose products the compiler vectorizes and rounds apart from the adds) the two differ
// by a rounding residue, |dO|·|V|·ulp, that dK and dQ would add up over every such row.
inline void backward_row_dots(const core::Problem& p, std::int64_t b, std::int64_t n, float* d_sum, float* ws) {
  const core::Dims& d = p.dims;
  const RowDotsScratch at(d);
  const int hv = int(d.Hv);
  float* o_t = ws + at.o_t;  // [Hv][kLanes] of the layout's [Hv][kMaxLanes]
  float* d_o_t = ws + at.d_o_t;
  float* tmp = ws + at.tmp;
  float sums[kLanes];
  const std::int64_t q_len = p.q_len(b);
  for (std::int64_t i0 = 0; i0 < d.T; i0 += kLanes) {
    // Padded rows (past the query length) have P = 0: their D is never used, and is 0.
    const int rows = int(std::clamp<std::int64_t>(q_len - i0, 0, kLanes));
    vf sum{};
    if (rows > 0) {
      load_transposed(p.o, b, i0, n, rows, hv, kLanes, 1.0f, o_t, kLanes, tmp);
      load_transposed(p.d_o, b, i0, n, rows, hv, kLanes, 1.0f, d_o_t, kLanes, tmp);
      for (int h = 0; h < hv; ++h) sum += load(d_o_t + h * kLanes) * load(o_t + h * kLanes);
    }
    store(sums, sum);
    for (std::int64_t r = 0; r < std::min<std::int64_t>(kLanes, d.T - i0); ++r) d_sum[i0 + r] = sums[r];
  }
}

inline void backward_key_block(const core::Problem& p, const float* d_sum, const KeyBlock& blk, float* ws) {
  const core::Dims& d = p.dims;
  const KeyScratch at(d);
  const std::int64_t b = blk.b, kh = blk.kh, s0 = blk.s0;
  const int bc = int(blk.s1 - blk.s0);
  const int keys_vec = int(round_up(bc, kLanes));  // key columns of the score tile (whole vectors)
  const int hqk = int(d.Hqk), hv = int(d.Hv);
  const int hqk_vec = int(round_up(hqk, kLanes)), hv_vec = int(round_up(hv, kLanes));
  const std::int64_t hqk_ld = round_up(d.Hqk, kMaxLanes), hv_ld = round_up(d.Hv, kMaxLanes);
  const bool capped = p.softcap > 0.0f;

  float* kt = ws + at.kt;
  float* vt = ws + at.vt;
  float* qbuf = ws + at.qbuf;
  float* dobuf = ws + at.dobuf;
  float* s = ws + at.s;
  float* dp = ws + at.dp;
  float* th = capped ? ws + at.tanh : nullptr;
  float* dk = ws + at.dk;
  float* dv = ws + at.dv;
  float* lse = ws + at.lse;
  float* dsum = ws + at.dsum;
  float* tmp = ws + at.tmp;
  auto* begin = reinterpret_cast<std::int64_t*>(ws + at.begin);
  auto* end = reinterpret_cast<std::int64_t*>(ws + at.end);

  // Kᵀ (with the scale folded in) and Vᵀ once per task; every query block of every head of the group reuses them.
  load_transposed(p.k, b, s0, kh, bc, hqk, keys_vec, p.scale, kt, kBc, tmp);
  load_transposed(p.v, b, s0, kh, bc, hv, keys_vec, 1.0f, vt, kBc, tmp);
  std::fill(dk, dk + bc * hqk_ld, 0.0f);
  std::fill(dv, dv + bc * hv_ld, 0.0f);

  const std::int64_t q_len = p.q_len(b);
  for (std::int64_t n = kh * d.group(); n < (kh + 1) * d.group(); ++n) {
    const ElementwiseMods mods(p, b, n);
    for (std::int64_t i0 = 0; i0 < q_len; i0 += kBr) {
      const int rows = int(std::min<std::int64_t>(kBr, q_len - i0));
      const BlockKeys keys = block_keys(p, b, i0, rows, begin, end);
      if (keys.any_end <= s0 || keys.any_begin >= s0 + bc) continue;  // no row of this block sees these keys
      const bool whole = keys.all_begin <= s0 && s0 + bc <= keys.all_end;

      load_rows(p.q, b, i0, n, rows, hqk, hqk_vec, qbuf, hqk_ld);
      load_rows(p.d_o, b, i0, n, rows, hv, hv_vec, dobuf, hv_ld);
      for (int r = 0; r < rows; ++r) {
        lse[r] = static_cast<const float*>(p.lse.data)[core::offset_of(p.lse, b, n, i0 + r)];
        dsum[r] = d_sum[(b * d.N + n) * d.T + i0 + r];
      }

      // S = Q · (scale·Kᵀ), rows layout: keys fill the vector lanes.
      Gemm sg;
      sg.M = rows, sg.N = keys_vec, sg.K = hqk;
      sg.a = qbuf, sg.a_m = hqk_ld, sg.a_k = 1;
      sg.b = kt, sg.ldb = kBc;
      sg.c = s, sg.ldc = kBc;
      gemm(sg);
      if (capped) softcap_tile(s, kBc, rows, keys_vec, p.softcap, th);
      for (int r = 0; r < rows; ++r) {
        float* row = s + r * kBc;
        mods.apply(i0 + r, s0, s0 + bc, row);
        if (whole)
          mask_row(row, keys_vec, 0, bc);  // only the padding keys
        else
          mask_row(row, keys_vec, int(std::clamp<std::int64_t>(begin[r] - s0, 0, bc)),
                   int(std::clamp<std::int64_t>(end[r] - s0, 0, bc)));
        const vf vl = splat(lse[r]);
        for (int c = 0; c < keys_vec; c += kLanes) store(row + c, probs_from_lse(load(row + c), vl));
      }

      // dV += Pᵀ · dO (Pᵀ read out of the P tile: a_m = 1, a_k = Bc).
      Gemm dvg;
      dvg.M = bc, dvg.N = hv_vec, dvg.K = rows;
      dvg.a = s, dvg.a_m = 1, dvg.a_k = kBc;
      dvg.b = dobuf, dvg.ldb = hv_ld;
      dvg.c = dv, dvg.ldc = hv_ld;
      dvg.init = Init::accumulate;
      gemm(dvg);

      // dP = dO · Vᵀ, then dS in place.
      Gemm dpg;
      dpg.M = rows, dpg.N = keys_vec, dpg.K = hv;
      dpg.a = dobuf, dpg.a_m = hv_ld, dpg.a_k = 1;
      dpg.b = vt, dpg.ldb = kBc;
      dpg.c = dp, dpg.ldc = kBc;
      gemm(dpg);
      for (int r = 0; r < rows; ++r) {
        const vf vd = splat(dsum[r]);
        for (int c = 0; c < keys_vec; c += kLanes)
          store(dp + r * kBc + c, score_grad(load(s + r * kBc + c), load(dp + r * kBc + c), vd,
                                             capped ? th + r * kBc + c : nullptr));
      }

      // dK += dSᵀ · Q (the scale is applied once, at the end).
      Gemm dkg;
      dkg.M = bc, dkg.N = hqk_vec, dkg.K = rows;
      dkg.a = dp, dkg.a_m = 1, dkg.a_k = kBc;
      dkg.b = qbuf, dkg.ldb = hqk_ld;
      dkg.c = dk, dkg.ldc = hqk_ld;
      dkg.init = Init::accumulate;
      gemm(dkg);
    }
  }

  for (int j = 0; j < bc; ++j) {
    for (int c = 0; c < hqk; ++c) tmp[c] = dk[j * hqk_ld + c] * p.scale;
    core::store_row(p.dk.data, p.dtype, core::offset_of(p.dk, b, s0 + j, kh, 0), hqk, tmp);
    core::store_row(p.dv.data, p.dtype, core::offset_of(p.dv, b, s0 + j, kh, 0), hv, dv + j * hv_ld);
  }
}

inline void backward_query_block(const core::Problem& p, const float* d_sum, const QueryBlock& blk, float* ws) {
  const core::Dims& d = p.dims;
  const QueryScratch at(d);
  const std::int64_t b = blk.b, n = blk.n, i0 = blk.i0;
  const std::int64_t kh = n / d.group();
  const int rows = int(blk.i1 - blk.i0);
  const int cols = int(round_up(rows, kLanes));
  const int hqk = int(d.Hqk), hv = int(d.Hv);
  const int hqk_vec = int(round_up(hqk, kLanes));
  const std::int64_t acc_ld = round_up(std::max(d.Hqk, d.Hv), kMaxLanes);
  const std::int64_t hqk_ld = round_up(d.Hqk, kMaxLanes), hv_ld = round_up(d.Hv, kMaxLanes);
  const bool capped = p.softcap > 0.0f;

  float* qt = ws + at.qt;
  float* kbuf = ws + at.kbuf;
  float* vbuf = ws + at.vbuf;
  float* dot = ws + at.dot;
  float* st = ws + at.st;
  float* dpt = ws + at.dpt;
  float* th = capped ? ws + at.tanh : nullptr;
  float* dq = ws + at.acc;
  float* lse = ws + at.lse;
  float* dsum = ws + at.dsum;
  float* tmp = ws + at.tmp;
  auto* begin = reinterpret_cast<std::int64_t*>(ws + at.begin);
  auto* end = reinterpret_cast<std::int64_t*>(ws + at.end);
  auto* lo = reinterpret_cast<std::int32_t*>(ws + at.lo);
  auto* hi = reinterpret_cast<std::int32_t*>(ws + at.hi);

  load_transposed(p.q, b, i0, n, rows, hqk, cols, p.scale, qt, kBr, tmp);
  load_transposed(p.d_o, b, i0, n, rows, hv, cols, 1.0f, dot, kBr, tmp);
  for (int r = 0; r < cols; ++r) {  // padding columns: LSE −inf makes their P (and so dS) exactly 0
    lse[r] = r < rows ? static_cast<const float*>(p.lse.data)[core::offset_of(p.lse, b, n, i0 + r)] : -kInf;
    dsum[r] = r < rows ? d_sum[(b * d.N + n) * d.T + i0 + r] : 0.0f;
  }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < hqk_vec; ++c) dq[r * acc_ld + c] = 0.0f;

  const BlockKeys keys = block_keys(p, b, i0, rows, begin, end);
  const ElementwiseMods mods(p, b, n);
  for (std::int64_t s0 = keys.any_begin; s0 < keys.any_end; s0 += kBc) {
    const int bc = int(std::min<std::int64_t>(kBc, keys.any_end - s0));
    load_rows(p.k, b, s0, kh, bc, hqk, hqk_vec, kbuf, hqk_ld);  // broadcast for Sᵀ, loaded as vectors for dQ
    load_rows(p.v, b, s0, kh, bc, hv, hv, vbuf, hv_ld);          // only broadcast (for dPᵀ)

    Gemm sg;  // Sᵀ = K · (scale·Qᵀ)
    sg.M = bc, sg.N = cols, sg.K = hqk;
    sg.a = kbuf, sg.a_m = hqk_ld, sg.a_k = 1;
    sg.b = qt, sg.ldb = kBr;
    sg.c = st, sg.ldc = kBr;
    gemm(sg);
    if (capped) softcap_tile(st, kBr, bc, cols, p.softcap, th);
    if (mods.any()) apply_mods_columns(mods, st, i0, rows, s0, bc, tmp);
    if (!(keys.all_begin <= s0 && s0 + bc <= keys.all_end))
      mask_block_columns(st, s0, bc, rows, cols, begin, end, lo, hi);

    Gemm dpg;  // dPᵀ = V · dOᵀ
    dpg.M = bc, dpg.N = cols, dpg.K = hv;
    dpg.a = vbuf, dpg.a_m = hv_ld, dpg.a_k = 1;
    dpg.b = dot, dpg.ldb = kBr;
    dpg.c = dpt, dpg.ldc = kBr;
    gemm(dpg);

    for (int c = 0; c < cols; c += kLanes) {
      const vf vl = load(lse + c), vd = load(dsum + c);
      for (int j = 0; j < bc; ++j) {
        const vf pr = probs_from_lse(load(st + j * kBr + c), vl);
        store(dpt + j * kBr + c, score_grad(pr, load(dpt + j * kBr + c), vd, capped ? th + j * kBr + c : nullptr));
      }
    }

    Gemm dqg;  // dQ += dS · K, dS read out of the dSᵀ tile
    dqg.M = rows, dqg.N = hqk_vec, dqg.K = bc;
    dqg.a = dpt, dqg.a_m = 1, dqg.a_k = kBr;
    dqg.b = kbuf, dqg.ldb = hqk_ld;
    dqg.c = dq, dqg.ldc = acc_ld;
    dqg.init = Init::accumulate;
    gemm(dqg);
  }

  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < hqk; ++c) tmp[c] = dq[r * acc_ld + c] * p.scale;
    core::store_row(p.dq.data, p.dtype, core::offset_of(p.dq, b, i0 + r, n, 0), hqk, tmp);
  }
}
