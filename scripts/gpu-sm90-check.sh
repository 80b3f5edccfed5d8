#!/usr/bin/env bash
# Everything a flash-sm90 (Hopper kernel) change must show, in one run on an H100/H200, from a folder made by
# scripts/gpu-build.sh (there it is sm90-check.sh). Each step is bounded in time and leaves its files as it goes:
#   1. the flash-sm90 GPU tests and path flash's choice between the families (test_gpu_flash, *Sm90* and
#      *FlashFamily*, one process per test, as many at a time as cores, within 480 s (ATTNLAB_SM90_TEST_SECONDS);
#      ATTNLAB_SM90_FILTER names another gtest filter, e.g. the tests a run left, which its summary lists);
#   2. compute-sanitizer memcheck, racecheck and synccheck over a reduced set, bf16 on the default stream: 113×203 at
#      every head dim and kernel version, 1023×1024 at head dim 128, s3's and s5's CTAs walking several blocks, and
#      s2 with per-batch lengths (the V rows past a length zeroed in shared memory), s2 and s5 with query heads
#      packed into one block, s6 (three consumer warpgroups), s7 (256-key tiles) and s11 (s6 persistent) at head
#      dim 64;
#      ATTNLAB_SM90_TESTS=0 skips step 1, ATTNLAB_SM90_SANITIZERS lists the tools of step 2 ("" skips it), so the
#      two can run as separate calls;
#   3. the docs/design.md §5 forward table for each kernel version (Tuning::flash_config through
#      ATTNLAB_FLASH_CONFIG; ATTNLAB_SM90_VERSIONS lists them, default "1 2 3 4 5 6 7 11"): attnlab bench
#      (flash-sm90, and in the first version's process cudnn; s6, s7 and s11 over the head-dim-64 rows alone),
#      flash-sm80 in a process of its own (ATTNLAB_FLASH_CONFIG would force its tile configuration too) and
#      bench/peers.py (torch-flash = FA2) on bench/workloads_fwd.json's rows (ATTNLAB_SM90_WORKLOADS names another
#      file of bench/, e.g. workloads_fwd_h192.json) at the family's head dims (ATTNLAB_SM90_HEADS, default "64 128
#      256"), then bench/flash_table.py per version (rows labelled flash-sm90-sN).
#   sm90-check.sh [OUT_DIR] [--no-table | --table-only]
# Each step fits one device call of 10 minutes; together they do not (the grid is over 700 tests with s7): run
# them as three calls (ATTNLAB_SM90_SANITIZERS="" --no-table; ATTNLAB_SM90_TESTS=0 --no-table; --table-only), each
# into its own OUT_DIR, with nothing else on the GPU during step 2 (three sanitizers side by side ran past 150 s).
# Writes OUT_DIR/{tests.txt,sanitizer-*.txt,fwd-*.jsonl,table-s*.md,summary.txt}. Exits 1 when a test fails, a
# sanitizer reports anything or a step runs out of time.
set -uo pipefail
dist="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$dist/sm90-check}"
table="${2:-}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export LD_LIBRARY_PATH="$dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
SECONDS=0
say() { echo "$*" | tee -a "$out/summary.txt"; }

