#!/usr/bin/env python3
"""Checks bench/decode_ab.py on made-up `attnlab decode` rows: the best of several rounds per (batch, context,
layout), the KV read rate beside it, the ratio of the first setting to the second, a row measured by one setting
only, unmeasured rows left out, and its refusal of a malformed argument.

  python3 tests/decode_ab_test.py REPO_ROOT      exit 0 pass, 1 fail
"""
import json
import os
import sys
import tempfile

from ab_table_check import check_table


def row(B, S, layout, ms, gbps=None):
    return {"experiment": "decode", "B": B, "S": S, "layout": layout, "ms": ms, "kv_read_GBps": gbps}


def main():
    script = os.path.join(sys.argv[1], "bench", "decode_ab.py")
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
        with open(a, "w") as f:
            for r in [row(1, 32768, "contiguous", 0.040, 3350.0), row(1, 32768, "contiguous", 0.038, 3530.0),
                      row(1, 32768, "paged", 0.041, 3270.0), row(1, 4096, "contiguous", None)]:
                f.write(json.dumps(r) + "\n")
        with open(b, "w") as f:
            for r in [row(1, 32768, "contiguous", 0.036, 3720.0), row(1, 32768, "contiguous", 0.037, 3620.0),
                      row(64, 32768, "contiguous", 1.9, 4510.0)]:
                f.write(json.dumps(r) + "\n")
        return check_table(
            "decode_ab_test", script, [f"combine={a}", f"last={b}"],
            expect={
                "header": "| B | S | layout | combine µs (TB/s) | last µs (TB/s) | combine / last |",
                "best of rounds": "| 1 | 32768 | contiguous | 38.00 (3.53) | 36.00 (3.72) | 1.056× |",
                "one side only": "| 1 | 32768 | paged | 41.00 (3.27) | – | – |",
                "other side only": "| 64 | 32768 | contiguous | – | 1900.00 (4.51) | – |",
            },
            left_out={"an unmeasured row was tabled": "4096"})

if __name__ == "__main__":
    sys.exit(main())
