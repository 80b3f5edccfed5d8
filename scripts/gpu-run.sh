#!/usr/bin/env bash
# Runs the GPU tests and a short benchmark from a folder made by scripts/gpu-build.sh, then prints a summary.
#   run.sh [OUT_DIR] [--tests-only | --bench-only]
# Writes OUT_DIR/gpu-tests-*.json (GoogleTest), OUT_DIR/attnlab-<set>.jsonl and OUT_DIR/peers-<set>.jsonl (result
# rows, docs/design.md §4 schema; peers where PyTorch is installed) for each workload set (ATTNLAB_BENCH_SETS, default:
# workloads_fwd workloads sweep_seq), and OUT_DIR/summary.txt.
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

if [[ "$mode" != "--bench-only" ]]; then
  # The fp64 CPU reference dominates the tests' time: run shards in parallel, one per few cores.
  shards="${ATTNLAB_TEST_SHARDS:-$(( $(nproc) > 2 ? $(nproc) / 2 : 1 ))}"
  echo "== GPU tests ($shards shards)"
  pids=()
  for binary in test_gpu test_gpu_flash test_gpu_fp8; do
    for ((i = 0; i < shards; ++i)); do
      GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$dist/bin/$binary" --gtest_brief=1 \
        --gtest_output="json:$out/gpu-tests-$binary-$i.json" > "$out/gpu-tests-$binary-$i.txt" 2>&1 &
      pids+=($!)
    done
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  # test_gpu_embed alone and unsharded, once the others are done: it compares the device's free memory before and
  # after calls (cudaMemGetInfo is device-wide, so another process allocating meanwhile would disturb it).
  "$dist/bin/test_gpu_embed" --gtest_brief=1 --gtest_output="json:$out/gpu-tests-test_gpu_embed.json" \
    > "$out/gpu-tests-test_gpu_embed.txt" 2>&1 || status=1
  # The FP8 helpers (quantize, DelayedScaling) against their CPU side, bit for bit; short, so unsharded too.
  "$dist/bin/test_gpu_fp8_recipe" --gtest_brief=1 --gtest_output="json:$out/gpu-tests-test_gpu_fp8_recipe.json" \
    > "$out/gpu-tests-test_gpu_fp8_recipe.txt" 2>&1 || status=1
  cat "$out"/gpu-tests-*.txt > "$out/gpu-tests.txt"
  grep -E "^\[  FAILED  \]|Failure|error" "$out/gpu-tests.txt" | head -60
  python3 - "$out" <<'PY'
import glob, json, sys
tests = failed = skipped = 0
for f in glob.glob(sys.argv[1] + "/gpu-tests-*.json"):
    for suite in json.load(open(f))["testsuites"]:
        for t in suite["testsuite"]:
            tests += 1
            if t.get("failures"): failed += 1
            elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN": skipped += 1
print(f"GPU tests: {tests - failed - skipped} passed, {failed} failed, {skipped} skipped (of {tests})")
PY
  # How a process holding a Context ends: after a sticky CUDA error, and with the context destroyed at exit. The
  # exit status is the test (77: no GPU).
  for ending in sticky at-exit; do
    "$dist/bin/gpu_teardown" "$ending" > "$out/gpu-teardown-$ending.txt" 2>&1
    rc=$?
    case $rc in
      0) echo "gpu_teardown $ending: passed" ;;
      77) echo "gpu_teardown $ending: skipped ($(tail -1 "$out/gpu-teardown-$ending.txt"))" ;;
      *) echo "gpu_teardown $ending: FAILED (exit $rc): $(tail -3 "$out/gpu-teardown-$ending.txt" | tr '\n' ' ')"
         status=1 ;;
    esac
  done
  # The split-KV kernels with phase stamps compute what the library's compute (tests/split_kv_phases.cu).
  "$dist/bin/split_kv_phases" check > "$out/split-kv-phases.txt" 2>&1
  rc=$?
  case $rc in
    0) echo "split_kv_phases check: passed" ;;
    77) echo "split_kv_phases check: skipped ($(tail -1 "$out/split-kv-phases.txt"))" ;;
    *) echo "split_kv_phases check: FAILED (exit $rc): $(tail -3 "$out/split-kv-phases.txt" | tr '\n' ' ')"
       status=1 ;;
  esac
fi

if [[ "$mode" != "--tests-only" ]]; then
  echo "== benchmark: attnlab paths"
  sets="${ATTNLAB_BENCH_SETS:-workloads_fwd workloads sweep_seq}"
  for w in $sets; do
    "$dist/bin/attnlab" bench --workloads "$dist/bench/$w.json" --paths ${ATTNLAB_BENCH_PATHS:-flash,cudnn,cuda-naive} --jsonl "$out/attnlab-$w.jsonl" \
      || status=1
  done
  echo "== benchmark: peers (PyTorch SDPA flash / cudnn)"
  for w in $sets; do
    python3 "$dist/bench/peers.py" --workloads "$dist/bench/$w.json" --peers ${ATTNLAB_BENCH_PEERS:-torch-flash,torch-cudnn} \
      --out "$out/peers-$w.jsonl" || true
  done
  python3 "$dist/bench/summary.py" "$out"/attnlab-*.jsonl "$out"/peers-*.jsonl | tee "$out/summary.txt"
fi
exit $status
