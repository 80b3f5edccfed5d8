#!/usr/bin/env bash
# Everything a serving-kernel change must show, in one run on a GPU machine, from a folder made by
# scripts/gpu-build.sh (there it is serving-check.sh). Each step is bounded in time and leaves its files as it goes:
#   1. the serving GPU tests (test_gpu: GpuVarlenForward*, GpuAppendKV*): the split-KV kernel, the sm_90a kernel
#      and cuDNN's ragged / paged SDPA against the fp64 reference, append_kv against the CPU append;
#   2. compute-sanitizer memcheck over a reduced set (device lengths out of range, a caller workspace, the combine
#      at every count of splits, append_kv)
#      and racecheck over one split decode (the stages reused as the merge buffer);
#   3. `attnlab decode` over the decode grid (batch 1 and 64, contexts 1k … 128k, GQA 32/8, contiguous and paged
#      with 64-key pages; MHA and MQA at 32k) on paths auto and cudnn, and bench/decode_peers.py (torch SDPA's
#      backends, FlashAttention's flash_attn_with_kvcache where installed) on the same grid;
#   4. `attnlab prefill` on the skewed (128 … 8k) and equal (8 × 2k) mixes, with and without a causal mask, the
#      packed call on path auto (the sm_90a kernel where core/dispatch_policy.h's varlen rule picks it), on
#      flash-sm80 (the split-KV kernel) and on cudnn (ragged), beside the padded and uniform calls;
#   5. a decode step laid out block by block: `split_kv_phases check` (the stamped kernels' output equals the
#      library's byte for byte), then `split_kv_phases measure` at B = 1 and 64, S = 32k, GQA 32/8, and
#      bench/decode_phases.py's tables from its stamps (tests/split_kv_phases.cu).
#   6. the splits merged in thread-block clusters (Tuning::split_kv_cluster_merge, sm_90) against the combine
#      kernel: their test (GpuVarlenForward.SplitsMergeInClusters) under memcheck, racecheck and synccheck, then
#      `attnlab decode` at batch 1 (contexts 256 … 32k, contiguous and paged) with ATTNLAB_SPLIT_KV_CLUSTER_MERGE
#      0 and 1 alternating, two rounds, and bench/decode_ab.py's table of the best µs per call of each
#      (cluster.md); from 2048 keys the rule keeps the combine, so 4k and 32k are the controls (equal within the
#      run's spread);
#   ATTNLAB_SERVING_STEPS lists the steps to run (default "1 2 3 4"; 5 and 6 on request).
#   serving-check.sh [OUT_DIR]
# Writes OUT_DIR/{tests.txt,memcheck.txt,racecheck.txt,synccheck.txt,decode.jsonl,decode-peers.jsonl,
# prefill.jsonl,phases-b*.csv,phases.md,cluster-*.txt,decode-cluster-*.jsonl,cluster.md,summary.txt}. Exits 1 when
# a test fails, a sanitizer reports anything or a step runs out of time.
set -uo pipefail
dist="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$dist/serving-check}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export LD_LIBRARY_PATH="$dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
steps=" ${ATTNLAB_SERVING_STEPS:-1 2 3 4} "
status=0
SECONDS=0
say() { echo "$*" | tee -a "$out/summary.txt"; }
bounded() { timeout -k 10 "$@"; }

if [[ "$steps" == *" 1 "* ]]; then
  bounded 300 "$dist/bin/test_gpu" --gtest_brief=1 --gtest_filter='GpuVarlenForward*:GpuAppendKV*' \
    > "$out/tests.txt" 2>&1 || status=1
  say "tests: $(grep -hoE '^\[  PASSED  \] [0-9]+ tests?' "$out/tests.txt" || echo 'none passed')," \
      "$(grep -c '^\[  FAILED  \] [A-Za-z]' "$out/tests.txt") failed (${SECONDS}s)"
  grep -E '^\[  FAILED  \] [A-Za-z]|Failure$' "$out/tests.txt" | head -20 | tee -a "$out/summary.txt"
fi

if [[ "$steps" == *" 2 "* ]]; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  bounded 240 "$sanitizer" --tool memcheck --error-exitcode 3 "$dist/bin/test_gpu" --gtest_brief=1 \
    --gtest_filter='GpuVarlenForward*.DeviceLengthsOutOfRangeStayInBounds:GpuVarlenForward*.CallerWorkspace:GpuVarlenForward.CombineTakesEveryCount:GpuAppendKV*:GpuVarlenForwardSm90.PartialBlocksBetweenSequences' \
    > "$out/memcheck.txt" 2>&1 || status=1
  say "memcheck: $(grep -hE 'ERROR SUMMARY' "$out/memcheck.txt" | tail -1) (${SECONDS}s)"
  bounded 240 "$sanitizer" --tool racecheck --error-exitcode 3 "$dist/bin/test_gpu" --gtest_brief=1 \
    --gtest_filter='GpuVarlenForward.CallerWorkspace:GpuVarlenForwardSm90.PartialBlocksBetweenSequences' \
    > "$out/racecheck.txt" 2>&1 || status=1
  say "racecheck: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/racecheck.txt" | tail -1) (${SECONDS}s)"
  bounded 240 "$sanitizer" --tool synccheck --error-exitcode 3 "$dist/bin/test_gpu" --gtest_brief=1 \
    --gtest_filter='GpuVarlenForwardSm90.PartialBlocksBetweenSequences' > "$out/synccheck.txt" 2>&1 || status=1
  say "synccheck: $(grep -hE 'ERROR SUMMARY' "$out/synccheck.txt" | tail -1) (${SECONDS}s)"
