"""attnlab.jax.dot_product_attention (the XLA FFI op) against jax.nn.dot_product_attention itself, on JAX's default
platform (CPU in CI, CUDA on a GPU machine): forward on odd shapes with GQA/MQA, causal and local windows, unbatched
inputs, under jit, jax.grad of all three inputs, bfloat16, each path of the platform by name, and the rules it
refuses; on a GPU also against JAX's cuDNN attention (implementation="cudnn"). Skipped visibly where JAX is not
installed."""
import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed: the JAX op's tests are skipped")
jnp = jax.numpy
aj = pytest.importorskip("attnlab.jax")
import attnlab  # noqa: E402


ON_GPU = jax.default_backend() == "gpu"
# On a GPU the arrays live there and the CUDA handler runs: the GPU paths, in bfloat16 (cudnn takes no float32).
PATHS = [None] + (["cuda-naive", "cudnn", "flash"] if ON_GPU else ["cpu-naive", "cpu-flash"])
DTYPE = jnp.bfloat16 if ON_GPU else jnp.float32
TOL = 2e-2 if ON_GPU else 2e-5


def draw(seed, b, t, s, n, k, h, dtype=DTYPE):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.standard_normal(shape), dtype)
                 for shape in ((b, t, n, h), (b, s, k, h), (b, s, k, h)))


def close(a, b, tol=TOL):
    assert not bool(jnp.isnan(a).any())
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=tol, rtol=tol)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", [(1, 1, 1, 2, 2, 64), (2, 113, 203, 4, 2, 64), (1, 203, 113, 4, 1, 32),
                                   (2, 64, 64, 2, 2, 128)])
def test_forward_matches_jax(path, shape):
    q, k, v = draw(sum(shape), *shape)
    want = jax.nn.dot_product_attention(*(x.astype(jnp.float32) for x in (q, k, v)))
    close(aj.dot_product_attention(q, k, v, implementation=path), want)
    if shape[1] == shape[2]:
        close(aj.dot_product_attention(q, k, v, is_causal=True, implementation=path),
              jax.nn.dot_product_attention(*(x.astype(jnp.float32) for x in (q, k, v)), is_causal=True))


def test_windows_unbatched_and_jit():
    q, k, v = draw(1, 2, 90, 90, 4, 2, 64)
    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    close(aj.dot_product_attention(q, k, v, local_window_size=(7, 3)),
          jax.nn.dot_product_attention(*f32, local_window_size=(7, 3)))
    close(aj.dot_product_attention(q, k, v, local_window_size=5, is_causal=True),
          jax.nn.dot_product_attention(*f32, local_window_size=5, is_causal=True))
    close(aj.dot_product_attention(q[0], k[0], v[0]), jax.nn.dot_product_attention(*(x[0] for x in f32)))
    fn = jax.jit(aj.dot_product_attention, static_argnames=("is_causal",))
    close(fn(q, k, v, is_causal=True), jax.nn.dot_product_attention(*f32, is_causal=True))


@pytest.mark.parametrize("causal", [False, True])
def test_grad_matches_jax(causal):
    q, k, v = draw(2, 2, 70, 70, 4, 1, 64)
    weights = jnp.asarray(np.random.default_rng(3).standard_normal((2, 70, 4, 64)), jnp.float32)

    def loss(fn):
        return lambda q, k, v: (fn(q, k, v, is_causal=causal).astype(jnp.float32) * weights).sum()

    got = jax.jit(jax.grad(loss(aj.dot_product_attention), argnums=(0, 1, 2)))(q, k, v)
    want = jax.grad(loss(jax.nn.dot_product_attention), argnums=(0, 1, 2))(*(x.astype(jnp.float32) for x in (q, k, v)))
    for g, w in zip(got, want):
        close(g, w, 5 * TOL)


