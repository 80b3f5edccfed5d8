#!/usr/bin/env python3
"""A/B of attnlab builds on the GPU: the same workloads timed with each build's `attnlab bench --paths flash-sm80`, the
builds alternating round after round in one call (the GPU's clocks and neighbours drift; alternating spreads that
over both), then one table of each build's median time and its ratio to the first build.

  flash_ab.py --builds DIST_A,DIST_B --workloads bench/workloads_fwd.json --only 'h128' --rounds 2 --out ab.jsonl

A build is a folder made by scripts/gpu-build.sh (bin/attnlab and lib/). Rows keep the lab's schema
(docs/design.md §4); the note starts with "A/B: build NAME, round R". Each run's rows are appended to --out as soon
as it ends, and --time-limit stops before a run that would start past it, so a call that is cut short still returns
what it measured.
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

from flash_runs import bench_flash, print_columns, time_cells, workload_label


def run_build(dist, workloads, groups):
    env = dict(os.environ)
    lib = os.path.join(dist, "lib")
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return bench_flash(os.path.join(dist, "bin", "attnlab"), workloads, groups, env, f"flash_ab: {dist}")


def run_rounds(builds, names, workloads, args, out):
    """Every build once per round, in order; returns {(build index, workload label): [ms per round]} and the
    labels in the file's order."""
    start = time.monotonic()
    times, order = {}, []
    for rnd in range(1, args.rounds + 1):
        for i, (dist, name) in enumerate(zip(builds, names)):
            if args.time_limit and time.monotonic() - start > args.time_limit:
                print(f"flash_ab: time limit reached before round {rnd} of {name}", file=sys.stderr)
                return times, order
            for row in run_build(dist, workloads, args.groups):
                row["note"] = f"A/B: build {name}, round {rnd}; {row['note']}"
                key = f"{row['dtype']} {workload_label(row)}"
                if key not in order:
                    order.append(key)
                if row["ok"]:
                    times.setdefault((i, key), []).append(row["ms_median"])
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
    return times, order


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", required=True, help="comma-separated build folders; the first is the base")
    parser.add_argument("--names", help="comma-separated names for the builds (default: the folders' names)")
    parser.add_argument("--workloads", required=True, help="a workloads file (bench/*.json)")
    parser.add_argument("--only", help="keep the workloads whose name matches this regular expression")
    parser.add_argument("--rounds", type=int, default=2, help="runs of every build, alternating (default 2)")
    parser.add_argument("--groups", type=int, default=5, help="timed groups per row (attnlab bench --groups)")
    parser.add_argument("--time-limit", type=float, default=0, metavar="SECONDS",
                        help="start no run after this many seconds (0: no limit)")
    parser.add_argument("--out", help="append every row here (JSON lines) as each run ends")
    args = parser.parse_args()

    builds = [b for b in args.builds.split(",") if b]
    names = args.names.split(",") if args.names else [os.path.basename(os.path.normpath(b)) for b in builds]
    if len(builds) < 2:
        sys.exit("flash_ab: --builds needs at least two folders")
    if len(names) != len(builds):
        sys.exit(f"flash_ab: {len(names)} names for {len(builds)} builds")
    for b in builds:
        if not os.access(os.path.join(b, "bin", "attnlab"), os.X_OK):
            sys.exit(f"flash_ab: {b}: no bin/attnlab (a folder made by scripts/gpu-build.sh)")
    if args.rounds < 1 or args.groups < 1:
        sys.exit("flash_ab: --rounds and --groups are ≥ 1")

    with open(args.workloads) as f:
        spec = json.load(f)
    if args.only:
        try:
            keep = re.compile(args.only)
        except re.error as e:
            sys.exit(f"flash_ab: --only: {e}")
        spec["workloads"] = [w for w in spec["workloads"] if keep.search(w.get("name", ""))]
    if not spec["workloads"]:
        sys.exit("flash_ab: no workload left to time")

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as chosen:
        json.dump(spec, chosen)
    out = open(args.out, "a") if args.out else None
    try:
        times, order = run_rounds(builds, names, chosen.name, args, out)
    finally:
        os.unlink(chosen.name)
        if out:
            out.close()

    header = ["workload"] + [f"{n} ms" for n in names] + [f"{n} vs {names[0]}" for n in names[1:]]
    lines = [header]
    for key in order:
        med = [statistics.median(times[(i, key)]) if (i, key) in times else None for i in range(len(builds))]
        lines.append([key] + time_cells(med))
    print_columns(lines)
    print(f"(median over rounds; ratio = time of {names[0]} / time of the other: > 1 means faster than {names[0]})")


if __name__ == "__main__":
    main()