if [[ "$table" != "--table-only" && "${ATTNLAB_SM90_TESTS:-1}" != 0 ]]; then
  jobs="${ATTNLAB_TEST_JOBS:-$(nproc)}"
  filter="${ATTNLAB_SM90_FILTER:-*Sm90*:*FlashFamily*}"
  # One process per test, taken from a queue by `jobs` workers, the tests that take minutes first (their CPU
  # references: ManyBlocksPerCta 220–305 s, PackedQueryHeads 35–85 s at 16 side by side on the H200's host): the
  # grid then ends when its longest test and its share of the rest do. (gtest's shards had put two long tests in
  # one shard, whose bound cut it.) No test starts after the step's deadline, and none runs past it.
  heavy='ManyBlocksPerCta|PackedQueryHeads'
  "$dist/bin/test_gpu_flash" --gtest_list_tests --gtest_filter="$filter" |
    awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}' > "$out/queue.all"
  { grep -E "$heavy" "$out/queue.all"; grep -vE "$heavy" "$out/queue.all"; } > "$out/queue.txt"
  rm -f "$out/queue.all"
  mkdir -p "$out/tests"
  deadline=$(( $(date +%s) + ${ATTNLAB_SM90_TEST_SECONDS:-480} ))
  run_one() {
    local left=$(( deadline - $(date +%s) ))
    (( left > 5 )) || return 0
    timeout "$left" "$dist/bin/test_gpu_flash" --gtest_filter="$1" > "$out/tests/${1//\//+}.txt" 2>&1 || true
  }
  export -f run_one
  export dist out deadline
  xargs -P "$jobs" -I{} bash -c 'run_one "$1"' _ {} < "$out/queue.txt"
  cat "$out"/tests/*.txt > "$out/tests.txt" 2> /dev/null
  total=$(wc -l < "$out/queue.txt")
  ended() { grep -l "^\[  $1 *\] 1 test" "$out"/tests/*.txt 2> /dev/null | wc -l; }
  passed=$(ended PASSED) failed=$(ended FAILED) skipped=$(ended SKIPPED)
  # Not ended: a test its bound cut (a file without gtest's verdict) or one that never started (no file).
  left_over=$(while read -r t; do
      f="$out/tests/${t//\//+}.txt"
      [[ -f "$f" ]] && grep -qE '^\[  (PASSED|FAILED|SKIPPED) *\] 1 test' "$f" || echo "$t"
    done < "$out/queue.txt")
  unfinished=$(grep -c . <<< "$left_over")
  say "tests: $passed of $total passed, $failed failed, $skipped skipped, $unfinished not finished, $jobs at a time" \
      "(${SECONDS}s)"
  (( unfinished == 0 && failed == 0 )) || status=1
  [[ -z "$left_over" ]] || say "tests not finished (ATTNLAB_SM90_FILTER='$(paste -sd: - <<< "$left_over")' runs them again)"
  grep -E '^\[  FAILED  \] [A-Za-z]|Failure$' "$out/tests.txt" | head -20 | tee -a "$out/summary.txt"
  # A run where every test skipped (no Hopper GPU, or a build without the kernels) shows nothing: it fails.
  if [[ $passed == 0 ]]; then
    say "tests: none passed; skipped because: $(grep -hm1 'skipped: ' "$out/tests.txt")"
    status=1
  fi
fi

if [[ "$table" != "--table-only" ]]; then
  filter='*GpuFlashSm90Grid.MatchesReference/bf16_h*_113x203_s*'
  filter+=':*GpuFlashSm90Grid.MatchesReference/bf16_h128_1023x1024_s*'
  # and a persistent CTA walking several blocks (s3, s5), with blocks that see no key
  filter+=':*GpuFlashSm90.ManyBlocksPerCta/bf16_s3:*GpuFlashSm90.ManyBlocksPerCta/bf16_s5'
  # and lengths whose padding rows are NaN, at every head dim
  filter+=':*GpuFlashSm90.SequenceLengths/bf16_s2'
  # and query heads packed into one block (GQA/MQA at small T), O written by the threads
  filter+=':*GpuFlashSm90.PackedQueryHeads/bf16_s2:*GpuFlashSm90.PackedQueryHeads/bf16_s5'
  # and s6's three consumer warpgroups (its ring of turns, the key padding's barrier over 384 threads)
  filter+=':*GpuFlashSm90Grid.MatchesReference/bf16_h64_203x113_s6:*GpuFlashSm90.SequenceLengths/bf16_s6'
  filter+=':*GpuFlashSm90.PackedQueryHeads/bf16_s6'
  # and s7's 256-key tiles (P·V waited for before the next Q·Kᵀ; lengths inside a tile)
  filter+=':*GpuFlashSm90Grid.MatchesReference/bf16_h64_203x113_s7:*GpuFlashSm90.SequenceLengths/bf16_s7'
  filter+=':*GpuFlashSm90.ManyBlocksPerCta/bf16_s7:*GpuFlashSm90.PackedQueryHeads/bf16_s7'
  # and s11's three consumer warpgroups in CTAs that walk several blocks
  filter+=':*GpuFlashSm90Grid.MatchesReference/bf16_h64_203x113_s11:*GpuFlashSm90.ManyBlocksPerCta/bf16_s11'
  filter+=':*GpuFlashSm90.SequenceLengths/bf16_s11:*GpuFlashSm90.PackedQueryHeads/bf16_s11'
  for tool in ${ATTNLAB_SM90_SANITIZERS-memcheck racecheck synccheck}; do
    log="$out/sanitizer-$tool.txt"
    timeout 150 compute-sanitizer --tool "$tool" --print-limit 16 "$dist/bin/test_gpu_flash" --gtest_brief=1 \
      --gtest_filter="$filter" > "$log" 2>&1 || status=1
    verdict=$(grep -hE "RACECHECK SUMMARY|ERROR SUMMARY" "$log" | tail -1)
    grep -qE "SUMMARY: 0 (hazards|errors)" <<< "$verdict" || status=1
    say "$tool: ${verdict:-no summary} (${SECONDS}s)"
  done
fi

if [[ "$table" != "--no-table" ]]; then
  # The benchmark set's shapes the family runs (its head dims so far: ATTNLAB_SM90_HEADS, space-separated).
  workloads="$out/workloads-sm90.json"
  python3 - "$dist/bench/${ATTNLAB_SM90_WORKLOADS:-workloads_fwd.json}" "$workloads" \
    "${ATTNLAB_SM90_HEADS:-64 128 256}" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
heads = {int(h) for h in sys.argv[3].split()}
spec["workloads"] = [w for w in spec["workloads"] if w["Hqk"] in heads and w["Hv"] in heads]
spec["about"] = "the rows of " + sys.argv[1].rsplit("/", 1)[-1] + " at head dims " + sys.argv[3]
json.dump(spec, open(sys.argv[2], "w"), indent=1)
PY
  timeout 200 python3 "$dist/bench/peers.py" --workloads "$workloads" --peers torch-flash \
    --out "$out/fwd-peers.jsonl" > "$out/fwd-peers.txt" 2>&1 || status=1
  say "peers (${SECONDS}s)"
  # s6, s7 and s11 are built at head dim 64 alone (src/cuda/flash_sm90/versions.h, version_built): they run those
  # rows.
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); s["workloads"] = [w for w in s["workloads"] if w["Hqk"] == 64 and w["Hv"] == 64]; json.dump(s, open(sys.argv[2], "w"))' \
    "$workloads" "$out/workloads-sm90-h64.json"
  versions=(${ATTNLAB_SM90_VERSIONS:-1 2 3 4 5 6 7 11})
  for version in "${versions[@]}"; do
    paths="flash-sm90"; [[ $version == "${versions[0]}" ]] && paths="flash-sm90,cudnn"
    version_workloads="$workloads"
    [[ $version == 6 || $version == 7 || $version == 11 ]] && version_workloads="$out/workloads-sm90-h64.json"
    ATTNLAB_FLASH_CONFIG=$version timeout 300 "$dist/bin/attnlab" bench --workloads "$version_workloads" \
      --paths "$paths" --groups 5 --jsonl "$out/fwd-s$version.jsonl" > "$out/fwd-s$version.txt" 2>&1 || status=1
    if [[ $version == "${versions[0]}" ]]; then  # the sm_80 family at its own tile choice, beside the first version
      timeout 200 "$dist/bin/attnlab" bench --workloads "$workloads" --paths flash-sm80 --groups 5 \
        --jsonl "$out/fwd-sm80.jsonl" > "$out/fwd-sm80.txt" 2>&1 || status=1
      cat "$out/fwd-sm80.jsonl" >> "$out/fwd-s$version.jsonl"
    fi
    # The version's rows under their own name; flash-sm80 and cudnn (measured beside the first version) stay.
    python3 - "$out/fwd-s$version.jsonl" "$version" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
with open(sys.argv[1], "w") as f:
    for r in rows:
        if r["path"] == "flash-sm90":
            r["path"] = f"flash-sm90-s{sys.argv[2]}"
        f.write(json.dumps(r) + "\n")
PY
    python3 "$dist/bench/flash_table.py" --rows "$out/fwd-s${versions[0]}.jsonl" "$out/fwd-s$version.jsonl" \
      "$out/fwd-peers.jsonl" \
      --flash "flash-sm90-s$version" > "$out/table-s$version.md" 2> "$out/table-s$version.err"
    say "table, flash-sm90 s$version (${SECONDS}s):"
    cat "$out/table-s$version.md" | tee -a "$out/summary.txt"
  done
fi
exit $status
