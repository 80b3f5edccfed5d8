#!/usr/bin/env bash
# Everything a flash kernel change must show, in one run on the GPU machine, from a folder made by
# scripts/gpu-build.sh (there it is flash-check.sh):
#   1. the GPU tests (run.sh --tests-only);
#   2. compute-sanitizer racecheck and memcheck over the reduced set: every tile configuration of the list, the
#      padded-key NaN test, the scheduler, late-rising row maxima, the grid's odd shapes 113×203 and 1023×1024, and
#      the back-to-back calls on a non-blocking stream with host lengths (test_gpu_embed's *Sanitizer* tests);
#   3. the docs/design.md §5 table: attnlab bench (flash, cudnn) and bench/peers.py (torch-flash = FA2) on
#      bench/workloads_fwd.json, then bench/flash_table.py (markdown, ratios to FA2 and cuDNN);
#   4. the codelab's default shape, 3 processes, back-to-back and under graph replay.
#   --small-only runs instead only what path flash's small-call rule (src/cuda/flash_family_rule.h) rests on: the
#   family's GPU test (test_gpu_flash *FlashFamily*), then bench/workloads_fwd_small.json on flash-sm80,
#   flash-sm90 and flash, one process each, back-to-back and under graph replay, twice, with a table of µs per call
#   (small.md).
#   flash-check.sh [OUT_DIR] [--no-table | --small-only]
# Writes OUT_DIR/{tests/,sanitizer-*.txt,fwd-attnlab.jsonl,fwd-peers.jsonl,table.md,default-*.jsonl,summary.txt} and
# OUT_DIR/results.tgz (all of it, refreshed after each step). Exits 1 when a test fails, a sanitizer reports anything,
# or the table lacks a row.
set -uo pipefail
dist="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$dist/flash-check}"
table="${2:-}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export LD_LIBRARY_PATH="$dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
SECONDS=0
pack() {  # written beside, then moved in: tar must not see the folder change under it
  local part; part="$(mktemp)"
  tar czf "$part" -C "$(dirname "$out")" --exclude results.tgz "$(basename "$out")" && chmod 644 "$part" && mv "$part" "$out/results.tgz"
  rm -f "$part"
}
say() { echo "$*" | tee -a "$out/summary.txt"; }

if [[ "$table" == "--small-only" ]]; then
  "$dist/bin/test_gpu_flash" --gtest_filter='*FlashFamily*' > "$out/family-test.txt" 2>&1 || status=1
  say "family test: $(grep -E '^\[  (PASSED|FAILED)' "$out/family-test.txt" | tr '\n' ' ') (${SECONDS}s)"
  for round in 1 2; do
    for path in flash-sm80 flash-sm90 flash; do
      "$dist/bin/attnlab" bench --workloads "$dist/bench/workloads_fwd_small.json" --paths "$path" --groups 5 --graph \
        --jsonl "$out/small-$path-$round.jsonl" > "$out/small-$path-$round.txt" 2>&1 || status=1
    done
    pack
  done
  python3 - "$out" > "$out/small.md" <<'PY' || status=1
# µs per call of each small workload: per path, back-to-back and graph replay, the best of the rounds' medians.
import collections, glob, json, sys
best = collections.defaultdict(dict)
order = []
for name in sorted(glob.glob(sys.argv[1] + "/small-*.jsonl")):
    path = name.rsplit("/", 1)[1][len("small-"):].rsplit("-", 1)[0]  # small-PATH-ROUND.jsonl
    for r in map(json.loads, open(name)):
        if r.get("ms_median") is None:
            continue
        key = path + (" graph" if r.get("graph") else "")
        w = f"B={r['B']} T={r['T']} S={r['S']} N={r['N']}/{r['K']} H={r['Hqk']}" + (" causal" if r["causal"] else "")
        if w not in order:
            order.append(w)
        us = r["ms_median"] * 1000
        best[w][key] = min(us, best[w].get(key, us))
cols = ["flash-sm80", "flash-sm90", "flash", "flash-sm80 graph", "flash-sm90 graph", "flash graph"]
print("| workload | " + " | ".join(cols) + " | sm80 / sm90 | sm80 / sm90 graph |")
print("|---" * (len(cols) + 3) + "|")
for w in order:
    b = best[w]
    cell = lambda c: f"{b[c]:.1f}" if c in b else "–"
    ratio = lambda a, c: f"{b[c] / b[a]:.2f}×" if a in b and c in b else "–"
    print(f"| {w} | " + " | ".join(cell(c) for c in cols) +
          f" | {ratio('flash-sm80', 'flash-sm90')} | {ratio('flash-sm80 graph', 'flash-sm90 graph')} |")
