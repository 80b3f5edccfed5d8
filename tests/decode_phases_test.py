#!/usr/bin/env python3
"""bench/decode_phases.py on three synthetic calls of two split blocks and one combine block each (clocks of 2 cycles
per ns): the call's layout and the split blocks' phases as computed by hand, the first call skipped; a file that is
not split_kv_phases output is refused with exit status 1.

  python3 tests/decode_phases_test.py REPO_ROOT      exit 0 pass, 1 fail
"""
import os
import subprocess
import sys
import tempfile

HEADER = ("# split_kv_phases B=1 S=32768 N=32 K=8 H=128 bf16 splits=2 calls=3 groups=7 plain_us=39.000 "
          "stamped_us=39.500 kv_bytes=134217728\n")
COLUMNS = "call,kernel,block,sm,tiles," + ",".join(f"ns{i}" for i in range(6)) + "," + ",".join(
    f"cycles{i}" for i in range(6)) + "\n"


def record(call, kernel, block, tiles, ns):
    cycles = [2 * t + 7 if t else 0 for t in ns]
    return ",".join(str(x) for x in [call, kernel, block, 3, tiles] + ns + cycles) + "\n"


def synthetic():
    lines = [HEADER, COLUMNS]
    for call in range(3):
        base = 1_000_000 + 20_000 * call
        lines.append(record(call, "split", 0, 4, [base - 500, base, base + 200, base + 1200, base + 9000, base + 9500]))
        lines.append(record(call, "split", 1, 4,
                            [base - 400, base + 300, base + 500, base + 1500, base + 10000, base + 10300]))
        lines.append(record(call, "combine", 0, 2, [base + 100, base + 11000, 0, 0, 0, base + 12000]))
    return "".join(lines)


def main() -> int:
    repo = sys.argv[1]
    script = os.path.join(repo, "bench", "decode_phases.py")
    failures = []
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(synthetic())
    done = subprocess.run([sys.executable, script, f.name, "--skip", "1"], capture_output=True, text=True)
    os.unlink(f.name)
    out = done.stdout
    expect = [
        "2 splits; event time per call 39.000 µs unstamped, 39.500 µs stamped; 2 calls; ns clock steps of ≥ 200 ns",
        "K/V read rate over the event time: 3.44 TB/s",
        "| first split entry | -0.50 | -0.50 | -0.50 |",
        "| split start spread | 0.30 | 0.30 | 0.30 |",
        "| split end | 10.30 | 10.30 | 10.30 |",
        "| combine start | 11.00 | 11.00 | 11.00 |",
        "| combine end | 12.00 | 12.00 | 12.00 |",
        "| gap to next call | 8.00 | 8.00 | 8.00 |",
        "| wait | 0.60 | 0.70 | 0.70 |",
        "| lengths | 0.20 | 0.20 | 0.20 |",
        "| first tile | 1.00 | 1.00 | 1.00 |",
        "| loop | 8.15 | 8.50 | 8.50 |",
        "| epilogue | 0.40 | 0.50 | 0.30 |",
        "Split blocks on 1–1 SMs per call, at most 2 on one SM.",
    ]
    if done.returncode != 0:
        failures.append(f"exit {done.returncode}: {done.stderr}")
    for line in expect:
        if line not in out:
            failures.append(f"missing line: {line!r}")
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(COLUMNS)
    bad = subprocess.run([sys.executable, script, f.name], capture_output=True, text=True)
    os.unlink(f.name)
    if bad.returncode != 1 or "not a split_kv_phases file" not in bad.stderr:
        failures.append(f"a file without the header: exit {bad.returncode}, stderr {bad.stderr!r}")
    for line in failures:
        print("FAIL:", line)
    if failures:
        print(out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
