#!/usr/bin/env bash
# What a ring-attention change must show, in one run on a GPU machine, from a folder made by scripts/gpu-build.sh
# (there it is ring-check.sh). Each step is bounded in time and leaves its files as it goes:
#   1. the ring GPU tests (test_gpu: GpuRing*): the loopback ring on one GPU for 1–4 ranks, both layouts, causal
#      and not, cudnn and flash blocks, non-blocking and legacy streams; NCCL over every GPU of the machine, with
#      libnccl.so.2 found on the library path or in the Python packages (torch's nvidia-nccl wheel);
#   2. compute-sanitizer memcheck over a reduced set (GpuRingFeatures: one-token chunks, 114-row slices, the legacy
#      default stream);
#   3. `attnlab ring` at T = 131072, causal, GQA 32/8, H 128, bf16, on 1, 2 and 4 ranks (NCCL where there is a GPU
#      per rank, else the loopback on one GPU), forward and backward; ATTNLAB_RING_ARGS adds flags.
#   ATTNLAB_RING_STEPS lists the steps to run (default "1 2 3").
#   ring-check.sh [OUT_DIR]
# Writes OUT_DIR/{tests.txt,memcheck.txt,ring.txt,ring.jsonl,summary.txt}. Exits 1 when a test fails, the sanitizer
# reports anything, a ring differs from the single call or a step runs out of time.
set -uo pipefail
dist="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$dist/ring-check}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
nccl_dir=""
for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  if [[ -e "$site/nvidia/nccl/lib/libnccl.so.2" ]]; then nccl_dir="$site/nvidia/nccl/lib"; break; fi
done
export LD_LIBRARY_PATH="$dist/lib${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared hosts
steps=" ${ATTNLAB_RING_STEPS:-1 2 3} "
status=0
SECONDS=0
say() { echo "$*" | tee -a "$out/summary.txt"; }
bounded() { timeout -k 10 "$@"; }
say "libnccl.so.2: ${nccl_dir:-not found in the Python packages (the library path decides)}"

if [[ "$steps" == *" 1 "* ]]; then
  bounded 300 "$dist/bin/test_gpu" --gtest_brief=1 --gtest_filter='GpuRing*:*/GpuRingLoopback.*' > "$out/tests.txt" 2>&1 || status=1
  say "tests: $(grep -hoE '^\[  PASSED  \] [0-9]+ tests?' "$out/tests.txt" || echo 'none passed')," \
      "$(grep -c '^\[  FAILED  \] [A-Za-z]' "$out/tests.txt") failed," \
      "$(grep -hoE '^\[  SKIPPED \] [0-9]+ tests?' "$out/tests.txt" || echo '0 skipped') (${SECONDS}s)"
  grep -E '^\[  FAILED  \] [A-Za-z]|Failure$|skipped: ' "$out/tests.txt" | head -20 | tee -a "$out/summary.txt"
fi

if [[ "$steps" == *" 2 "* ]]; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  bounded 240 "$sanitizer" --tool memcheck --error-exitcode 3 "$dist/bin/test_gpu" --gtest_brief=1 \
    --gtest_filter='GpuRingFeatures.*' > "$out/memcheck.txt" 2>&1 || status=1
  say "memcheck: $(grep -hE 'ERROR SUMMARY' "$out/memcheck.txt" | tail -1) (${SECONDS}s)"
fi

if [[ "$steps" == *" 3 "* ]]; then
  # shellcheck disable=SC2086
  bounded 300 "$dist/bin/attnlab" ring --ranks 1,2,4 --jsonl "$out/ring.jsonl" ${ATTNLAB_RING_ARGS:-} \
    > "$out/ring.txt" 2>&1 || status=1
  cat "$out/ring.txt" | tee -a "$out/summary.txt"
  say "attnlab ring: $(wc -l < "$out/ring.jsonl" 2>/dev/null || echo 0) rows (${SECONDS}s)"
fi
say "ring-check: status $status (${SECONDS}s)"
exit $status