@pytest.mark.skipif(not ON_GPU, reason="jax.nn.dot_product_attention(implementation='cudnn') needs JAX on a GPU")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_jax_cudnn_forward_and_grad(path, causal):
    """On the GPU, against JAX's own cuDNN attention in bfloat16, forward and jax.grad of all three inputs."""
    q, k, v = draw(11, 2, 256, 256, 8, 2, 128)
    weights = jnp.asarray(np.random.default_rng(12).standard_normal((2, 256, 8, 128)), jnp.float32)

    def cudnn(q, k, v, is_causal):
        return jax.nn.dot_product_attention(q, k, v, is_causal=is_causal, implementation="cudnn")

    def ours(q, k, v, is_causal):
        return aj.dot_product_attention(q, k, v, is_causal=is_causal, implementation=path)

    close(ours(q, k, v, causal), cudnn(q, k, v, causal))

    def loss(fn):
        return lambda q, k, v: (fn(q, k, v, causal).astype(jnp.float32) * weights).sum()

    if path == "flash":  # forward only: the gradient must fail with the rule, not return something
        with pytest.raises(jax.errors.JaxRuntimeError, match="forward only"):
            jax.block_until_ready(jax.jit(jax.grad(loss(ours), argnums=(0, 1, 2)))(q, k, v))
        return
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.grad(loss(cudnn), argnums=(0, 1, 2)))(q, k, v)
    for g, w in zip(got, want):
        scale = float(jnp.abs(w.astype(jnp.float32)).max())
        close(g.astype(jnp.float32) / scale, w.astype(jnp.float32) / scale, 5 * TOL)


def test_bfloat16():
    q, k, v = draw(4, 1, 64, 80, 2, 2, 64, dtype=jnp.bfloat16)
    got = aj.dot_product_attention(q, k, v)
    assert got.dtype == jnp.bfloat16 and got.shape == (1, 64, 2, 64)
    want = jax.nn.dot_product_attention(*(x.astype(jnp.float32) for x in (q, k, v)))
    close(got, want, 2e-2)


def test_bias_mask_and_lengths_match_jax():
    q, k, v = draw(6, 2, 50, 70, 4, 2, 64)
    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    rng = np.random.default_rng(8)
    bias = jnp.asarray(rng.standard_normal((1, 4, 50, 70)), jnp.float32)
    close(aj.dot_product_attention(q, k, v, bias=bias), jax.nn.dot_product_attention(*f32, bias=bias))
    bias2 = jnp.asarray(rng.standard_normal((50, 70)), jnp.float32)  # fewer leading dimensions broadcast too
    close(aj.dot_product_attention(q, k, v, bias=bias2), jax.nn.dot_product_attention(*f32, bias=bias2))
    mask = jnp.asarray(rng.random((2, 1, 50, 70)) > 0.3).at[..., 0].set(True)  # every row keeps a key
    close(aj.dot_product_attention(q, k, v, mask=mask), jax.nn.dot_product_attention(*f32, mask=mask))
    kv_lens = jnp.asarray([70, 33], jnp.int32)
    close(aj.dot_product_attention(q, k, v, key_value_seq_lengths=kv_lens),
          jax.nn.dot_product_attention(*f32, key_value_seq_lengths=kv_lens))
    # Query lengths: the valid rows as jax computes them; attnlab's padded rows are 0 (docs/design.md §2).
    q_lens = jnp.asarray([50, 17], jnp.int32)
    got = aj.dot_product_attention(q, k, v, query_seq_lengths=q_lens, key_value_seq_lengths=kv_lens)
    want = jax.nn.dot_product_attention(*f32, query_seq_lengths=q_lens, key_value_seq_lengths=kv_lens)
    close(got[0], want[0])
    close(got[1, :17], want[1, :17])
    assert float(jnp.abs(got[1, 17:].astype(jnp.float32)).max()) == 0.0


def test_grad_with_a_bias_that_takes_none():
    q, k, v = draw(7, 1, 40, 40, 2, 2, 64)
    bias = jnp.asarray(np.random.default_rng(9).standard_normal((40, 40)), jnp.float32)

    def loss(fn, b):
        return lambda q, k, v: fn(q, k, v, bias=b, is_causal=True).astype(jnp.float32).sum()

    got = jax.grad(loss(aj.dot_product_attention, bias), argnums=(0, 1, 2))(q, k, v)
    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    want = jax.grad(loss(jax.nn.dot_product_attention, bias), argnums=(0, 1, 2))(*f32)
    for g, w in zip(got, want):
        close(g, w, 5 * TOL)
    with pytest.raises(attnlab.Error, match="bias takes no gradient"):
        jax.grad(lambda b: aj.dot_product_attention(q, k, v, bias=b).astype(jnp.float32).sum())(bias)


def test_refusals_name_the_rule():
    q, k, v = draw(5, 1, 8, 8, 2, 2, 64)
    with pytest.raises(Exception, match="no-such-path"):
        aj.dot_product_attention(q, k, v, implementation="no-such-path").block_until_ready()
    with pytest.raises(attnlab.Error, match="JAX op"):
        attnlab.dot_product_attention(q, k, v)
