#!/usr/bin/env python3
"""Checks the FLOP count behind every TFLOP/s the project reports (docs/design.md §5): 2·B·N·T·S·(Hqk + Hv), half
under a causal mask, 2.5× for a backward call. Runs `attnlab bench` on CPU over shapes whose two head dims differ
(tests/data/flops_workloads.json) and recomputes each row's TFLOP/s from its own median time; then checks
bench/peers.py's count (the peers' rows) on the same shapes.

  python3 tests/flops_test.py REPO_ROOT ATTNLAB_BINARY      exit 0 pass, 1 fail
"""
import importlib.util
import json
import os
import subprocess
import sys


def expected_flops(w: dict) -> float:
    f = 2.0 * w["B"] * w["N"] * w["T"] * w["S"] * (w["Hqk"] + w["Hv"])
    if w["causal"]:
        f /= 2.0
    return f * (2.5 if w.get("direction", "fwd") == "bwd" else 1.0)


def main() -> int:
    repo, attnlab = sys.argv[1], sys.argv[2]
    workloads_file = os.path.join(repo, "tests", "data", "flops_workloads.json")
    workloads = {w["name"]: w for w in json.load(open(workloads_file))["workloads"]}
    failures = []

    done = subprocess.run([attnlab, "bench", "--device", "cpu", "--paths", "cpu-naive", "--workloads", workloads_file,
                           "--warmup", "0", "--repeats", "1", "--groups", "1", "--json"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        print(f"attnlab bench failed ({done.returncode}): {done.stderr}")
        return 1
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if len(rows) != len(workloads):
        failures.append(f"expected {len(workloads)} rows, got {len(rows)}")
    for row in rows:
        w = workloads[row["note"].split(";")[0]]
        want = expected_flops(w) / (row["ms_median"] * 1e-3) / 1e12
        if abs(row["tflops"] - want) > 1e-9 * max(1.0, want) + 1e-12:
            failures.append(f"{w['name']}: attnlab bench says {row['tflops']} TFLOP/s, its time gives {want}")

    spec = importlib.util.spec_from_file_location("peers", os.path.join(repo, "bench", "peers.py"))
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    for w in workloads.values():
        if peers.flops(w) != expected_flops(w):
            failures.append(f"{w['name']}: bench/peers.py counts {peers.flops(w)} FLOPs, expected {expected_flops(w)}")

    for f in failures:
        print("FAIL:", f)
    print("flops_test:", "pass" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
