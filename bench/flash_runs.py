"""What bench/flash_configs.py and bench/flash_ab.py share: one `attnlab bench --paths flash-sm80` run whose rows come
back as dicts, a row's workload label, and the plain-text table of times per variant with each one's ratio to the
first."""
import json
import subprocess
import sys
import tempfile


def bench_flash(attnlab, workloads, groups, env, what):
    """Rows of `attnlab bench --paths flash-sm80` (the sm_80 family) over a workloads file, run with `env`; exits naming `what` if it fails."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as rows_file:
        done = subprocess.run([attnlab, "bench", "--workloads", workloads, "--paths", "flash-sm80", "--groups", str(groups),
                               "--jsonl", rows_file.name], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"{what}: attnlab bench failed:\n{done.stderr}")
        return [json.loads(line) for line in open(rows_file.name) if line.strip()]


def workload_label(row):
    """The shape of a result row, e.g. "B=4 T=4096 N=16/16 H=128 causal"."""
    causal = " causal" if row["causal"] else ""
    return f"B={row['B']} T={row['T']} N={row['N']}/{row['K']} H={row['Hqk']}{causal}"


def time_cells(times):
    """ms per variant (None: did not run), then the first variant's time over each other's."""
    cells = [f"{t:.4f}" if t else "—" for t in times]
    cells += [f"{times[0] / t:.3f}×" if t and times[0] else "—" for t in times[1:]]
    return cells


def print_columns(lines):
    """Rows of cells, the first column left-aligned and the others right-aligned."""
    widths = [max(len(line[k]) for line in lines) for k in range(len(lines[0]))]
    for line in lines:
        print("  ".join(cell.ljust(w) if k == 0 else cell.rjust(w) for k, (cell, w) in enumerate(zip(line, widths))))
