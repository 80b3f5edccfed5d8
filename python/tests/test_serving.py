"""attnlab.varlen_attention, paged_attention and append_kv on NumPy arrays (the CPU paths) against a float64 NumPy
reference that attends to each sequence on its own (include/attnlab/serving.h): lengths 0, 1, 7 and 113 in one
batch, GQA and MQA, causal from the bottom-right (the default) and the top-left, windows, softcap, attention sinks
and the LSE; paged caches of 16- and 256-row pages with pages out of order and shared; append_kv into contiguous and
paged caches, padded and packed, then attention over what it wrote; bad input raising attnlab.Error with the rule
and writing nothing. PyTorch CPU tensors where torch is installed, and a decode step on CUDA where it has a GPU
(skipped visibly elsewhere)."""
import math

import numpy as np
import pytest

import attnlab

CPU_PATHS = ["cpu-naive", "cpu-flash"]


def offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def reference(q, k, v, scale=None, causal=False, bottom_right=True, window=None, softcap=0.0, sink=None):
    """One sequence: q (T, N, H), k and v (S, K, H) → out (T, N, Hv), lse (N, T) natural log."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    t, n, h = q.shape
    s, kh = k.shape[0], k.shape[1]
    k = np.repeat(k, n // kh, axis=1)
    v = np.repeat(v, n // kh, axis=1)
    scale = 1.0 / math.sqrt(h) if scale is None else scale
    scores = np.einsum("tnh,snh->nts", q, k) * scale
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    shift = s - t if bottom_right else 0  # the diagonal: key i + shift for query i
    i = np.arange(t)[:, None] + shift
    j = np.arange(s)[None, :]
    visible = np.ones((t, s), dtype=bool)
    if causal:
        visible &= j <= i
    if window is not None:
        visible &= (j >= i - window[0]) & (j <= i + window[1])
    scores = np.where(visible[None], scores, -np.inf)
    logits = scores if sink is None else np.concatenate(
        [scores, np.broadcast_to(np.asarray(sink, np.float64)[:, None, None], (n, t, 1))], axis=-1)
    m = logits.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(logits - m)
    total = e.sum(axis=-1, keepdims=True)
    p = np.divide(e, total, out=np.zeros_like(e), where=total > 0)[..., :s]
    out = np.einsum("nts,snh->tnh", p, v)
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] > 0, np.log(total[..., 0]) + m[..., 0], -np.inf)
    return out, lse


def reference_batch(q, k, v, q_lens, kv_lens, **kw):
    cq, ck = offsets(q_lens), offsets(kv_lens)
    out = np.zeros(q.shape[:2] + (v.shape[-1],))
    lse = np.full((q.shape[1], q.shape[0]), -np.inf)
    for b in range(len(q_lens)):
        rows = slice(cq[b], cq[b + 1])
        o, l = reference(q[rows], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], **kw)
        out[rows], lse[:, rows] = o, l
    return out, lse


def draw(rng, rows, heads, h, dtype=np.float32):
    return rng.standard_normal((rows, heads, h)).astype(dtype)


def check(got, want, tol=2e-5):
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("path", CPU_PATHS)
@pytest.mark.parametrize("heads", [(4, 2), (6, 1), (2, 2)])
def test_varlen_matches_reference(path, heads):
    n, kh = heads
    rng = np.random.default_rng([n, kh])
    q_lens, kv_lens = [1, 7, 0, 113, 1], [1, 20, 5, 113, 0]
    q = draw(rng, sum(q_lens), n, 64)
    k, v = draw(rng, sum(kv_lens), kh, 64), draw(rng, sum(kv_lens), kh, 64)
    cq, ck = offsets(q_lens), offsets(kv_lens)
    for kw in [{}, {"causal": True}, {"causal": True, "bottom_right": False}, {"window": (5, 2)},
               {"softcap": 2.0, "scale": 0.4}]:
        call = dict(scale=kw.get("scale"), is_causal=kw.get("causal", False),
                    causal_align="bottom_right" if kw.get("bottom_right", True) else "top_left",
                    local_window_size=kw.get("window"), softcap=kw.get("softcap", 0.0))
        out, lse = attnlab.varlen_attention(q, k, v, cq, ck, max(q_lens), max(kv_lens), return_lse=True,
                                            implementation=path, **call)
        assert out.shape == q.shape and out.dtype == np.float32 and lse.shape == (n, q.shape[0])
        want, want_lse = reference_batch(q, k, v, q_lens, kv_lens, **kw)
        check(out, want)
        np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("path", CPU_PATHS)
def test_sinks_with_and_without_masks(path):
    rng = np.random.default_rng(19)
    q_lens, kv_lens = [3, 1, 9], [40, 0, 9]
    q, k, v = draw(rng, sum(q_lens), 4, 32), draw(rng, sum(kv_lens), 2, 32), draw(rng, sum(kv_lens), 2, 32)
    sinks = rng.standard_normal(4).astype(np.float32)
    for causal in (False, True):
        out, lse = attnlab.varlen_attention(q, k, v, offsets(q_lens), offsets(kv_lens), 9, 40, is_causal=causal,
                                            sinks=sinks, return_lse=True, implementation=path)
        want, want_lse = reference_batch(q, k, v, q_lens, kv_lens, causal=causal, sink=sinks)
        check(out, want)
        np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-5)  # a row with no key: LSE = its sink


def paged_copy(k, kv_lens, page_size, rng, spare_pages=3):
    """The packed keys of each sequence laid out in pages, handed out in a shuffled order: (cache, table)."""
    per_seq = max(1, max(-(-x // page_size) for x in kv_lens))
    pages = per_seq * len(kv_lens) + spare_pages
    cache = rng.standard_normal((pages, page_size) + k.shape[1:]).astype(k.dtype)  # junk outside the sequences
    order = rng.permutation(pages)
    table = order[:per_seq * len(kv_lens)].reshape(len(kv_lens), per_seq).astype(np.int32)
    ck = offsets(kv_lens)
    for b, n in enumerate(kv_lens):
        for j in range(n):
            cache[table[b, j // page_size], j % page_size] = k[ck[b] + j]
    return cache, table


@pytest.mark.parametrize("path", CPU_PATHS)
@pytest.mark.parametrize("page_size", [16, 256])
def test_paged_matches_packed(path, page_size):
    rng = np.random.default_rng(page_size)
    q_lens, kv_lens = [1, 1, 4, 1], [300, 1, 70, 0]
    q = draw(rng, sum(q_lens), 8, 64)
    k, v = draw(rng, sum(kv_lens), 2, 64), draw(rng, sum(kv_lens), 2, 64)
    k_cache, table = paged_copy(k, kv_lens, page_size, np.random.default_rng(1))
    v_cache, _ = paged_copy(v, kv_lens, page_size, np.random.default_rng(1))
    seqlens = np.array(kv_lens, np.int32)
    for causal in (False, True):
        got = attnlab.paged_attention(q, k_cache, v_cache, table, seqlens, offsets(q_lens), 4, is_causal=causal,
                                      implementation=path)
        check(got, reference_batch(q, k, v, q_lens, kv_lens, causal=causal)[0])
    # Two sequences sharing a cache's pages (a common prefix): the same table row twice.
    shared = np.stack([table[0], table[0]])
    got = attnlab.paged_attention(q[:2], k_cache, v_cache, shared, np.array([300, 17], np.int32),
                                  offsets([1, 1]), 1, implementation=path)
    want = reference_batch(q[:2], np.concatenate([k[:300], k[:17]]), np.concatenate([v[:300], v[:17]]), [1, 1],
                           [300, 17])[0]
    check(got, want)


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("packed_new", [False, True])
def test_append_then_attend(paged, packed_new):
    rng = np.random.default_rng([paged, packed_new])
    b, kh, h, page_size = 3, 2, 32, 16
    old_lens = np.array([5, 0, 31], np.int32)
    new_lens = [2, 3, 1] if packed_new else [2, 2, 2]
    old = [draw(rng, int(x), kh, h) for x in old_lens]
    new_k = [draw(rng, x, kh, h) for x in new_lens]
    new_v = [draw(rng, x, kh, h) for x in new_lens]
    if paged:
        pages_per_seq = 3
        k_cache = np.zeros((b * pages_per_seq + 1, page_size, kh, h), np.float32)
        table = np.random.default_rng(2).permutation(b * pages_per_seq + 1)[:b * pages_per_seq]
        table = table.reshape(b, pages_per_seq).astype(np.int32)
        put = lambda cache, s, j, row: cache.__setitem__((table[s, j // page_size], j % page_size), row)
    else:
        k_cache = np.zeros((b, 48, kh, h), np.float32)
        table = None
        put = lambda cache, s, j, row: cache.__setitem__((s, j), row)
    v_cache = np.zeros_like(k_cache)
    for s in range(b):
        for j in range(old_lens[s]):
            put(k_cache, s, j, old[s][j])
            put(v_cache, s, j, old[s][j] * 2)
    if packed_new:
        args = dict(cu_seqlens_new=offsets(new_lens))
        kn, vn = np.concatenate(new_k), np.concatenate(new_v)
    else:
        args = {}
        kn, vn = np.stack(new_k), np.stack(new_v)
    attnlab.append_kv(k_cache, v_cache, kn, vn, old_lens, block_table=table, **args)
    seqlens = old_lens + np.array(new_lens, np.int32)
    q = draw(rng, b, 4, h)
    keys = np.concatenate([np.concatenate([old[s], new_k[s]]) for s in range(b)])
    values = np.concatenate([np.concatenate([old[s] * 2, new_v[s]]) for s in range(b)])
    want = reference_batch(q, keys, values, [1] * b, list(seqlens), causal=True)[0]
    if paged:
        got = attnlab.paged_attention(q, k_cache, v_cache, table, seqlens, offsets([1] * b), 1, is_causal=True)
    else:
        # The contiguous cache as packed keys: each sequence's first seqlens[b] rows.
        kp = np.concatenate([k_cache[s, :seqlens[s]] for s in range(b)])
        vp = np.concatenate([v_cache[s, :seqlens[s]] for s in range(b)])
        got = attnlab.varlen_attention(q, kp, vp, offsets([1] * b), offsets(seqlens), 1, int(seqlens.max()),
                                       is_causal=True)
    check(got, want)


def test_bad_input_raises_with_the_rule_and_writes_nothing():
    rng = np.random.default_rng(23)
    q, k, v = draw(rng, 4, 2, 32), draw(rng, 10, 2, 32), draw(rng, 10, 2, 32)
    with pytest.raises(attnlab.Error, match="cu_seqlens_q"):
        attnlab.varlen_attention(q, k, v, np.array([0, 3, 2, 4], np.int32), offsets([3, 3, 4]), 3, 4)
    with pytest.raises(attnlab.Error, match="causal_align"):
        attnlab.varlen_attention(q, k, v, offsets([4]), offsets([10]), 4, 10, is_causal=True, causal_align="up")
    k_cache = np.zeros((4, 16, 2, 32), np.float32)
    with pytest.raises(attnlab.Error, match="block_table"):
        attnlab.paged_attention(q[:1], k_cache, k_cache, np.array([[7]], np.int32), np.array([3], np.int32),
                                offsets([1]), 1)
    cache = np.zeros((1, 8, 2, 32), np.float32)
    before = cache.copy()
    with pytest.raises(attnlab.Error, match="capacity|cache"):
        attnlab.append_kv(cache, cache.copy(), k[None, :3], v[None, :3], np.array([6], np.int32))
    assert np.array_equal(cache, before)


def test_torch_cpu():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: its tests are skipped")
    rng = np.random.default_rng(29)
    q_lens, kv_lens = [2, 5], [9, 5]
    q, k, v = draw(rng, 7, 4, 64), draw(rng, 14, 2, 64), draw(rng, 14, 2, 64)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    got = attnlab.varlen_attention(tq, tk, tv, torch.tensor(offsets(q_lens)), torch.tensor(offsets(kv_lens)), 5, 9,
                                   is_causal=True)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    check(got.numpy(), reference_batch(q, k, v, q_lens, kv_lens, causal=True)[0])


@pytest.mark.parametrize("paged", [False, True])
def test_torch_cuda_decode_step(paged):
    """One decode step on the GPU (bf16, Hqk 128, GQA 8/2): append each sequence's new token, then attend with it
    against its cache, on torch's current stream; against the float64 reference of the same bf16 values."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: its tests are skipped")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: the GPU serving test is skipped")
    rng = np.random.default_rng([paged])
    b, n, kh, h, page_size = 3, 8, 2, 128, 16
    old_lens = np.array([1000, 0, 37], np.int32)
    bf16 = lambda x: torch.from_numpy(x).to("cuda", torch.bfloat16)
    old = [draw(rng, int(x), kh, h) for x in old_lens]
    old_v = [draw(rng, int(x), kh, h) for x in old_lens]
    new_k, new_v, q = draw(rng, b, kh, h), draw(rng, b, kh, h), draw(rng, b, n, h)
    if paged:
        pages_per_seq = 64
        table = np.random.default_rng(5).permutation(b * pages_per_seq).reshape(b, pages_per_seq).astype(np.int32)
        k_cache = np.zeros((b * pages_per_seq, page_size, kh, h), np.float32)
        v_cache = np.zeros_like(k_cache)
        for s in range(b):
            for j in range(old_lens[s]):
                k_cache[table[s, j // page_size], j % page_size] = old[s][j]
                v_cache[table[s, j // page_size], j % page_size] = old_v[s][j]
    else:
        table = None
        k_cache = np.zeros((b, 1024, kh, h), np.float32)
        v_cache = np.zeros_like(k_cache)
        for s in range(b):
            k_cache[s, :old_lens[s]], v_cache[s, :old_lens[s]] = old[s], old_v[s]
    tk, tv = bf16(k_cache), bf16(v_cache)
    seqlens = torch.tensor(old_lens, device="cuda")
    t_table = None if table is None else torch.tensor(table, device="cuda")
    attnlab.append_kv(tk, tv, bf16(new_k[:, None]), bf16(new_v[:, None]), seqlens, block_table=t_table)
    seqlens += 1
    cu_q = torch.arange(b + 1, dtype=torch.int32, device="cuda")
    if paged:
        got = attnlab.paged_attention(bf16(q), tk, tv, t_table, seqlens, cu_q, 1, is_causal=True)
    else:
        lens = (old_lens + 1).tolist()
        kp = torch.cat([tk[s, :lens[s]] for s in range(b)])
        vp = torch.cat([tv[s, :lens[s]] for s in range(b)])
        cu_k = torch.tensor(offsets(lens), device="cuda")
        got = attnlab.varlen_attention(bf16(q), kp, vp, cu_q, cu_k, 1, max(lens), is_causal=True)
    assert got.is_cuda and got.dtype == torch.bfloat16
    as_f32 = lambda x: bf16(x).float().cpu().numpy()  # the reference sees the bf16 values the GPU saw
    keys = np.concatenate([np.concatenate([as_f32(old[s]), as_f32(new_k[s:s + 1])]) for s in range(b)])
    values = np.concatenate([np.concatenate([as_f32(old_v[s]), as_f32(new_v[s:s + 1])]) for s in range(b)])
    want = reference_batch(as_f32(q), keys, values, [1] * b, list(old_lens + 1), causal=True)[0]
    check(got.float().cpu().numpy(), want, tol=2e-2)
