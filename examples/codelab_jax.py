#!/usr/bin/env python3
"""The codelab's cells in JAX with attnlab's JAX op beside jax.nn.dot_product_attention, printed as tables.

  python3 examples/codelab_jax.py [--repeats 50] [--sweep 128,256,512,1024,2048]

Cells: the device; Q, K, V in (B, T, N, H) = (4, 128, 8, 64); attention from scratch; jax.nn.dot_product_attention
(XLA, and cuDNN where the GPU has it); attnlab.jax.dot_product_attention (the library's choice and each path of
this machine); causal masking; timing side by side; a causal sequence sweep; MHA, GQA and MQA. Every output is
compared with the from-scratch version. On a machine without a GPU it runs the CPU paths and says what it skipped.
"""
import argparse
import math
import time

import jax
import jax.numpy as jnp

import attnlab
import attnlab.jax as aj


def table(title, headers, rows):
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("  " + "  ".join("-" * w for w in widths))
    for r in cells:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))


def naive_attention(q, k, v, causal=False):
    """The codelab's attention from scratch: scores, scale, (mask,) softmax, weighted sum."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    rep = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) * scale
    if causal:
        t, s = q.shape[1], k.shape[1]
        scores = jnp.where(jnp.tril(jnp.ones((t, s), bool)), scores, -jnp.inf)
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(scores, axis=-1), v)


def timed(fn, args, repeats):
    fn = jax.jit(fn)
    jax.block_until_ready(fn(*args))  # compile and warm up
    for _ in range(3):
        jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / repeats * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--sweep", default="128,256,512,1024,2048")
    args = ap.parse_args()

    on_gpu = jax.default_backend() == "gpu"
    table("1. The device", ["", ""], [("JAX", jax.__version__), ("backend", jax.default_backend()),
                                      ("devices", jax.devices()), ("attnlab", attnlab.__version__)])
    paths = [p for p in attnlab.paths() if p["available"] and p["device"] == ("cuda" if on_gpu else "cpu")]
    table("attnlab's paths here", ["path", "what it is"], [(p["name"], p["summary"][:90]) for p in paths])

    b, t, n, h = 4, 128, 8, 64
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    dtype = jnp.bfloat16 if on_gpu else jnp.float32  # the fused GPU kernels take 16-bit inputs
    q, k, v = (jax.random.normal(key, (b, t, n, h), dtype) for key in (k1, k2, k3))
    table("2. Attention inputs", ["array", "shape", "dtype", "layout"],
          [("Q", q.shape, q.dtype, "(B, T, N, H)"), ("K", k.shape, k.dtype, "(B, S, N, H)"),
           ("V", v.shape, v.dtype, "(B, S, N, H)")])

    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    reference = naive_attention(*f32)
    candidates = {"jax.nn (xla)": lambda q, k, v, c=False: jax.nn.dot_product_attention(
        q, k, v, is_causal=c, implementation="xla")}
    if on_gpu:
        candidates["jax.nn (cudnn)"] = lambda q, k, v, c=False: jax.nn.dot_product_attention(
            q, k, v, is_causal=c, implementation="cudnn")
    candidates["attnlab (auto)"] = lambda q, k, v, c=False: aj.dot_product_attention(q, k, v, is_causal=c)
    for p in paths:
        candidates[f"attnlab ({p['name']})"] = (lambda name: lambda q, k, v, c=False: aj.dot_product_attention(
            q, k, v, is_causal=c, implementation=name))(p["name"])

    def compare(causal):
        want = naive_attention(*f32, causal=causal)
        rows = []
        for name, fn in candidates.items():
            try:
                out = fn(q, k, v, causal).astype(jnp.float32)
                rows.append((name, out.shape, f"{float(jnp.abs(out - want).max()):.2e}"))
            except Exception as e:  # a path that refuses the case says why
                rows.append((name, "-", f"refused: {str(e).splitlines()[0][:80]}"))
        return rows

    table("3–5. From scratch vs fused: max |out − from-scratch|", ["implementation", "output shape", "max diff"],
          compare(False))
    table("6. Causal masking: max |out − from-scratch causal|", ["implementation", "output shape", "max diff"],
          compare(True))

    rows = [("from scratch", f"{timed(naive_attention, f32, args.repeats):.3f}")]
    for name, fn in candidates.items():
        try:
            rows.append((name, f"{timed(lambda q, k, v, fn=fn: fn(q, k, v, True), (q, k, v), args.repeats):.3f}"))
        except Exception as e:
            rows.append((name, f"refused: {str(e).splitlines()[0][:60]}"))
    table(f"7. Time per causal call at {(b, t, n, h)}, ms (jit, {args.repeats} calls)", ["implementation", "ms"],
          rows)

    sweep = [int(x) for x in args.sweep.split(",")]
    rows = []
    for length in sweep:
        qs, ks, vs = (jax.random.normal(key, (b, length, n, h), dtype) for key in (k1, k2, k3))
        row = [length]
        for name in ("jax.nn (xla)", "attnlab (auto)"):
            row.append(f"{timed(lambda q, k, v, fn=candidates[name]: fn(q, k, v, True), (qs, ks, vs), 10):.3f}")
        rows.append(row)
    table("8. Causal sequence sweep, ms per call", ["T", "jax.nn (xla)", "attnlab (auto)"], rows)

    rows = []
    for label, kv_heads in (("MHA", n), ("GQA", 2), ("MQA", 1)):
        kk, vv = k[:, :, :kv_heads], v[:, :, :kv_heads]
        want = naive_attention(q.astype(jnp.float32), kk.astype(jnp.float32), vv.astype(jnp.float32))
        got = aj.dot_product_attention(q, kk, vv).astype(jnp.float32)
        ref = jax.nn.dot_product_attention(q, kk, vv).astype(jnp.float32)
        rows.append((label, f"{n}/{kv_heads}", got.shape, f"{float(jnp.abs(got - want).max()):.2e}",
                     f"{float(jnp.abs(ref - want).max()):.2e}"))
    table("9. MHA, GQA, MQA (query heads / KV heads): max diff from scratch",
          ["", "heads", "output shape", "attnlab", "jax.nn"], rows)
    if not on_gpu:
        print("\nNo GPU here: the cuDNN rows and attnlab's GPU paths were skipped; run this on a GPU machine for them.")


if __name__ == "__main__":
    main()
