#!/usr/bin/env python3
"""Checks bench/clock_table.py on made-up lab/clock_probe.cu output: only the closing lines of medians are read
(per-group lines are not), the best of several rounds per shape, the probe's cycles and TFLOP/s (halved under a
causal mask), the first run's time and cycles over the others', a shape measured by one run only, and its refusal
of a malformed argument.

  python3 tests/clock_table_test.py REPO_ROOT      exit 0 pass, 1 fail
"""
import json
import os
import sys
import tempfile

from ab_table_check import check_table


def closing(B, T, N, H, causal, path, ms, mhz, mcycles):
    return {"B": B, "T": T, "N": N, "H": H, "causal": causal, "path": path, "calls": 400, "gap_ms": 0, "group": 20,
            "ms_median": ms, "mhz_median": mhz, "mcycles_median": mcycles}


def group(call, ms, mhz):
    return {"call": call, "ms": ms, "mhz": mhz, "mcycles": ms * mhz / 1000.0}


def main():
    script = os.path.join(sys.argv[1], "bench", "clock_table.py")
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
        with open(a, "w") as f:
            # Two rounds at 256 (the second faster), a group line faster than either that must not count, a causal
            # row, and a shape b never ran.
            for r in [group(0, 1.0, 1980), closing(1, 16384, 8, 256, False, "flash-sm90", 3.20, 1575, 4.92),
                      closing(1, 16384, 8, 256, False, "flash-sm90", 3.14, 1603, 4.89),
                      closing(1, 16384, 8, 256, True, "flash-sm90", 1.70, 1600, 2.70),
                      closing(2, 8192, 16, 128, False, "flash-sm90", 1.80, 1590, 2.84)]:
                f.write(json.dumps(r) + "\n")
            f.write("clock_probe: a line that is not JSON\n")
        with open(b, "w") as f:
            for r in [closing(1, 16384, 8, 256, False, "cudnn", 3.35, 1710, 5.63),
                      closing(1, 16384, 8, 256, True, "cudnn", 2.00, 1700, 3.40)]:
                f.write(json.dumps(r) + "\n")
        # 4 · 1 · 8 · 16384² · 256 = 2.199e12 FLOPs: 700 TFLOP/s in 3.14 ms, 656 in 3.35; causal half of it.
        return check_table(
            "clock_table_test", script, [f"s13={a}", f"cudnn={b}"],
            expect={
                "header": "| B | T | N | H | causal | run | ms | MHz | Mcycles | TFLOP/s | s13 ms / run's | "
                          "s13 cycles / run's |",
                "best of rounds": "| 1 | 16384 | 8 | 256 | no | s13 | 3.1400 | 1603 | 4.890 | 700 | – | – |",
                "the peer and its ratios": "| 1 | 16384 | 8 | 256 | no | cudnn | 3.3500 | 1710 | 5.630 | 656 | "
                                           "0.937 | 0.869 |",
                "causal halves the FLOPs": "| 1 | 16384 | 8 | 256 | yes | s13 | 1.7000 | 1600 | 2.700 | 647 | – | – |",
                "one run only": "| 2 | 8192 | 16 | 128 | no | s13 | 1.8000 | 1590 | 2.840 | 611 | – | – |",
            },
            left_out={"a per-group line was tabled": "| 1.0000 |"})

if __name__ == "__main__":
    sys.exit(main())
