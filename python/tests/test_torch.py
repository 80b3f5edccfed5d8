"""attnlab.torch (the torch.library op) against torch.nn.functional.scaled_dot_product_attention: forward and
autograd on CPU (and CUDA where there is a GPU), GQA, causal, torch's (B, N, T, H) layout read in place, bfloat16,
under torch.compile (the fake implementation), and the rules it refuses. Skipped visibly where PyTorch is not
installed."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the PyTorch op's tests are skipped")
at = pytest.importorskip("attnlab.torch")
import attnlab  # noqa: E402

F = torch.nn.functional
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def draw(seed, b, n, t, s, k, h, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=g).to(device=device, dtype=dtype).requires_grad_()
    return make(b, n, t, h), make(b, k, s, h), make(b, k, s, h)


def reference(q, k, v, causal):
    rep = q.shape[1] // k.shape[1]
    k, v = (x.float().repeat_interleave(rep, dim=1) for x in (k, v))
    return F.scaled_dot_product_attention(q.float(), k, v, is_causal=causal)


# (B, N, T, S, K, H), causal: torch's is_causal is the top-left mask, compared here where T = S.
CASES = [((1, 2, 1, 1, 2, 64), False), ((1, 2, 1, 1, 2, 64), True), ((2, 4, 113, 113, 2, 64), False),
         ((2, 4, 113, 113, 2, 64), True), ((1, 4, 64, 200, 1, 128), False)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,causal", CASES)
def test_forward_and_grad_match_torch(device, shape, causal):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    q, k, v = draw(sum(shape), *shape, dtype=dtype, device=device)
    got = at.scaled_dot_product_attention(q, k, v, is_causal=causal)
    want = reference(q, k, v, causal)
    assert got.shape == q.shape[:3] + (v.shape[3],) and got.dtype == q.dtype
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    w = torch.randn_like(want)
    (gq, gk, gv) = torch.autograd.grad((got.float() * w).sum(), (q, k, v))
    (rq, rk, rv) = torch.autograd.grad((want * w).sum(), (q, k, v))
    for g, r in ((gq, rq), (gk, rk), (gv, rv)):
        torch.testing.assert_close(g.float(), r.float(), atol=10 * tol, rtol=10 * tol)


def test_under_torch_compile():
    q, k, v = draw(7, 2, 4, 64, 64, 2, 64)
    fn = torch.compile(lambda q, k, v: at.scaled_dot_product_attention(q, k, v, is_causal=True), fullgraph=True)
    torch.testing.assert_close(fn(q, k, v), reference(q, k, v, True), atol=2e-5, rtol=2e-5)


def test_jax_layout_and_refusals():
    q, k, v = draw(9, 1, 2, 16, 16, 2, 64)
    got = at.dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    torch.testing.assert_close(got.transpose(1, 2), reference(q, k, v, True), atol=2e-5, rtol=2e-5)
    with pytest.raises(attnlab.Error, match="attn_mask or dropout"):
        at.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    with pytest.raises(attnlab.Error, match="no-such-path"):
        at.scaled_dot_product_attention(q, k, v, implementation="no-such-path")
