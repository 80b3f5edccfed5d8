#!/usr/bin/env python3
"""The flash kernel's forward table (docs/design.md §5): one markdown row per workload with flash's time and TFLOP/s,
FA2's (torch-flash) and cuDNN's TFLOP/s from the same run, and the ratios flash / FA2 and flash / cuDNN
(ratio = time⁻¹, > 1 = flash faster). With --baseline, another run's flash / FA2 goes in a column beside it.
Exits 1 when a workload lacks a row of flash, FA2 or cuDNN (the ratios would be missing).

  python3 bench/flash_table.py --rows attnlab.jsonl peers.jsonl [--baseline old-attnlab.jsonl old-peers.jsonl]
                               [--label v5] [--fa2 torch-flash] [--cudnn cudnn] [--flash flash]
--flash names the kernel's rows (e.g. flash-sm90-s1, as scripts/gpu-sm90-check.sh labels each version's rows); the
table's "flash" columns are that path's.
"""
import argparse
import json
import sys


def key(r):
    return (r["dtype"], r.get("direction", "fwd"), r["B"], r["T"], r["S"], r["N"], r["K"], r["Hqk"], r["Hv"],
            bool(r["causal"]), r.get("window"))


def load(files):
    rows = {}
    for name in files:
        with open(name) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    r = json.loads(line)
                    if r.get("ms_median") is not None:
                        rows.setdefault(key(r), {})[r["path"]] = r
    return rows


def shape(k):
    dtype, direction, B, T, S, N, K, hqk, hv, causal, window = k
    head = f"H={hqk}" if hqk == hv else f"H={hqk}/{hv}"
    kv = "" if S == T else f" S={S}"
    return f"B={B} T={T}{kv} N={N}/{K} {head}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", nargs="+", required=True, help="result rows of one run (attnlab's and peers')")
    ap.add_argument("--baseline", nargs="+", help="result rows of an earlier run, for its flash / FA2 column")
    ap.add_argument("--label", default="baseline", help="the baseline column's heading")
    ap.add_argument("--fa2", default="torch-flash", help="the FA2 peer's path name")
    ap.add_argument("--cudnn", default="cudnn", help="the cuDNN path's name")
    ap.add_argument("--flash", default="flash", help="the kernel path whose rows the table shows")
    args = ap.parse_args()

    run = load(args.rows)
    base = load(args.baseline) if args.baseline else {}
    heading = "| shape (fwd) | dtype | causal | flash ms | flash TFLOP/s | FA2 TFLOP/s | flash / FA2 |"
    rule = "|---|---|---|---|---|---|---|"
    if args.baseline:
        heading += f" ({args.label}) |"
        rule += "---|"
    print(heading + " cudnn TFLOP/s | flash / cudnn |")
    print(rule + "---|---|")
    missing = 0
    for k, paths in run.items():
        flash, fa2, cudnn = paths.get(args.flash), paths.get(args.fa2), paths.get(args.cudnn)
        if flash is None or fa2 is None or cudnn is None:
            absent = [p for p, r in ((args.flash, flash), (args.fa2, fa2), (args.cudnn, cudnn)) if r is None]
            print(f"flash_table: {shape(k)} causal={k[9]}: no row of {', '.join(absent)}", file=sys.stderr)
            missing += 1
            continue
        ms = flash["ms_median"]
        cells = [shape(k), k[0], "yes" if k[9] else "no", f"{ms:.4f}", f"{flash['tflops']:.0f}",
                 f"{fa2['tflops']:.0f}", f"{fa2['ms_median'] / ms:.2f}×"]
        if args.baseline:
            old = base.get(k, {})
            if args.flash in old and args.fa2 in old:
                cells.append(f"{old[args.fa2]['ms_median'] / old[args.flash]['ms_median']:.2f}×")
            else:
                cells.append("—")
        cells += [f"{cudnn['tflops']:.0f}", f"{cudnn['ms_median'] / ms:.2f}×"]
        print("| " + " | ".join(cells) + " |")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
