"""examples/codelab_jax.py runs end to end (short: 2 repeats, one sweep length) and prints every cell's table,
with attnlab's rows within float tolerance of the from-scratch attention. Skipped where JAX is not installed."""
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("jax", reason="JAX is not installed: the JAX codelab example is skipped")
EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "codelab_jax.py"


def test_codelab_example_prints_every_cell():
    run = subprocess.run([sys.executable, str(EXAMPLE), "--repeats", "2", "--sweep", "128"], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    for title in ("1. The device", "2. Attention inputs", "3–5. From scratch vs fused", "6. Causal masking",
                  "7. Time per causal call", "8. Causal sequence sweep", "9. MHA, GQA, MQA"):
        assert title in run.stdout, title
    diffs = re.findall(r"attnlab \(auto\)\s+\(4, 128, 8, 64\)\s+([0-9.e+-]+)", run.stdout)
    assert len(diffs) == 2 and all(float(d) < 2e-2 for d in diffs), run.stdout
