#!/usr/bin/env python3
"""Peers of `attnlab decode`: the same decode grid (B sequences of one new token each, S keys per sequence,
N query heads over K KV heads, H = 128, bf16), timed through PyTorch SDPA under each of its GPU backends and
FlashAttention's flash_attn_with_kvcache, written in `attnlab decode`'s JSON rows (layout "contiguous": one
dense cache per call, as these calls take it).

Timing follows the lab: warm-up (at least 10 calls and 200 ms), then groups of --iters back-to-back calls between
CUDA events; ms is the median per-call time over the groups. Input sets are rotated where one would sit in L2, as
attnlab does. A backend that raises is a row with ok false and its reason (also on stderr); so is a shape over 60%
of the free GPU memory. Small shapes (S <= 4096, B <= 4) are checked against an f32 reference.

  python3 bench/decode_peers.py --out decode-peers.jsonl
  python3 bench/decode_peers.py --batch 1,64 --context 4096,32768 --heads 32/32,32/8,32/1
  attnlab report decode-rows.jsonl --merge decode-peers.jsonl --out decode-report
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

Q_LEN, DTYPE, GROUPS, WARMUP = 1, torch.bfloat16, 7, 10
CHECK_MAX_S, CHECK_MAX_B = 4096, 4
SDPA = {"torch-cudnn": SDPBackend.CUDNN_ATTENTION, "torch-flash": SDPBackend.FLASH_ATTENTION,
        "torch-efficient": SDPBackend.EFFICIENT_ATTENTION}


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def heads(text: str) -> list[tuple[int, int]]:
    pairs = []
    for item in text.split(","):
        n, _, k = item.partition("/")
        n, k = int(n), int(k or n)
        if n < 1 or k < 1 or n % k:
            raise argparse.ArgumentTypeError(f"'{item}': N/K with N a multiple of K")
        pairs.append((n, k))
    return pairs


def time_calls(call, iters: int) -> list[float]:
    """Per-call milliseconds of each group: CUDA events around `iters` back-to-back calls, after warm-up."""
    i, t0 = 0, time.perf_counter()
    while i < WARMUP or (time.perf_counter() - t0 < 0.2 and i < 1000000):
        call(i)
        i += 1
    torch.cuda.synchronize()
    per_call = []
    for _ in range(GROUPS):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for j in range(iters):
            call(i + j)
        stop.record()
        stop.synchronize()
        per_call.append(start.elapsed_time(stop) / iters)
        i += iters
    return per_call


def row(path, B, S, N, K, H, times=None, sets=1, verdict=None, err=None, note="") -> dict:
    ms = statistics.median(times) if times else None
    kv_bytes = 2.0 * B * S * K * H * 2  # K and V, bf16: what one call must read
    return {"experiment": "decode", "path": path, "asked": path, "peer": True,
            "device": torch.cuda.get_device_name(), "dtype": "bf16", "layout": "contiguous",
            "B": B, "S": S, "N": N, "K": K, "H": H, "q_len": Q_LEN, "page_size": None,
            "ms": ms, "ms_min": min(times) if times else None, "ms_max": max(times) if times else None,
            "tokens_per_s": B * Q_LEN / (ms * 1e-3) if ms else None,
            "kv_read_GBps": kv_bytes / (ms * 1e-3) / 1e9 if ms else None,
            "check": verdict, "max_abs_err": err, "input_sets": sets, "ok": bool(times) and verdict != "failed",
            "note": note}


def reference(q, k, v):
    """f32 attention of (B, N, T, H) q over (B, K, S, H) k, v: each KV head serves N / K query heads."""
    g = q.shape[1] // k.shape[1]
    k, v = (x.float().repeat_interleave(g, dim=1) for x in (k, v))
    p = torch.softmax(q.float() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return p @ v


def check(out, ref):
    """("passed" | "failed", max |diff|) at the lab's bf16 tolerance (rtol = atol = 1e-2), or (None, None)."""
    if ref is None:
        return None, None
    out = out.float()
    err = (out - ref).abs().max().item()
    return ("passed" if torch.allclose(out, ref, rtol=1e-2, atol=1e-2) else "failed"), err


