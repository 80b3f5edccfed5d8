"""The check shared by the tests of bench/'s A/B table scripts (decode_ab.py, clock_table.py), which take
NAME=ROWS.jsonl arguments and print a Markdown table: the run exits 0, every expected line is in the table, no line
holds what must be left out, and a bare file (no NAME=) is refused by name. Each test makes up its rows and imports
this from its own folder.
"""
import subprocess
import sys


def check_table(test_name, script, named_files, expect, left_out):
    """named_files: ["NAME=PATH", …]; expect: {what: line}; left_out: {what: text no line may hold}.
    Prints each failure and a verdict; returns the exit status (0 pass, 1 fail)."""
    failures = []
    out = subprocess.run([sys.executable, script, *named_files], capture_output=True, text=True)
    if out.returncode != 0:
        failures.append(f"exit {out.returncode}: {out.stderr}")
    lines = out.stdout.splitlines()
    for what, line in expect.items():
        if line not in lines:
            failures.append(f"{what}: {line!r} not in\n{out.stdout}")
    for what, text in left_out.items():
        if any(text in line for line in lines):
            failures.append(what)
    bare = named_files[0].split("=", 1)[1]
    bad = subprocess.run([sys.executable, script, bare], capture_output=True, text=True)
    if bad.returncode == 0 or "NAME=ROWS.jsonl" not in bad.stderr:
        failures.append(f"a bare file was accepted: {bad.returncode} {bad.stderr}")
    for f in failures:
        print("FAIL:", f)
    print(f"{test_name}:", "pass" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0
