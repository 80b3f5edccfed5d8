#!/usr/bin/env bash
# Runs the GPU tests and a short benchmark from a folder made by scripts/gpu-build.sh, then prints a summary.
#   run.sh [OUT_DIR] [--quick]
# Writes OUT_DIR/gpu-tests.json (GoogleTest), OUT_DIR/attnlab.jsonl and OUT_DIR/peers.jsonl (result rows,
# DESIGN §4 schema; peers where PyTorch/JAX are installed), OUT_DIR/summary.txt.
set -uo pipefail
dist="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$dist/results}"
mode="${2:-full}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
"$dist/bin/attnlab" check | tee "$out/check.txt"

echo "== GPU tests"
"$dist/bin/test_gpu" --gtest_output="json:$out/gpu-tests.json" --gtest_brief=1 2>&1 | tee "$out/gpu-tests.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

if [[ "$mode" != "--tests-only" ]]; then
  echo "== benchmark: attnlab paths"
  for w in workloads sweep_seq; do
    "$dist/bin/attnlab" bench --workloads "$dist/bench/$w.json" --paths cudnn,cuda-naive --jsonl "$out/attnlab-$w.jsonl" \
      || status=1
  done
  echo "== benchmark: peers (PyTorch SDPA flash / cudnn)"
  for w in workloads sweep_seq; do
    python3 "$dist/bench/peers.py" --workloads "$dist/bench/$w.json" --peers torch-flash,torch-cudnn \
      --out "$out/peers-$w.jsonl" || true
  done
  python3 "$dist/bench/summary.py" "$out"/attnlab-*.jsonl "$out"/peers-*.jsonl | tee "$out/summary.txt"
fi
exit $status
