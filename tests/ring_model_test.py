#!/usr/bin/env python3
"""Checks bench/ring_model.py's arithmetic (docs/ring.md) on rows made by `attnlab ring` and `attnlab bench` on the
CPU: every ring size with measured block calls gets a forward time of R · max(c_fwd, x) and a speed-up of the single
call's time over it, recomputed here; a size without block rows says "not measured".

  python3 tests/ring_model_test.py REPO_ROOT ATTNLAB_BINARY      exit 0 pass, 1 fail
"""
import json
import os
import subprocess
import sys
import tempfile


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr}")
    return done.stdout


def main() -> int:
    repo, attnlab = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        ring, blocks = os.path.join(tmp, "ring.jsonl"), os.path.join(tmp, "blocks.jsonl")
        run([attnlab, "ring", "--device", "cpu", "-T", "128", "--heads", "4/2", "-H", "16", "--ranks", "2",
             "--repeats", "1", "--warmup", "0", "--jsonl", ring])
        for extra in ([], ["--backward"]):
            run([attnlab, "bench", "--device", "cpu", "-B", "1", "-T", "64", "-S", "32", "-N", "4", "-K", "2", "-H",
                 "16", "--paths", "cpu-flash", "--warmup", "0", "--repeats", "1", "--groups", "1", "--jsonl", blocks]
                + extra)
        bandwidth = 0.001  # GB/s: slow enough that the transfer term decides, so both branches of max() are seen
        table = run([sys.executable, os.path.join(repo, "bench", "ring_model.py"), "--ring", ring, "--blocks", blocks,
                     "--bandwidth-gbps", str(bandwidth), "--ranks", "2,8"])
        single = next(json.loads(l) for l in open(ring) if json.loads(l)["ranks"] == 0)
        c_fwd = next(json.loads(l)["ms_median"] for l in open(blocks) if json.loads(l)["direction"] == "fwd")
    lines = [l for l in table.splitlines() if l.startswith("| ")]
    two = next((l for l in lines if l.startswith("| 2 |")), None)
    eight = next((l for l in lines if l.startswith("| 8 |")), None)
    failures = []
    if two is None or eight is None:
        failures.append(f"rows for R = 2 and 8 expected:\n{table}")
    else:
        cells = [c.strip() for c in two.strip("|").split("|")]
        x = 1 * 64 * 2 * (16 + 16) * 2 / (bandwidth * 1e9) * 1e3
        forward = 2 * max(c_fwd, x)
        if abs(float(cells[5]) - forward) > 0.01 * forward + 0.01:
            failures.append(f"forward {cells[5]} ms, expected {forward:.2f}")
        if abs(float(cells[6].rstrip("x")) - single["fwd_ms"] / forward) > 0.01:
            failures.append(f"speed-up {cells[6]}, expected {single['fwd_ms'] / forward:.2f}")
        if "not measured" not in eight:
            failures.append(f"R = 8 has no block rows, yet: {eight}")
    for f in failures:
        print("FAIL:", f)
    print("ring_model: " + ("ok" if not failures else f"{len(failures)} failure(s)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