def measure(path, shape, iters, make, fn, as_sdpa, l2):
    """One row: `make(seed)` builds an input set, `fn(inputs)` is the call, returning O in (B, N, T, H), and
    `as_sdpa(inputs)` gives the set as SDPA's (q, k, v) views for the reference."""
    B, S, N, K, H = shape
    set_bytes = 2 * B * Q_LEN * N * H * 2 + 2 * B * S * K * H * 2
    n_sets = max(1, min(8, math.ceil(2 * l2 / set_bytes))) if set_bytes < l2 else 1
    free, _ = torch.cuda.mem_get_info()
    if n_sets * set_bytes > 0.6 * free:
        return row(path, *shape, note=f"skipped: needs {n_sets * set_bytes / 2**30:.1f} GiB, over 60% of the "
                                      f"{free / 2**30:.1f} GiB free")
    small = S <= CHECK_MAX_S and B <= CHECK_MAX_B
    try:
        sets = [make(s) for s in range(n_sets)]
        verdict, err = check(fn(sets[0]), reference(*as_sdpa(sets[0])) if small else None)
        times = time_calls(lambda i: fn(sets[i % n_sets]), iters)
    except Exception as e:  # a backend that cannot run the shape (or no room for it): a row that says why
        why = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        print(f"{path} B={B} S={S} N/K={N}/{K}: {why}", file=sys.stderr)
        return row(path, *shape, sets=n_sets, note=f"raised {type(e).__name__}: {why}")
    note = f"torch {torch.__version__}; {n_sets} input set(s)" + ("" if small else "; not checked (large)")
    return row(path, *shape, times, n_sets, verdict, err, note)


def randn(seed: int, *shapes):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(*dims, generator=g, device="cuda", dtype=DTYPE) for dims in shapes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=ints, default=ints("1,64"), help="comma-separated B (default 1,64)")
    ap.add_argument("--context", type=ints, default=ints("1024,4096,16384,32768,131072"),
                    help="comma-separated S (default 1024,4096,16384,32768,131072)")
    ap.add_argument("--heads", type=heads, default=heads("32/8"), help="comma-separated N/K pairs (default 32/8)")
    ap.add_argument("--head-dim", type=int, default=128, help="H (default 128)")
    ap.add_argument("--iters", type=int, default=20, help="calls per timed group (default 20)")
    ap.add_argument("--out", help="also append the rows (JSON lines) to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("decode_peers.py: no CUDA GPU visible to torch", file=sys.stderr)
        return 1
    fa_missing = ""
    try:
        from flash_attn import flash_attn_with_kvcache
    except ImportError as e:
        flash_attn_with_kvcache, fa_missing = None, f"flash_attn is not importable ({e})"
        print(f"fa-kvcache: skipped: {fa_missing}", file=sys.stderr)
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20)
    out = open(args.out, "a") if args.out else None
    H = args.head_dim

    def emit(r: dict) -> None:
        line = json.dumps(r)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    for N, K in args.heads:
        for B in args.batch:
            for S in args.context:
                shape = (B, S, N, K, H)
                # SDPA: q (B, N, q_len, H), k and v (B, K, S, H). The backend is chosen around the whole row, not
                # per call: entering sdpa_kernel costs host time a decode call cannot hide.
                def sdpa_inputs(seed):
                    return randn(seed, (B, N, Q_LEN, H), (B, K, S, H), (B, K, S, H))

                def sdpa(t):
                    return F.scaled_dot_product_attention(*t, enable_gqa=True)

                for path, backend in SDPA.items():
                    with sdpa_kernel([backend]):
                        emit(measure(path, shape, args.iters, sdpa_inputs, sdpa, lambda t: t, l2))
                    torch.cuda.empty_cache()

                if flash_attn_with_kvcache is None:
                    emit(row("fa-kvcache", *shape, note=f"skipped: {fa_missing}"))
                    continue

                # FlashAttention's layouts: q (B, q_len, N, H), caches (B, S, K, H), every sequence S keys long.
                def fa_inputs(seed):
                    lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
                    return (*randn(seed, (B, Q_LEN, N, H), (B, S, K, H), (B, S, K, H)), lens)

                def fa(t):
                    q, k, v, lens = t
                    return flash_attn_with_kvcache(q, k, v, cache_seqlens=lens).transpose(1, 2)

                def fa_as_sdpa(t):
                    return tuple(x.transpose(1, 2) for x in t[:3])

                emit(measure("fa-kvcache", shape, args.iters, fa_inputs, fa, fa_as_sdpa, l2))
                torch.cuda.empty_cache()
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