fi

if [[ "$steps" == *" 3 "* ]]; then
  grid=(--batch 1,64 --context 1024,4096,16384,32768,131072 --head-dim 128 --q-len 1)
  bounded 300 "$dist/bin/attnlab" decode "${grid[@]}" --heads 32/8 --layout contiguous,paged --page-size 64 \
    --path auto,cudnn \
    --jsonl "$out/decode.jsonl" > "$out/decode.txt" 2>&1 || status=1
  bounded 120 "$dist/bin/attnlab" decode --batch 1,64 --context 32768 --head-dim 128 --heads 32/32,32/1 \
    --path auto,cudnn \
    --layout contiguous,paged --page-size 64 --jsonl "$out/decode.jsonl" >> "$out/decode.txt" 2>&1 || status=1
  say "attnlab decode: $(wc -l < "$out/decode.jsonl") rows (${SECONDS}s)"
  bounded 200 python3 "$dist/bench/decode_peers.py" --batch 1,64 --context 1024,4096,16384,32768,131072 \
    --heads 32/8 --head-dim 128 --out "$out/decode-peers.jsonl" > "$out/decode-peers.txt" 2>&1 || status=1
  say "peers: $(wc -l < "$out/decode-peers.jsonl" 2>/dev/null || echo 0) rows (${SECONDS}s)"
fi
if [[ "$steps" == *" 4 "* ]]; then
  for mix in skewed equal; do
    for mask in "" --causal; do
      for path in auto flash-sm80 cudnn; do
        bounded 120 "$dist/bin/attnlab" prefill --mix "$mix" --heads 32/8 --head-dim 128 $mask --path "$path" \
          --jsonl "$out/prefill.jsonl" >> "$out/prefill.txt" 2>&1 || status=1
      done
    done
  done
  say "attnlab prefill: $(wc -l < "$out/prefill.jsonl" 2>/dev/null || echo 0) rows (${SECONDS}s)"
fi
if [[ "$steps" == *" 5 "* ]]; then
  bounded 120 "$dist/bin/split_kv_phases" check > "$out/phases-check.txt" 2>&1 || status=1
  say "phase stamps: $(tail -1 "$out/phases-check.txt") (${SECONDS}s)"
  for batch in 1 64; do
    bounded 120 "$dist/bin/split_kv_phases" measure --batch "$batch" --context 32768 --heads 32/8 \
      --out "$out/phases-b$batch.csv" >> "$out/phases-check.txt" 2>&1 || status=1
    say "$(tail -1 "$out/phases-check.txt")"
  done
  python3 "$dist/bench/decode_phases.py" "$out"/phases-b*.csv > "$out/phases.md" || status=1
  cat "$out/phases.md"
fi

if [[ "$steps" == *" 6 "* ]]; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  for tool in memcheck racecheck synccheck; do
    bounded 240 "$sanitizer" --tool "$tool" --error-exitcode 3 "$dist/bin/test_gpu" --gtest_brief=1 \
      --gtest_filter='GpuVarlenForward.SplitsMergeInClusters' > "$out/cluster-$tool.txt" 2>&1 || status=1
    say "cluster merge, $tool: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/cluster-$tool.txt" | tail -1)" \
        "$(grep -hoE '^\[  (PASSED|FAILED)  \] [0-9]+ tests?' "$out/cluster-$tool.txt" | tr '\n' ' ')(${SECONDS}s)"
  done
  for round in 1 2; do
    for merge in 0 1; do
      ATTNLAB_SPLIT_KV_CLUSTER_MERGE=$merge bounded 120 "$dist/bin/attnlab" decode --batch 1 \
        --context 256,512,1024,4096,32768 --heads 32/8 --head-dim 128 --q-len 1 --layout contiguous,paged \
        --page-size 64 --path auto --jsonl "$out/decode-cluster-$merge.jsonl" >> "$out/decode-cluster.txt" 2>&1 ||
        status=1
    done
  done
  python3 "$dist/bench/decode_ab.py" combine="$out/decode-cluster-0.jsonl" cluster="$out/decode-cluster-1.jsonl" \
    > "$out/cluster.md" || status=1
  say "cluster merge against the combine, batch 1, GQA 32/8, Hqk 128 (best of 2 rounds) (${SECONDS}s):"
  tee -a "$out/summary.txt" < "$out/cluster.md"
fi

say "serving-check: status $status (${SECONDS}s)"
exit $status
