#!/usr/bin/env python3
"""Times flash's tile configurations against each other: one `attnlab bench --paths flash-sm80` run per configuration
index (ATTNLAB_FLASH_CONFIG, src/cuda/flash/tile_configs.h) over the same workloads, in one process after another
on the same GPU, then one table of ms per call with each configuration's speed relative to the first one given.

  flash_configs.py --attnlab DIST/bin/attnlab --workloads bench/workloads_fwd.json --configs 0,1,3 --out rows.jsonl

Rows keep the lab's schema (docs/design.md §4); the note starts with ATTNLAB_FLASH_CONFIG=<i>. A configuration that
does not fit a shape (or does not exist for its head dims) shows as "—". Forcing a configuration also turns off the
small-problem list, so the codelab's default shape runs the list's configurations too.
"""
import argparse
import json
import os
import sys

from flash_runs import bench_flash, print_columns, time_cells, workload_label


def run_config(attnlab, workloads, config, groups, extra_env):
    env = dict(os.environ, ATTNLAB_FLASH_CONFIG=str(config), **extra_env)
    rows = bench_flash(attnlab, workloads, groups, env, f"flash_configs: configuration {config}")
    for row in rows:
        row["note"] = f"ATTNLAB_FLASH_CONFIG={config}; {row['note']}"
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attnlab", required=True, help="the attnlab executable")
    parser.add_argument("--workloads", required=True, help="a workloads file (bench/*.json)")
    parser.add_argument("--configs", required=True, help="comma-separated configuration indices; the first is the base")
    parser.add_argument("--groups", type=int, default=5, help="timed groups per row (attnlab bench --groups)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="another variable for every run (e.g. ATTNLAB_FLASH_SECTION_HEADS=4)")
    parser.add_argument("--out", help="write every row here (JSON lines)")
    args = parser.parse_args()

    try:
        configs = [int(c) for c in args.configs.split(",")]
    except ValueError:
        sys.exit(f"flash_configs: --configs must be comma-separated integers, got '{args.configs}'")
    if any(c < 0 for c in configs):
        sys.exit("flash_configs: configuration indices are ≥ 0")
    extra_env = {}
    for item in args.env:
        name, eq, value = item.partition("=")
        if not eq or not name:
            sys.exit(f"flash_configs: --env takes NAME=VALUE, got '{item}'")
        extra_env[name] = value

    runs = {c: run_config(args.attnlab, args.workloads, c, args.groups, extra_env) for c in configs}
    if args.out:
        with open(args.out, "w") as out:
            for c in configs:
                for row in runs[c]:
                    out.write(json.dumps(row) + "\n")

    base = runs[configs[0]]
    header = ["workload"] + [f"config {c} ms" for c in configs] + [f"{c} vs {configs[0]}" for c in configs[1:]]
    lines = [header]
    for i, row in enumerate(base):
        times = [runs[c][i]["ms_median"] if i < len(runs[c]) and runs[c][i]["ok"] else None for c in configs]
        lines.append([workload_label(row)] + time_cells(times))
    print_columns(lines)
    print(f"(ratio = time of config {configs[0]} / time of the other: > 1 means faster than config {configs[0]})")


if __name__ == "__main__":
    main()
