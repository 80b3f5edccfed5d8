#!/usr/bin/env python3
"""Checks bench/flash_ab.py without a GPU: two stand-in build folders whose bin/attnlab writes rows for the workloads
it is given (the second build 4 % faster, each run as slow as asked), then the A/B's table, its appended rows, --only, the time limit and its
refusals.

  python3 tests/flash_ab_test.py REPO_ROOT      exit 0 pass, 1 fail
"""
import json
import os
import subprocess
import sys
import tempfile

FAKE_ATTNLAB = """#!/usr/bin/env python3
import json, os, sys, time
time.sleep(float(os.environ.get("FAKE_ATTNLAB_SECONDS", "0")))
args = sys.argv
workloads = json.load(open(args[args.index("--workloads") + 1]))["workloads"]
with open(args[args.index("--jsonl") + 1], "a") as out:
    for w in workloads:
        row = dict(w, path="flash", ok=True, ms_median=SPEED * w["T"] / 1000.0, note=w["name"] + "; 1 input set")
        out.write(json.dumps(row) + "\\n")
"""


def make_build(root, name, speed):
    os.makedirs(os.path.join(root, name, "bin"))
    os.makedirs(os.path.join(root, name, "lib"))
    path = os.path.join(root, name, "bin", "attnlab")
    with open(path, "w") as f:
        f.write(FAKE_ATTNLAB.replace("SPEED", repr(speed)))
    os.chmod(path, 0o755)
    return os.path.join(root, name)


def main():
    repo = sys.argv[1]
    script = os.path.join(repo, "bench", "flash_ab.py")
    workloads = os.path.join(repo, "bench", "workloads_fwd.json")
    failures = []

    def check(what, ok):
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        a, b = make_build(tmp, "old", 1.0), make_build(tmp, "new", 0.96)
        rows = os.path.join(tmp, "ab.jsonl")

        def run(*extra, seconds=0.0):
            env = dict(os.environ, FAKE_ATTNLAB_SECONDS=str(seconds))
            return subprocess.run([sys.executable, script, "--builds", f"{a},{b}", "--workloads", workloads, *extra],
                                  capture_output=True, text=True, env=env)

        done = run("--only", "^h128-t(512|4096)$", "--rounds", "2", "--out", rows)
        check(f"a plain A/B exits 0 (got {done.returncode}: {done.stderr})", done.returncode == 0)
        table = done.stdout.splitlines()
        check("the table has a header, 4 workloads (2 shapes, causal and not) and a footer", len(table) == 6)
        check("the second build reads 1.042× the first", all("1.042×" in line for line in table[1:5]))
        written = [json.loads(line) for line in open(rows)]
        check(f"2 builds × 2 rounds × 4 workloads rows appended (got {len(written)})", len(written) == 16)
        check("every row's note names its build and round",
              all(r["note"].startswith(("A/B: build old, round", "A/B: build new, round")) for r in written))
        check("builds alternate by round", [r["note"][:24] for r in written[::4]] ==
              ["A/B: build old, round 1;", "A/B: build new, round 1;", "A/B: build old, round 2;",
               "A/B: build new, round 2;"])

        # Each stand-in run takes 2 s: the first starts at once, the second would start past the 1 s limit.
        done = run("--only", "codelab", "--rounds", "3", "--time-limit", "1", seconds=2.0)
        check("the time limit stops after the first run and still prints the table",
              done.returncode == 0 and "time limit reached before round 1 of new" in done.stderr and
              "bf16 B=4 T=128" in done.stdout)

        for extra, message in ((["--only", "no-such-workload"], "no workload left"),
                               (["--names", "x"], "1 names for 2 builds"),
                               (["--rounds", "0"], "are ≥ 1")):
            done = run(*extra)
            check(f"refuses {extra}: exit 1 and '{message}'", done.returncode == 1 and message in done.stderr)
        done = subprocess.run([sys.executable, script, "--builds", a, "--workloads", workloads], capture_output=True,
                              text=True)
        check("refuses a single build", done.returncode == 1 and "at least two folders" in done.stderr)

    for f in failures:
        print(f"FAILED: {f}")
    print("flash_ab_test: " + ("passed" if not failures else f"{len(failures)} check(s) failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
