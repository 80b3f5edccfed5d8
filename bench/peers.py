#!/usr/bin/env python3
"""Peers of attnlab, timed on the same shapes and written in the same JSON rows (docs/design.md §4).

Runs whatever is installed: PyTorch SDPA (flash = FlashAttention-2, cudnn, efficient, math), JAX
(`jax.nn.dot_product_attention` with implementation xla and cudnn, and the codelab's naive function), and
TransformerEngine (`transformer_engine.pytorch.DotProductAttention`: `te` in bf16/f16, `te-fp8` under FP8 autocast
with the codelab's DelayedScaling recipe, for workloads whose dtype is e4m3). Where TransformerEngine is not
installed, its rows say so (ok false, note "TransformerEngine is not installed ..."), so a report shows it.
Shapes come from a workloads file shared with `attnlab bench --workloads` (bench/workloads.json), or from flags.

Timing follows the lab: CUDA events around back-to-back calls after warm-up, several groups, median/min/max of
the per-call time; several input sets rotated when they fit in L2. JAX has no events API: its groups are timed
with a host clock after block_until_ready (noted in each row).

  python3 bench/peers.py --workloads bench/workloads.json --out peers.json
  python3 bench/peers.py -B 4 -T 128 -N 8 -H 64 --dtype bf16 --peers torch-flash,torch-cudnn
  python3 bench/peers.py --workloads bench/sweep_te.json --peers jax-xla,jax-cudnn,te --out te-peers.jsonl
  python3 bench/peers.py --workloads bench/workloads_fp8.json --peers te,te-fp8,torch-cudnn --out fp8-peers.jsonl
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time

ALL_PEERS = ["torch-flash", "torch-cudnn", "torch-efficient", "torch-math", "jax-xla", "jax-cudnn", "jax-naive",
             "te", "te-fp8"]
TE_PEERS = ("te", "te-fp8")
TE_MISSING = "TransformerEngine is not installed"
FP8_DTYPES = ("e4m3",)
L2_BYTES = 50 * 1024 * 1024


def flops(w: dict) -> float:
    f = 2.0 * w["B"] * w["N"] * w["T"] * w["S"] * (w["Hqk"] + w["Hv"])  # Q·Kᵀ and P·V
    if w["causal"]:
        f /= 2.0
    return f * (2.5 if w.get("direction", "fwd") == "bwd" else 1.0)


def io_bytes(w: dict, elem: int) -> float:
    q = w["B"] * w["T"] * w["N"] * w["Hqk"]
    k = w["B"] * w["S"] * w["K"] * w["Hqk"]
    v = w["B"] * w["S"] * w["K"] * w["Hv"]
    o = w["B"] * w["T"] * w["N"] * w["Hv"]
    total = q + k + v + o
    if w.get("direction", "fwd") == "bwd":
        total = 2 * total + o  # read q k v o dO, write dq dk dv
    return float(total * elem)


def row(w: dict, peer: str, device: str, times_ms: list[float] | None, note: str, max_abs_err=None) -> dict:
    r = {
        "experiment": w.get("experiment", "bench"),
        "path": peer,
        "peer": True,
        "device": device,
        "dtype": w["dtype"],
        "B": w["B"], "T": w["T"], "S": w["S"], "N": w["N"], "K": w["K"], "Hqk": w["Hqk"], "Hv": w["Hv"],
        "causal": w["causal"],
        "window": None,
        "direction": w.get("direction", "fwd"),
        "ms_median": None, "ms_min": None, "ms_max": None, "tflops": None, "gbps": None,
        "max_abs_err": max_abs_err,
        "ok": times_ms is not None,
        "note": note,
    }
    if times_ms:
        med = statistics.median(times_ms)
        elem = {"f32": 4, "e4m3": 1}.get(w["dtype"], 2)
        r.update(ms_median=med, ms_min=min(times_ms), ms_max=max(times_ms),
                 tflops=flops(w) / (med * 1e-3) / 1e12, gbps=io_bytes(w, elem) / (med * 1e-3) / 1e9)
    return r


# ------------------------------------------------------------------------------------------------------------------
# PyTorch
# ------------------------------------------------------------------------------------------------------------------
def torch_peer(w: dict, peer: str, args) -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    backend = {"torch-flash": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
               "torch-efficient": SDPBackend.EFFICIENT_ATTENTION, "torch-math": SDPBackend.MATH}[peer]
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[w["dtype"]]
    dev = torch.device("cuda")
    bwd = w.get("direction", "fwd") == "bwd"
    set_bytes = io_bytes(w, 4 if w["dtype"] == "f32" else 2)
    n_sets = max(1, min(8, math.ceil(2 * L2_BYTES / max(set_bytes, 1)))) if set_bytes < L2_BYTES else 1

    def make():
        # BTNH storage, viewed as (B, N, T, H) for SDPA: the layout attnlab uses.
        q = torch.randn(w["B"], w["T"], w["N"], w["Hqk"], device=dev, dtype=dtype).transpose(1, 2)
        k = torch.randn(w["B"], w["S"], w["K"], w["Hqk"], device=dev, dtype=dtype).transpose(1, 2)
        v = torch.randn(w["B"], w["S"], w["K"], w["Hv"], device=dev, dtype=dtype).transpose(1, 2)
        if bwd:
            for t in (q, k, v):
                t.requires_grad_(True)
        return q, k, v

    sets = [make() for _ in range(n_sets)]
    gqa = w["K"] != w["N"]

    def fwd(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=w["causal"], enable_gqa=gqa)

    try:
        with sdpa_kernel([backend]):
            if bwd:
                outs = []
                for q, k, v in sets:
                    o = fwd(q, k, v)
                    outs.append((o, torch.randn_like(o), (q, k, v)))

                def call(i):
                    o, g, inputs = outs[i % n_sets]
                    torch.autograd.grad(o, inputs, g, retain_graph=True)
            else:
                def call(i):
                    q, k, v = sets[i % n_sets]
                    fwd(q, k, v)
            times = time_cuda_events(call, args.warmup, args.repeats, args.groups)
    except Exception as e:  # an unsupported shape/backend is a row with ok=false, not a crash
        return row(w, peer, torch.cuda.get_device_name(), None, f"unsupported: {str(e).splitlines()[0][:160]}")
    return row(w, peer, torch.cuda.get_device_name(), times, f"torch {torch.__version__}; {n_sets} input set(s)")


def time_cuda_events(call, warmup: int, repeats: int, groups: int) -> list[float]:
    import torch
    # At least `warmup` calls and 200 ms of them, as the lab does: an idle GPU needs time to reach its clocks.
    i, t0 = 0, time.perf_counter()
    while i < warmup or (time.perf_counter() - t0 < 0.2 and i < 1000000):
        call(i)
        i += 1
    torch.cuda.synchronize()
    per_call = []
    for g in range(groups):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(repeats):
            call(i)
        stop.record()
        stop.synchronize()
        per_call.append(start.elapsed_time(stop) / repeats)
    return per_call


# ------------------------------------------------------------------------------------------------------------------
# JAX
# ------------------------------------------------------------------------------------------------------------------
def jax_peer(w: dict, peer: str, args) -> dict:
    import jax
    import jax.numpy as jnp

    if w.get("direction", "fwd") == "bwd":
        return row(w, peer, str(jax.devices()[0]), None, "backward not timed for JAX peers")
    dtype = {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16}[w["dtype"]]
    key = jax.random.PRNGKey(0)
    kq, kk, kv = jax.random.split(key, 3)
    q = jax.random.normal(kq, (w["B"], w["T"], w["N"], w["Hqk"]), dtype)
    k = jax.random.normal(kk, (w["B"], w["S"], w["K"], w["Hqk"]), dtype)
    v = jax.random.normal(kv, (w["B"], w["S"], w["K"], w["Hv"]), dtype)

    if peer == "jax-naive":
        def naive(q, k, v):  # the codelab's from-scratch version (MHA only)
            scale = 1.0 / math.sqrt(q.shape[-1])
            qt, kt, vt = (jnp.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))
            s = jnp.matmul(qt, jnp.transpose(kt, (0, 1, 3, 2))) * scale
            if w["causal"]:
                s = jnp.where(jnp.tril(jnp.ones((w["T"], w["S"]), bool)), s, -jnp.inf)
            return jnp.transpose(jnp.matmul(jax.nn.softmax(s, axis=-1), vt), (0, 2, 1, 3))
        if w["K"] != w["N"]:
            return row(w, peer, str(jax.devices()[0]), None, "the codelab's naive function is MHA only")
        fn = jax.jit(naive)
    else:
        impl = "xla" if peer == "jax-xla" else "cudnn"
        fn = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=w["causal"], implementation=impl))
    try:
        fn(q, k, v).block_until_ready()
        i, t0 = 0, time.perf_counter()
        while i < args.warmup or (time.perf_counter() - t0 < 0.2 and i < 100000):
            fn(q, k, v)
            i += 1
        fn(q, k, v).block_until_ready()
        per_call = []
        for _ in range(args.groups):
            t0 = time.perf_counter()
            for _ in range(args.repeats):
                out = fn(q, k, v)
            out.block_until_ready()
            per_call.append((time.perf_counter() - t0) * 1e3 / args.repeats)
    except Exception as e:
        return row(w, peer, str(jax.devices()[0]), None, f"unsupported: {str(e).splitlines()[0][:160]}")
    return row(w, peer, str(jax.devices()[0].device_kind), per_call, f"jax {jax.__version__}; host clock")


# ------------------------------------------------------------------------------------------------------------------
# TransformerEngine (its PyTorch API): the codelab's step 9 — DotProductAttention in bf16, and its FP8 path
# ------------------------------------------------------------------------------------------------------------------
_TE = None  # (transformer_engine.pytorch, transformer_engine.common.recipe, version), or why it cannot be used


def import_te():
    global _TE
    if _TE is None:
        try:
            import transformer_engine
            import transformer_engine.pytorch as te
            from transformer_engine.common import recipe
            _TE = (te, recipe, getattr(transformer_engine, "__version__", "?"))
        except ModuleNotFoundError as e:
            _TE = f"{TE_MISSING} ({e})"
        except Exception as e:  # installed but broken: a CUDA library missing, a torch version it was not built for
            _TE = f"TransformerEngine does not import: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return _TE


def gpu_name() -> str:
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except Exception:
        pass
    return "unknown"


def te_peer(w: dict, peer: str, args) -> dict:
    te_or_why = import_te()
    if isinstance(te_or_why, str):
        return row(w, peer, gpu_name(), None, te_or_why)
    te, recipe, version = te_or_why
    import torch

    if w.get("direction", "fwd") == "bwd":
        return row(w, peer, gpu_name(), None, "backward not timed for the TransformerEngine peers")
    fp8 = peer == "te-fp8"
    # te-fp8 gets bf16 inputs, as in the codelab: TE quantizes them itself under the autocast.
    dtype = torch.bfloat16 if fp8 else {"f16": torch.float16, "bf16": torch.bfloat16}[w["dtype"]]
    dev = torch.device("cuda")
    set_bytes = io_bytes(w, 2)
    n_sets = max(1, min(8, math.ceil(2 * L2_BYTES / max(set_bytes, 1)))) if set_bytes < L2_BYTES else 1
    note = f"TransformerEngine {version} DotProductAttention"
    try:
        kv_channels = w["Hqk"] if w["Hqk"] == w["Hv"] else (w["Hqk"], w["Hv"])
        attn = te.DotProductAttention(w["N"], kv_channels, num_gqa_groups=w["K"], attention_dropout=0.0,
                                      qkv_format="bshd", attn_mask_type="causal" if w["causal"] else "no_mask")
        # The layout attnlab uses, (B, T, N, H): TE's "bshd".
        dims = ((w["T"], w["N"], w["Hqk"]), (w["S"], w["K"], w["Hqk"]), (w["S"], w["K"], w["Hv"]))
        sets = [tuple(torch.randn(w["B"], n, h, d, device=dev, dtype=dtype) for n, h, d in dims) for _ in range(n_sets)]
        autocast = contextlib.nullcontext
        if fp8:
            # The codelab's recipe. fp8_dpa puts attention itself in FP8 (TE otherwise keeps it in bf16).
            kwargs = dict(margin=0, fp8_format=recipe.Format.HYBRID, amax_history_len=1024, amax_compute_algo="max")
            try:
                fp8_recipe = recipe.DelayedScaling(fp8_dpa=True, **kwargs)
            except TypeError:
                fp8_recipe = recipe.DelayedScaling(**kwargs)
                note += " (this TE has no fp8_dpa: attention may stay bf16)"
            if hasattr(te, "fp8_autocast"):
                autocast = lambda: te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe)  # noqa: E731
            else:
                autocast = lambda: te.autocast(enabled=True, recipe=fp8_recipe)  # noqa: E731
            note += " under FP8 autocast (DelayedScaling HYBRID, margin 0, history 1024, max; bf16 in and out)"
        with torch.no_grad():
            max_abs_err = None
            if fp8:
                # The codelab's comparison, after a few recipe steps (one per autocast region, as in a training loop).
                q, k, v = sets[0]
                ref = attn(q, k, v)
                for _ in range(4):
                    with autocast():
                        out = attn(q, k, v)
                max_abs_err = float((ref.float() - out.float()).abs().max())
                note += f"; max |bf16 - fp8| after 4 steps {max_abs_err:.3g}"

            def call(i):
                q, k, v = sets[i % n_sets]
                with autocast():  # one recipe step per call for te-fp8 (a no-op context for te)
                    attn(q, k, v)

            times = time_cuda_events(call, args.warmup, args.repeats, args.groups)
    except Exception as e:  # a shape or a GPU TE cannot run is a row with ok=false, not a crash
        return row(w, peer, gpu_name(), None, f"unsupported: {str(e).splitlines()[0][:160]}")
    return row(w, peer, torch.cuda.get_device_name(), times, f"{note}; {n_sets} input set(s)", max_abs_err)


# ------------------------------------------------------------------------------------------------------------------
def load_workloads(args) -> list[dict]:
    if args.workloads:
        with open(args.workloads) as f:
            spec = json.load(f)
        items = spec["workloads"] if isinstance(spec, dict) else spec
    else:
        items = [dict(B=args.batch, T=args.seq, S=args.kv_seq or args.seq, N=args.heads, K=args.kv_heads or args.heads,
                      Hqk=args.head_dim, Hv=args.head_dim, dtype=args.dtype, causal=args.causal,
                      direction=args.direction)]
    out = []
    for it in items:
        w = dict(it)
        w.setdefault("S", w["T"])
        w.setdefault("K", w["N"])
        w.setdefault("Hv", w["Hqk"])
        w.setdefault("causal", False)
        w.setdefault("direction", "fwd")
        out.append(w)
    return out


def available_peers() -> list[str]:
    have = []
    try:
        import torch
        if torch.cuda.is_available():
            have += [p for p in ALL_PEERS if p.startswith("torch-")]
            # TransformerEngine runs on PyTorch: asked for wherever PyTorch has a GPU, so that its rows say plainly
            # when it is not installed.
            have += list(TE_PEERS)
    except ImportError:
        pass
    try:
        import jax
        if any(d.platform == "gpu" for d in jax.devices()):
            have += [p for p in ALL_PEERS if p.startswith("jax-")]
    except Exception:
        pass
    return have


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", help="JSON workloads file (bench/workloads.json)")
    ap.add_argument("--peers", default="auto", help="comma list of " + ",".join(ALL_PEERS) + " or auto")
    ap.add_argument("-B", "--batch", type=int, default=4)
    ap.add_argument("-T", "--seq", type=int, default=128)
    ap.add_argument("-S", "--kv-seq", type=int, default=0)
    ap.add_argument("-N", "--heads", type=int, default=8)
    ap.add_argument("-K", "--kv-heads", type=int, default=0)
    ap.add_argument("-H", "--head-dim", type=int, default=64)
    ap.add_argument("--dtype", default="bf16", choices=["f32", "f16", "bf16", "e4m3"],
                    help="e4m3: FP8 workloads, which only te-fp8 runs (bf16 in, FP8 inside)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--direction", default="fwd", choices=["fwd", "bwd"])
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--groups", type=int, default=7)
    ap.add_argument("--out", help="write rows here (JSON lines); default stdout")
    args = ap.parse_args()

    peers = available_peers() if args.peers == "auto" else args.peers.split(",")
    for p in peers:
        if p not in ALL_PEERS:
            print(f"peers.py: error: unknown peer '{p}' (known: {', '.join(ALL_PEERS)})", file=sys.stderr)
            return 2
    if not peers:
        print("peers.py: no peer is installed with a GPU here (PyTorch or JAX with CUDA)", file=sys.stderr)
        return 0
    out = open(args.out, "w") if args.out else sys.stdout
    no_fp8 = set()  # peers asked for that take no FP8 inputs, named once
    for w in load_workloads(args):
        for p in peers:
            if w["dtype"] == "f32" and p in ("torch-flash", "torch-cudnn", "jax-cudnn", "te", "te-fp8"):
                continue  # these backends refuse f32 by design
            # FP8 workloads run only where FP8 attention is (te-fp8); te-fp8 runs only those.
            if (w["dtype"] in FP8_DTYPES) != (p == "te-fp8"):
                if w["dtype"] in FP8_DTYPES:
                    no_fp8.add(p)
                continue
            try:
                if p in TE_PEERS:
                    r = te_peer(w, p, args)
                else:
                    r = torch_peer(w, p, args) if p.startswith("torch-") else jax_peer(w, p, args)
            except ModuleNotFoundError as e:  # a peer asked for by name whose framework is missing: say so, go on
                r = row(w, p, gpu_name(), None, f"{'PyTorch' if p.startswith('torch-') else 'JAX'} is not installed "
                                                f"({e})")
            print(json.dumps(r), file=out, flush=True)
            if args.out:
                status = f"{r['ms_median']:.4f} ms {r['tflops']:.1f} TFLOP/s" if r["ok"] else r["note"]
                print(f"{p:16s} {w.get('name', '')} B={w['B']} T={w['T']} N={w['N']}/{w['K']} H={w['Hqk']} "
                      f"{w['dtype']} {'causal' if w['causal'] else ''} {w['direction']}: {status}", file=sys.stderr)
    if no_fp8:
        print(f"peers.py: e4m3 workloads run on te-fp8 only (PyTorch SDPA and JAX take no FP8 inputs); skipped for "
              f"{', '.join(sorted(no_fp8))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
