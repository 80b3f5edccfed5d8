#!/usr/bin/env python3
"""Where a decode step's time goes, from the split-KV kernels' phase stamps (tests/split_kv_phases.cu writes them:
`split_kv_phases measure --out X.csv`; src/cuda/serving/split_kv_phase_stamps.cuh says what each mark is).
Markdown on stdout: the call's event time, then, as medians over the stamped calls, the call laid out on the GPU's
nanosecond clock (%globaltimer), how many SMs the split blocks ran on, and each split block's phases on its SM's
cycle counter.

  python3 bench/decode_phases.py X.csv [--skip N]      N: leading calls left out (default 2)

The layout of one call (ns, from the first split block's end of wait):
  split start spread   the last split block's end of wait (blocks not yet placed, or placed late)
  split end            the last split block's stores: the split kernel's span
  combine start        the first combine block's end of wait (after the split grid has ended and flushed)
  combine end          the last combine block's stores: the call's span on the GPU
  gap to next call     from a call's combine end to the next call's first split block's end of wait
Phases of a split block (cycles, converted to ns at the clock rate the block's two clocks give): wait (entry to
griddepcontrol.wait's return), lengths (the sequence's offsets read), first tile (the prologue's copies landing),
loop (every key tile), epilogue (merge and stores); for all blocks and for the block that ended last (the critical
path's end).
"""
import argparse
import csv
import statistics
import sys

MARKS = 6
ENTRY, WAITED, LENGTHS, FIRST_TILE, LAST_TILE, STORED = range(MARKS)
PHASES = [("wait", ENTRY, WAITED), ("lengths", WAITED, LENGTHS), ("first tile", LENGTHS, FIRST_TILE),
          ("loop", FIRST_TILE, LAST_TILE), ("epilogue", LAST_TILE, STORED)]


def read(path):
    with open(path, newline="") as f:
        first = f.readline()
        if not first.startswith("# split_kv_phases"):
            raise ValueError(f"{path}: not a split_kv_phases file (no '# split_kv_phases' first line)")
        meta = dict(item.split("=", 1) for item in first[len("# split_kv_phases"):].split() if "=" in item)
        rows = []
        for r in csv.DictReader(f):
            rows.append({
                "call": int(r["call"]), "kernel": r["kernel"], "block": int(r["block"]), "sm": int(r["sm"]),
                "tiles": int(r["tiles"]),
                "ns": [int(r[f"ns{i}"]) for i in range(MARKS)],
                "cycles": [int(r[f"cycles{i}"]) for i in range(MARKS)],
            })
    if not rows:
        raise ValueError(f"{path}: no records")
    return meta, rows


def median(values):
    return statistics.median(values) if values else float("nan")


def block_phases_ns(rec):
    """A split block's phases in ns: cycle differences at the block's own clock rate (cycles per ns from its
    entry-to-stores span on both clocks), or ns differences when the span is too short to give a rate."""
    span_ns = rec["ns"][STORED] - rec["ns"][ENTRY]
    span_cycles = rec["cycles"][STORED] - rec["cycles"][ENTRY]
    out = {}
    for name, a, b in PHASES:
        if rec["tiles"] == 0 and FIRST_TILE in (a, b):  # no tile: no first-tile mark; lengths → last tile is loop 0
            out[name] = 0.0
            continue
        if span_ns > 0 and span_cycles > 0:
            out[name] = (rec["cycles"][b] - rec["cycles"][a]) * span_ns / span_cycles
        else:
            out[name] = float(rec["ns"][b] - rec["ns"][a])
    return out


