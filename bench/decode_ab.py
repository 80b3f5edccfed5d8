#!/usr/bin/env python3
"""The table of an A/B of `attnlab decode` settings: rows of two or more runs (each a --jsonl file, possibly written
by several rounds), the best median µs per call of each (batch, context, layout) and setting, its KV read rate, and
the first setting's time over each other's (above 1: the other is faster).

  decode_ab.py NAME=ROWS.jsonl NAME=ROWS.jsonl [...]      markdown on stdout
"""
import json
import sys


def best_times(path):
    """(B, S, layout) -> (best µs per call, KV TB/s at that time) over the file's measured rows."""
    best = {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("ms") is None:
                continue
            key = (r["B"], r["S"], r["layout"])
            us = r["ms"] * 1000.0
            tbps = r["kv_read_GBps"] / 1000.0 if r.get("kv_read_GBps") is not None else None
            if key not in best or us < best[key][0]:
                best[key] = (us, tbps)
    return best


def table(settings):
    names = [name for name, _ in settings]
    times = [best_times(path) for _, path in settings]
    keys = sorted(set().union(*times))
    head = ["B", "S", "layout"] + [f"{n} µs (TB/s)" for n in names] + [f"{names[0]} / {n}" for n in names[1:]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in keys:
        cells = [str(key[0]), str(key[1]), key[2]]
        for t in times:
            if key in t:
                us, tbps = t[key]
                cells.append(f"{us:.2f}" + (f" ({tbps:.2f})" if tbps is not None else ""))
            else:
                cells.append("–")
        for t in times[1:]:
            cells.append(f"{times[0][key][0] / t[key][0]:.3f}×" if key in times[0] and key in t else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv):
    settings = []
    for arg in argv[1:]:
        name, sep, path = arg.partition("=")
        if not sep or not name or not path:
            sys.exit(f"decode_ab.py: expected NAME=ROWS.jsonl, got {arg!r}")
        settings.append((name, path))
    if len(settings) < 2:
        sys.exit("decode_ab.py: give at least two NAME=ROWS.jsonl")
    print(table(settings))


if __name__ == "__main__":
    main(sys.argv)
