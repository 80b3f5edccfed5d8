#!/usr/bin/env python3
"""Side by side: the metrics that decide a flash kernel's speed, from Nsight Compute's details pages
(`ncu --import X.ncu-rep --page details --csv > X.csv`), one column per file (the first kernel in each), then each
file's warp-stall findings. Markdown on stdout.

  python3 bench/ncu_summary.py flash-4k.csv flash-8k.csv fa2-4k.csv
"""
import csv
import re
import sys

# (section, metric) → row label; the order is the table's.
METRICS = [
    ("GPU Speed Of Light Throughput", "Duration", "duration"),
    ("GPU Speed Of Light Throughput", "Elapsed Cycles", "elapsed cycles"),
    ("GPU Speed Of Light Throughput", "SM Frequency", "SM clock"),
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput", "SM throughput"),
    ("Compute Workload Analysis", "Executed Ipc Active", "IPC (active)"),
    ("Compute Workload Analysis", "Issue Slots Busy", "issue slots busy"),
    ("Instruction Statistics", "Executed Instructions", "instructions"),
    ("Warp State Statistics", "Warp Cycles Per Issued Instruction", "cycles between a warp's issues"),
    ("Scheduler Statistics", "Eligible Warps Per Scheduler", "eligible warps per scheduler"),
    ("Occupancy", "Achieved Occupancy", "achieved occupancy"),
    ("Launch Statistics", "Registers Per Thread", "registers"),
    ("Memory Workload Analysis", "L2 Hit Rate", "L2 hit rate"),
    ("GPU Speed Of Light Throughput", "DRAM Throughput", "DRAM throughput"),
    ("Memory Workload Analysis", "Local Memory Spilling Requests", "local-memory spill requests"),
]


def load(name):
    """The first kernel's metrics {(section, metric): (value, unit)}, its name and its stall findings."""
    values, findings, kernel, first_id = {}, [], "", None
    with open(name, newline="") as f:
        for r in csv.DictReader(f):
            if first_id is None:
                first_id, kernel = r["ID"], r["Kernel Name"]
            if r["ID"] != first_id:
                break
            if r.get("Metric Name"):
                values[(r["Section Name"], r["Metric Name"])] = (r["Metric Value"], r["Metric Unit"])
            rule = r.get("Rule Description") or ""
            stall = r["Section Name"].startswith("WarpStateStats") and "cycles being stalled" in rule
            if stall and rule not in findings:
                findings.append(rule)
    return values, findings, kernel


def main() -> int:
    names = sys.argv[1:]
    if not names:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [load(n) for n in names]
    print("| metric | " + " | ".join(n.rsplit("/", 1)[-1] for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for section, metric, label in METRICS:
        cells = []
        for values, _, _ in runs:
            v = values.get((section, metric))
            cells.append(f"{v[0]} {v[1]}".strip() if v else "–")
        print(f"| {label} | " + " | ".join(cells) + " |")
    for name, (_, findings, kernel) in zip(names, runs):
        print(f"\n{name.rsplit('/', 1)[-1]}: {kernel[:160]}")
        for text in findings or ["(no stall finding in this page)"]:
            share = re.search(r"represents about [\d.]+% of the total average of [\d.]+ cycles", text)
            print(f"- {text.split(' Typically')[0]}" + (f" ({share.group(0)})" if share else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
