#!/usr/bin/env python3
"""bench/ncu_stalls.py on a four-instruction source page (tests/data/ncu_source_page.csv): samples summed by opcode
(predicate stripped, first word of the mnemonic) and by reason, shares of the kernel's 100 samples; a file without
the sample column is refused with exit status 1.

  python3 tests/ncu_stalls_test.py REPO_ROOT      exit 0 pass, 1 fail
"""
import os
import subprocess
import sys
import tempfile


def main() -> int:
    repo = sys.argv[1]
    script = os.path.join(repo, "bench", "ncu_stalls.py")
    page = os.path.join(repo, "tests", "data", "ncu_source_page.csv")
    failures = []
    done = subprocess.run([sys.executable, script, page], capture_output=True, text=True)
    out = done.stdout
    expect = [
        "void k(int): 100 samples",
        "stall reasons: wait 48.0 %, barrier 40.0 %, selected 12.0 %",
        "| WARPGROUP | 40.0 % | 4 | barrier 40.0 % |",
        "| MUFU | 40.0 % | 200 | wait 36.0 %, selected 4.0 % |",
        "| FADD | 20.0 % | 200 | wait 12.0 %, selected 8.0 % |",
    ]
    if done.returncode != 0:
        failures.append(f"exit {done.returncode}: {done.stderr}")
    for line in expect:
        if line not in out:
            failures.append(f"missing line: {line!r}")
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write('"Kernel Name","k"\n"Address","Source"\n"0x0","NOP"\n')
    bad = subprocess.run([sys.executable, script, f.name], capture_output=True, text=True)
    os.unlink(f.name)
    if bad.returncode != 1 or "not an ncu source page" not in bad.stderr:
        failures.append(f"a page without samples: exit {bad.returncode}, stderr {bad.stderr!r}")
    for f in failures:
        print("FAIL:", f)
    if failures:
        print(out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
