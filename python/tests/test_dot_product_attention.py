"""attnlab.dot_product_attention on NumPy arrays (CPU paths) against a float64 NumPy reference of
docs/design.md §2: scale, bias, boolean mask, causal from the top-left, (left, right) windows, per-batch lengths
(padded query rows give 0), GQA/MQA, unbatched inputs, strided views; plus attnlab.paths() and errors. PyTorch
arrays where torch is installed (skipped visibly elsewhere)."""
import math

import numpy as np
import pytest

import attnlab


def reference(q, k, v, bias=None, mask=None, scale=None, causal=False, window=None, q_lens=None, kv_lens=None):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    k = np.repeat(k, n // kh, axis=2)
    v = np.repeat(v, n // kh, axis=2)
    scale = 1.0 / math.sqrt(h) if scale is None else scale
    scores = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if bias is not None:
        scores = scores + np.broadcast_to(np.asarray(bias, dtype=np.float64), scores.shape)
    visible = np.ones(scores.shape, dtype=bool)
    if mask is not None:
        visible &= np.broadcast_to(np.asarray(mask, dtype=bool), scores.shape)
    i = np.arange(t)[:, None]
    j = np.arange(s)[None, :]
    if causal:
        visible &= (j <= i)[None, None]
    if window is not None:
        left, right = window
        visible &= ((j >= i - left) & (j <= i + right))[None, None]
    rows_valid = np.ones((b, t), dtype=bool)
    if q_lens is not None:
        rows_valid = np.arange(t)[None, :] < np.asarray(q_lens)[:, None]
    if kv_lens is not None:
        visible &= (np.arange(s)[None, :] < np.asarray(kv_lens)[:, None])[:, None, None, :]
    scores = np.where(visible, scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(scores - m)
    denom = p.sum(axis=-1, keepdims=True)
    p = np.divide(p, denom, out=np.zeros_like(p), where=denom > 0)
    out = np.einsum("bnts,bsnh->btnh", p, v)
    return out * rows_valid[:, :, None, None]


def draw(rng, b, t, s, n, k, h, hv=None, dtype=np.float32):
    hv = h if hv is None else hv
    return (rng.standard_normal((b, t, n, h)).astype(dtype), rng.standard_normal((b, s, k, h)).astype(dtype),
            rng.standard_normal((b, s, k, hv)).astype(dtype))


CPU_PATHS = ["cpu-naive", "cpu-flash"]


def check(got, want, tol=2e-5):
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


def test_paths_lists_the_cpu_paths():
    names = {p["name"]: p for p in attnlab.paths()}
    for name in CPU_PATHS:
        assert names[name]["available"], names[name]
        assert names[name]["device"] == "cpu"
        assert names[name]["summary"]
    for p in names.values():
        assert p["available"] or p["unavailable"], p


@pytest.mark.parametrize("path", CPU_PATHS)
@pytest.mark.parametrize("shape", [(1, 1, 1, 2, 2, 64), (2, 113, 203, 4, 2, 64), (1, 203, 113, 4, 1, 32),
                                   (2, 7, 1, 2, 2, 128)])
def test_forward_matches_reference(path, shape):
    rng = np.random.default_rng(list(shape))
    b, t, s, n, k, h = shape
    q, kk, v = draw(rng, b, t, s, n, k, h)
    got = attnlab.dot_product_attention(q, kk, v, implementation=path)
    assert got.shape == (b, t, n, h) and got.dtype == np.float32 and isinstance(got, np.ndarray)
    check(got, reference(q, kk, v))
    if t <= s:  # top-left causal: every row sees key 0
        check(attnlab.dot_product_attention(q, kk, v, is_causal=True, implementation=path),
              reference(q, kk, v, causal=True))


@pytest.mark.parametrize("path", CPU_PATHS)
def test_bias_mask_scale_window_lengths(path):
    rng = np.random.default_rng(7)
    q, k, v = draw(rng, 2, 50, 70, 4, 2, 64)
    bias = rng.standard_normal((1, 4, 50, 70)).astype(np.float32)
    got = attnlab.dot_product_attention(q, k, v, bias=bias, scale=0.3, implementation=path)
    check(got, reference(q, k, v, bias=bias, scale=0.3))
    mask = rng.random((2, 1, 50, 70)) > 0.3
    mask[..., 0] = True  # every row keeps a key
    check(attnlab.dot_product_attention(q, k, v, mask=mask, implementation=path), reference(q, k, v, mask=mask))
    bias2 = rng.standard_normal((50, 70)).astype(np.float32)  # fewer leading dimensions broadcast too
    check(attnlab.dot_product_attention(q, k, v, bias=bias2, implementation=path), reference(q, k, v, bias=bias2))
    check(attnlab.dot_product_attention(q, k, v, local_window_size=(5, 3), implementation=path),
          reference(q, k, v, window=(5, 3)))
    check(attnlab.dot_product_attention(q, k, v, local_window_size=4, is_causal=True, implementation=path),
          reference(q, k, v, window=(4, 4), causal=True))
    q_lens, kv_lens = np.array([50, 17], np.int32), np.array([70, 33], np.int32)
    check(attnlab.dot_product_attention(q, k, v, query_seq_lengths=q_lens, key_value_seq_lengths=kv_lens,
                                        implementation=path),
          reference(q, k, v, q_lens=q_lens, kv_lens=kv_lens))


def test_unbatched_strided_and_auto():
    rng = np.random.default_rng(3)
    q, k, v = draw(rng, 1, 33, 40, 2, 1, 64)
    got = attnlab.dot_product_attention(q[0], k[0], v[0])
    assert got.shape == (33, 2, 64)
    check(got, reference(q, k, v)[0])
    # (B, N, T, H) memory seen as (B, T, N, H): non-contiguous views are read in place.
    qt = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    check(attnlab.dot_product_attention(qt, k, v), reference(q, k, v))


def test_bad_input_raises_with_the_rule():
    rng = np.random.default_rng(5)
    q, k, v = draw(rng, 1, 8, 8, 3, 2, 64)  # N = 3 is not a multiple of K = 2
    with pytest.raises(attnlab.Error) as err:
        attnlab.dot_product_attention(q, k, v)
    assert "K" in str(err.value) or "heads" in str(err.value)
    assert err.value.code == 1  # invalid_argument
    q, k, v = draw(rng, 1, 8, 8, 2, 2, 64)
    with pytest.raises(attnlab.Error, match="no-such-path"):
        attnlab.dot_product_attention(q, k, v, implementation="no-such-path")
    with pytest.raises(attnlab.Error):
        attnlab.dot_product_attention(q.astype(np.float64), k, v)
    with pytest.raises(attnlab.Error, match="not supported here"):
        attnlab.dot_product_attention(q.tolist(), k, v)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_cpu(dtype):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: its tests are skipped")
    rng = np.random.default_rng(11)
    q, k, v = draw(rng, 2, 40, 60, 4, 2, 64)
    tq, tk, tv = (torch.from_numpy(x).to(getattr(torch, dtype)) for x in (q, k, v))
    got = attnlab.dot_product_attention(tq, tk, tv, is_causal=True)
    assert isinstance(got, torch.Tensor) and got.dtype == tq.dtype
    want = reference(*(x.float().numpy() for x in (tq, tk, tv)), causal=True)
    tol = 2e-5 if dtype == "float32" else 2e-2
    check(got.float().numpy(), want, tol)