PY
  say "small calls, µs per call (best of 2 rounds; ratio > 1: flash-sm80 faster) (${SECONDS}s):"
  tee -a "$out/summary.txt" < "$out/small.md"
  pack
  say "flash-check --small-only: $([[ $status == 0 ]] && echo passed || echo FAILED) (${SECONDS}s)"
  exit $status
fi

"$dist/run.sh" "$out/tests" --tests-only > "$out/tests.log" 2>&1 || status=1
say "tests: $(grep -E '^GPU tests:' "$out/tests.log") (${SECONDS}s)"
grep -E '^gpu_teardown ' "$out/tests.log" | while read -r line; do say "$line"; done
pack

flash_filter='*GpuFlash.EveryConfigurationOfTheList/bf16:*NaNInPaddedKeys*:GpuFlashScheduling.*:*RowMaxima*/bf16'
grid_filter='*MatchesReference/flash_bf16_113x203_h64x64:*MatchesReference/flash_bf16_1023x1024_h64x64'
grid_filter+=':*MatchesReference/flash_bf16_1023x1024_h128x128'
for tool in racecheck memcheck; do
  for binary in test_gpu_flash test_gpu test_gpu_embed; do
    filter=$flash_filter; [[ $binary == test_gpu ]] && filter=$grid_filter
    # racecheck reports hazards inside cuDNN's own sm90 SDPA kernels (closed code, outside attnlab's reach), so the
    # embed tests' cudnn instances run under memcheck only.
    if [[ $binary == test_gpu_embed ]]; then
      filter='*Sanitizer*'; [[ $tool == racecheck ]] && filter='*Sanitizer*:-*cudnn*'
    fi
    log="$out/sanitizer-$tool-$binary.txt"
    compute-sanitizer --tool "$tool" --print-limit 16 "$dist/bin/$binary" --gtest_brief=1 --gtest_filter="$filter" \
      > "$log" 2>&1 || status=1
    verdict=$(grep -hE "RACECHECK SUMMARY|ERROR SUMMARY" "$log" | tail -1)
    grep -qE "SUMMARY: 0 (hazards|errors)" <<< "$verdict" || status=1
    say "$tool $binary: ${verdict:-no summary} (${SECONDS}s)"
  done
  pack
done

if [[ "$table" != "--no-table" ]]; then
  "$dist/bin/attnlab" bench --workloads "$dist/bench/workloads_fwd.json" --paths flash-sm80,cudnn --groups 5 \
    --jsonl "$out/fwd-attnlab.jsonl" > "$out/fwd-attnlab.txt" 2>&1 || status=1
  python3 "$dist/bench/peers.py" --workloads "$dist/bench/workloads_fwd.json" --peers torch-flash \
    --out "$out/fwd-peers.jsonl" > "$out/fwd-peers.txt" 2>&1 || status=1
  python3 "$dist/bench/flash_table.py" --rows "$out/fwd-attnlab.jsonl" "$out/fwd-peers.jsonl" --flash flash-sm80 \
    > "$out/table.md" \
    2> "$out/table.err" || status=1
  say "table (${SECONDS}s):"; cat "$out/table.md" "$out/table.err" | tee -a "$out/summary.txt"
  pack
fi

for i in 1 2 3; do
  "$dist/bin/attnlab" bench --dtype bf16 --paths flash-sm80,cudnn --groups 9 --graph --jsonl "$out/default-$i.jsonl" \
    > "$out/default-$i.txt" 2>&1 || status=1
done
say "codelab default shape, 3 processes (${SECONDS}s):"
python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import glob, json, sys
for name in sorted(glob.glob(sys.argv[1] + "/default-*.jsonl")):
    for r in map(json.loads, open(name)):
        host = f", host {r['host_ms'] * 1000:.1f} µs" if r.get("host_ms") else ""
        print(f"  {name.rsplit('/', 1)[1]}: {r['path']:6s} {r['ms_median'] * 1000:.1f} µs per call{host}  ({r.get('note', '')})")
PY
pack
say "flash-check: $([[ $status == 0 ]] && echo passed || echo FAILED) (${SECONDS}s)"
exit $status
