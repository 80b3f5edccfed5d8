#!/usr/bin/env python3
"""A scaling model of ring attention (docs/ring.md) on R GPUs, from measured times.

Inputs: the single call of the whole sequence (`attnlab ring --jsonl`, its row with ranks 0) and one block call
per ring size (`attnlab bench --jsonl`, forward and --backward): under the zigzag layout with a causal mask every
step of a rank is one unmasked call of T/R queries against T/(2R) keys (the first step one causal T/R x T/R call,
the same work). The link is not measured here (it needs two GPUs): its bandwidth is a flag, and the table says so.

Per ring call on R ranks, each step overlaps its block call with the next transfer, so
  forward  = R * max(c_fwd(R), x(R))
  backward = R * max(c_bwd(R), 3 x(R))      (the K/V block, and the f32 dK/dV accumulator of twice its bytes)
with x(R) = B * (T/R) * K * (Hqk + Hv) * 2 bytes / bandwidth; speed-up = single call / ring call.
Prints a Markdown table.

  bench/ring_model.py --ring ring.jsonl --blocks blocks.jsonl [--bandwidth-gbps 400] [--ranks 2,4,8]
"""
import argparse
import json
import sys


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ring", required=True, help="attnlab ring rows (the single call: ranks 0)")
    ap.add_argument("--blocks", required=True, help="attnlab bench rows of the block shapes (fwd and bwd)")
    ap.add_argument("--bandwidth-gbps", type=float, default=400.0,
                    help="assumed per-direction link bandwidth between neighbouring GPUs, GB/s")
    ap.add_argument("--ranks", default="2,4,8")
    args = ap.parse_args(argv)

    single = next((r for r in rows(args.ring) if r.get("ranks") == 0), None)
    if single is None:
        sys.exit("ring_model: no single-call row (ranks 0) in " + args.ring)
    T, B, K, Hqk, Hv = single["T"], single["B"], single["K"], single["Hqk"], single["Hv"]
    single_fwd, single_bwd = single["fwd_ms"], single.get("bwd_ms")
    blocks = {}
    for r in rows(args.blocks):
        if r.get("experiment") == "bench" and r.get("ms_median") is not None:
            blocks[(r["T"], r["S"], r.get("direction", "fwd"))] = r["ms_median"]

    print(f"| R | block T x S | c_fwd ms | c_bwd ms | x ms at {args.bandwidth_gbps:g} GB/s | forward ms | "
          "speed-up | fwd+bwd ms | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|")
    for R in (int(x) for x in args.ranks.split(",")):
        tq, tk = T // R, T // (2 * R)
        c_fwd, c_bwd = blocks.get((tq, tk, "fwd")), blocks.get((tq, tk, "bwd"))
        if c_fwd is None:
            print(f"| {R} | {tq} x {tk} | not measured | | | | | | |")
            continue
        x = B * tq * K * (Hqk + Hv) * 2 / (args.bandwidth_gbps * 1e9) * 1e3
        fwd = R * max(c_fwd, x)
        line = f"| {R} | {tq} x {tk} | {c_fwd:.2f} | {c_bwd if c_bwd is not None else float('nan'):.2f} | " \
               f"{x:.3f} | {fwd:.2f} | {single_fwd / fwd:.2f}x |"
        if c_bwd is not None and single_bwd is not None:
            both = fwd + R * max(c_bwd, 3 * x)
            line += f" {both:.2f} | {(single_fwd + single_bwd) / both:.2f}x |"
        else:
            line += " | |"
        print(line)
    print(f"\nsingle call: forward {single_fwd:.2f} ms" +
          (f", backward {single_bwd:.2f} ms" if single_bwd is not None else "") +
          f" (T = {T}); link bandwidth assumed, not measured")


if __name__ == "__main__":
    main()