def layout(calls):
    """Per call: the layout quantities (ns), and the phases of every split block and of the last one to end."""
    per_call = []
    for c in sorted(calls):
        split = [r for r in calls[c] if r["kernel"] == "split" and r["tiles"] >= 0]
        combine = [r for r in calls[c] if r["kernel"] == "combine" and r["tiles"] >= 0]
        if not split:
            continue
        t0 = min(r["ns"][WAITED] for r in split)
        row = {
            "call": c,
            "split start spread": max(r["ns"][WAITED] for r in split) - t0,
            "split end": max(r["ns"][STORED] for r in split) - t0,
            "first split entry": min(r["ns"][ENTRY] for r in split) - t0,
            "t0": t0,
        }
        end = row["split end"]
        if combine:
            row["combine start"] = min(r["ns"][WAITED] for r in combine) - t0
            row["combine end"] = max(r["ns"][STORED] for r in combine) - t0
            end = row["combine end"]
        row["end"] = end
        last = max(split, key=lambda r: r["ns"][STORED])
        row["last block"] = block_phases_ns(last)
        row["last block tiles"] = last["tiles"]
        row["blocks"] = [block_phases_ns(r) for r in split]
        per_call.append(row)
    for a, b in zip(per_call, per_call[1:]):
        if b["call"] == a["call"] + 1:
            a["gap to next call"] = b["t0"] - (a["t0"] + a["end"])
    return per_call


def resolution(rows):
    """The smallest positive step between two marks of one block on the ns clock: the timer's granularity, or
    less than the marks' spacing."""
    steps = []
    for r in rows:
        marks = [t for t in r["ns"] if t > 0]  # the combine leaves marks 2-4 at 0
        steps += [b - a for a, b in zip(marks, marks[1:]) if b > a]
    return min(steps) if steps else 0


def report(path, skip):
    meta, rows = read(path)
    calls = {}
    for r in rows:
        if r["call"] >= skip:
            calls.setdefault(r["call"], []).append(r)
    if not calls:
        raise ValueError(f"{path}: no call left after skipping {skip}")
    per_call = layout(calls)
    us = lambda ns: f"{ns / 1000.0:.2f}"
    out = [f"### {path}",
           f"B={meta.get('B')} S={meta.get('S')} N/K={meta.get('N')}/{meta.get('K')} H={meta.get('H')}, "
           f"{meta.get('splits')} splits; event time per call {meta.get('plain_us')} µs unstamped, "
           f"{meta.get('stamped_us')} µs stamped; {len(per_call)} calls; ns clock steps of ≥ {resolution(rows)} ns",
           ""]
    kv_bytes = float(meta.get("kv_bytes", "nan"))
    plain_us = float(meta.get("plain_us", "nan"))
    if kv_bytes == kv_bytes and plain_us > 0:
        out += [f"K/V read rate over the event time: {kv_bytes / plain_us * 1e-6:.2f} TB/s", ""]
    out += ["| the call (µs from the first split block's end of wait) | median | min | max |", "|---|---|---|---|"]
    keys = ["first split entry", "split start spread", "split end", "combine start", "combine end",
            "gap to next call"]
    for k in keys:
        values = [c[k] for c in per_call if k in c]
        if values:
            out.append(f"| {k} | {us(median(values))} | {us(min(values))} | {us(max(values))} |")
    # Where the split blocks ran: how many SMs they spread over, and the most one SM held (a call whose blocks
    # share SMs while others idle streams from fewer of them).
    spread = []
    for c in sorted(calls):
        per_sm = {}
        for r in calls[c]:
            if r["kernel"] == "split":
                per_sm[r["sm"]] = per_sm.get(r["sm"], 0) + 1
        if per_sm:
            spread.append((len(per_sm), max(per_sm.values())))
    if spread:
        out += ["", f"Split blocks on {min(n for n, _ in spread)}–{max(n for n, _ in spread)} SMs per call, "
                    f"at most {max(m for _, m in spread)} on one SM."]
    out += ["", "| split block phase (µs) | median of all blocks | max of all blocks | the block that ended last |",
            "|---|---|---|---|"]
    for name, _, _ in PHASES:
        every = [b[name] for c in per_call for b in c["blocks"]]
        last = [c["last block"][name] for c in per_call]
        out.append(f"| {name} | {us(median(every))} | {us(max(every))} | {us(median(last))} |")
    return "\n".join(out + [""])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--skip", type=int, default=2, help="leading calls left out")
    args = ap.parse_args()
    try:
        for path in args.files:
            print(report(path, args.skip))
    except (ValueError, KeyError, OSError) as e:
        print(f"decode_phases: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
