#!/usr/bin/env bash
# Nsight Compute profiles of the flash kernel and of FA2 (torch's flash backend, bench/peers.py) at the same shapes,
# in one run on the GPU machine, from a folder made by scripts/gpu-build.sh (there it is flash-profile.sh):
#   flash-profile.sh [OUT_DIR] [--locked] [SHAPE ...]     SHAPE = B,T,N,K,H[,causal]  (default: the
#                                                          docs/design.md §5 Hqk 128 shapes at T = 4k and 8k, no mask)
# By default the GPU runs at its own clocks (ncu --clock-control none), as in the benchmarks; --locked keeps ncu's
# base-clock lock, whose cycle counts compare kernels without the power cap's say. Writes OUT_DIR/<path>-<shape>.csv
# (ncu's details page), OUT_DIR/summary.md (bench/ncu_summary.py over all of them) and OUT_DIR/results.tgz
# (everything, reports included). Exits 1 when a profile fails.
set -uo pipefail
dist="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$dist/flash-profile}"
[[ $# -gt 0 ]] && shift
clocks=(--clock-control none)
if [[ "${1:-}" == "--locked" ]]; then clocks=(); shift; fi
shapes=("$@")
[[ ${#shapes[@]} -eq 0 ]] && shapes=(4,4096,16,16,128 2,8192,16,16,128)
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export LD_LIBRARY_PATH="$dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
command -v ncu >/dev/null || { echo "flash-profile: ncu not found" >&2; exit 1; }
status=0
csvs=()
ncu_one() {  # ncu_one NAME KERNEL_REGEX SKIP COMMAND...
  local name=$1 kernel=$2 skip=$3; shift 3
  ncu "${clocks[@]}" --set full --kernel-name "regex:$kernel" --launch-skip "$skip" --launch-count 1 \
    -f -o "$out/$name" "$@" > "$out/$name.log" 2>&1 ||
    { echo "flash-profile: $name failed (see $name.log)" >&2; status=1; return; }
  ncu --import "$out/$name.ncu-rep" --page details --csv > "$out/$name.csv" 2>> "$out/$name.log" || status=1
  csvs+=("$out/$name.csv")
}
for shape in "${shapes[@]}"; do
  IFS=, read -r B T N K H causal <<< "$shape"
  tag="b${B}-t${T}-n${N}k${K}-h${H}${causal:+-causal}"
  mask=(); [[ -n "${causal:-}" ]] && mask=(--causal)
  ncu_one "flash-$tag" flash_forward_kernel 3 "$dist/bin/attnlab" bench -B "$B" -T "$T" -N "$N" -K "$K" -H "$H" \
    "${mask[@]}" --paths flash-sm80 --warmup 2 --repeats 2 --groups 1
  ncu_one "fa2-$tag" flash_fwd 3 python3 "$dist/bench/peers.py" --peers torch-flash -B "$B" -T "$T" -N "$N" -K "$K" \
    -H "$H" "${mask[@]}" --warmup 2 --repeats 2 --groups 1
done
[[ ${#csvs[@]} -gt 0 ]] && { python3 "$dist/bench/ncu_summary.py" "${csvs[@]}" > "$out/summary.md" || status=1; }
cat "$out/summary.md" 2>/dev/null
part="$(mktemp)"
tar czf "$part" -C "$(dirname "$out")" --exclude results.tgz "$(basename "$out")" && mv "$part" "$out/results.tgz"
exit $status
