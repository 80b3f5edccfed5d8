#!/usr/bin/env python3
"""Where a kernel's warps wait, per SASS opcode: Nsight Compute's warp-stall samples from its source page
(`ncu --set full --import-source yes -o X ...`, then `ncu --import X.ncu-rep --page source --csv --print-source sass
> X.csv`), summed over every instruction of the kernel by stall reason and by opcode (its first dot-separated word,
predicate stripped). Markdown on stdout, one section per file.

  python3 bench/ncu_stalls.py s5-h128.csv cudnn-h128.csv [--top 12]

A reason's share is of all samples of the kernel; `wait` is a fixed-latency dependency or the issue pacing the
compiler wrote into the instruction (back-to-back MUFU.EX2 waiting on the SFU show up there), `barrier` includes
warpgroup.wait on wgmma results, `long_sb` a load or mbarrier wait, `selected` the cycles a warp issued.
"""
import argparse
import collections
import csv
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
OPCODE = re.compile(r"(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def opcode(source: str) -> str:
    m = OPCODE.match(source.strip())
    return m.group(1) if m else "?"


def summarize(path: str, top: int) -> str:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel, row 1 is the header, then one row per SASS instruction.
    if len(rows) < 2 or SAMPLES not in rows[1]:
        raise ValueError(f"{path}: not an ncu source page in CSV (no '{SAMPLES}' column)")
    kernel = rows[0][1] if len(rows[0]) > 1 else "?"
    header = rows[1]
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    total = 0
    by_reason = collections.Counter()
    by_op = collections.Counter()
    op_reason = collections.defaultdict(collections.Counter)
    executed = collections.Counter()
    for r in rows[2:]:
        if len(r) < len(header):
            continue
        op = opcode(r[col["Source"]])
        samples = int(r[col[SAMPLES]] or 0)
        total += samples
        by_op[op] += samples
        if "Instructions Executed" in col:
            executed[op] += int(r[col["Instructions Executed"]] or 0)
        for reason in reasons:
            n = int(r[col[reason]] or 0)
            by_reason[reason] += n
            op_reason[op][reason] += n
    out = [f"### {path}", f"{kernel}: {total} samples", ""]
    if total == 0:
        return "\n".join(out + ["(no samples)", ""])
    share = lambda n: f"{100.0 * n / total:.1f} %"
    out.append("stall reasons: " + ", ".join(f"{k[6:]} {share(v)}" for k, v in by_reason.most_common(top) if v))
    out += ["", "| opcode | samples | instructions executed | top reasons |", "|---|---|---|---|"]
    for op, n in by_op.most_common(top):
        top3 = ", ".join(f"{k[6:]} {share(v)}" for k, v in op_reason[op].most_common(3) if v)
        out.append(f"| {op} | {share(n)} | {executed[op]:,} | {top3} |")
    return "\n".join(out + [""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--top", type=int, default=12, help="opcodes and reasons listed (default 12)")
    args = ap.parse_args()
    try:
        print("\n".join(summarize(p, args.top) for p in args.csv))
    except (OSError, ValueError) as e:
        print(f"ncu_stalls: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
