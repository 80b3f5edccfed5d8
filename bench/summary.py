#!/usr/bin/env python3
"""Summarizes result rows (JSON lines, docs/design.md §4 schema) from attnlab and its peers into one table per
experiment: each workload on one line per path, with ms, TFLOP/s and the ratio of time to a reference peer (default
torch-cudnn) measured in the same run.

  python3 bench/summary.py results/*.jsonl [--ref torch-cudnn]
"""
import argparse
import json
import sys
from collections import OrderedDict


def key(r):
    return (r.get("experiment"), r.get("direction", "fwd"), r["dtype"], r["B"], r["T"], r["S"], r["N"], r["K"],
            r["Hqk"], r["Hv"], bool(r["causal"]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ref", default="torch-cudnn")
    args = ap.parse_args()
    groups = OrderedDict()
    for name in args.files:
        try:
            with open(name) as f:
                for line in f:
                    line = line.strip()
                    if line.startswith("{"):
                        r = json.loads(line)
                        groups.setdefault(key(r), []).append(r)
        except FileNotFoundError:
            print(f"summary: {name} missing", file=sys.stderr)
    experiment = None
    for k, rows in groups.items():
        if k[0] != experiment:
            experiment = k[0]
            print(f"\n## {experiment}")
            print(f"{'workload':52s} {'path':16s} {'ms':>10s} {'TFLOP/s':>8s} {'GB/s':>8s} {'vs ' + args.ref:>16s}")
        exp, direction, dtype, B, T, S, N, K, H, Hv, causal = k
        name = f"{direction} {dtype} B={B} T={T} S={S} N={N}/{K} H={H}{'/' + str(Hv) if Hv != H else ''}"
        name += " causal" if causal else ""
        ref = next((r for r in rows if r["path"] == args.ref and r.get("ok")), None)
        for r in rows:
            if not r.get("ok"):
                print(f"{name:52s} {r['path']:16s} {'—':>10s}  {r.get('note', '')[:60]}")
                continue
            ratio = f"{ref['ms_median'] / r['ms_median']:.2f}x" if ref else "—"
            gbps = f"{r['gbps']:.0f}" if r.get("gbps") else "—"
            print(f"{name:52s} {r['path']:16s} {r['ms_median']:10.4f} {r['tflops']:8.1f} {gbps:>8s} {ratio:>16s}")
            name = ""
    return 0


if __name__ == "__main__":
    sys.exit(main())
