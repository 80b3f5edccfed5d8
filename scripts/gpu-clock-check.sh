#!/usr/bin/env bash
# Cycles against clock at the shapes of the Hopper kernel's TFLOP/s bars, in one run on an H100/H200, from a folder
# made by scripts/gpu-build.sh (there it is clock-check.sh): lab/clock_probe.cu's back-to-back calls (400, in groups
# of 20, as `attnlab bench` times them) for flash-sm90 at its default version and for cudnn, alternating, two rounds,
# at head dim 128 (B = 2, T = 8k, N = 16; B = 1, T = 16k, N = 16) and 256 (B = 1, T = 16k, N = 8, without a mask and
# causal); then bench/clock_table.py's table. A kernel that needs fewer cycles than its peer yet runs slower clocks
# is held by the power limit, not by its schedule (docs/perf-notes-flash-sm90.md, "What holds head dim 256").
# ATTNLAB_FLASH_CONFIG=N measures version sN instead of the default.
#   clock-check.sh [OUT_DIR]
# Writes OUT_DIR/{clock-flash-sm90.jsonl,clock-cudnn.jsonl,clock-table.md}. Exits 1 when a probe fails.
set -uo pipefail
dist="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$dist/clock-check}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export LD_LIBRARY_PATH="$dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$out/gpu.txt"
shapes=("2 8192 16 128 0" "1 16384 16 128 0" "1 16384 8 256 0" "1 16384 8 256 1")
rm -f "$out/clock-flash-sm90.jsonl" "$out/clock-cudnn.jsonl"
for round in 1 2; do
  for shape in "${shapes[@]}"; do
    for path in flash-sm90 cudnn; do
      # shellcheck disable=SC2086  # the shape is five arguments
      timeout 60 "$dist/bin/clock_probe" $shape "$path" 400 0 20 >> "$out/clock-$path.jsonl" 2>&1 || status=1
      echo "round $round, $shape, $path: $(tail -1 "$out/clock-$path.jsonl")"
    done
  done
done
python3 "$dist/bench/clock_table.py" flash-sm90="$out/clock-flash-sm90.jsonl" cudnn="$out/clock-cudnn.jsonl" \
  | tee "$out/clock-table.md"
exit $status
