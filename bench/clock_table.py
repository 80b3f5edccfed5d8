#!/usr/bin/env python3
"""The table of lab/clock_probe.cu runs: for each shape and labelled run, the best of its rounds' medians (time per
call, the SM clock as the calls ended, cycles a call: the probe's median of time × clock per group; TFLOP/s) and
the first label's time and cycles over each other's (above 1: the other needs less). Tells a kernel that needs
fewer cycles from one that is clocked higher under the power limit (docs/perf-notes-flash-sm90.md, "What holds head
dim 256").

  clock_table.py NAME=ROWS.jsonl NAME=ROWS.jsonl [...]      markdown on stdout

Each file holds clock_probe's output, possibly of several rounds: per-group lines and each run's closing line of
medians (the lines with "ms_median"); only the closing lines are read.
"""
import json
import sys


def flops(r):
    """Forward FLOPs of a clock_probe call (S = T, Hqk = Hv = H), halved under a causal mask (bench/peers.py)."""
    f = 4.0 * r["B"] * r["N"] * r["T"] * r["T"] * r["H"]
    return f / 2.0 if r["causal"] else f


def best_medians(path):
    """(B, T, N, H, causal) -> the closing line with the lowest ms_median over the file's runs."""
    best = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if "ms_median" not in r:
                continue
            key = (r["B"], r["T"], r["N"], r["H"], bool(r["causal"]))
            if key not in best or r["ms_median"] < best[key]["ms_median"]:
                best[key] = r
    return best


def main(argv):
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    runs = [(a.split("=", 1)[0], best_medians(a.split("=", 1)[1])) for a in argv[1:]]
    first = runs[0][0]
    print("| B | T | N | H | causal | run | ms | MHz | Mcycles | TFLOP/s | "
          + f"{first} ms / run's | {first} cycles / run's |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    shapes = sorted({k for _, rows in runs for k in rows})
    for key in shapes:
        base = runs[0][1].get(key)
        for name, rows in runs:
            r = rows.get(key)
            if r is None:
                continue
            cycles = r["mcycles_median"]
            tflops = flops(r) / (r["ms_median"] * 1e-3) / 1e12
            ratio = cycle_ratio = "–"
            if base is not None and name != first:
                ratio = f"{base['ms_median'] / r['ms_median']:.3f}"
                cycle_ratio = f"{base['mcycles_median'] / r['mcycles_median']:.3f}"
            B, T, N, H, causal = key
            print(f"| {B} | {T} | {N} | {H} | {'yes' if causal else 'no'} | {name} | {r['ms_median']:.4f} | "
                  f"{r['mhz_median']:.0f} | {cycles:.3f} | {tflops:.0f} | {ratio} | {cycle_ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
