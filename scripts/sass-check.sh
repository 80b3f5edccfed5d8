#!/usr/bin/env bash
# Per flash kernel in a built libattnlab.so: tensor-core instructions (HMMA), local-memory traffic (LDL/STL: spills)
# and mbarrier operations addressed with a negative immediate offset, from the SASS. A kernel fails the check
# without HMMA, with local-memory instructions, or with such a barrier operation: compute-sanitizer's racecheck
# does not follow a barrier reached as [reg − offset] and reports the copies it orders as races
# (docs/perf-notes.md, flash v6a).
#   scripts/sass-check.sh [LIB] [ARCH]     defaults: build/gpu/src/libattnlab.so, sm_90a
# Needs cuobjdump and nvdisasm: $CUOBJDUMP, else the toolkit's, else the pinned wheels scripts/setup.sh unpacks into
# .deps/cuda-binutils where the toolkit lacks them. Exits 77 (a skip, for ctest) when there are none.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lib="${1:-build/gpu/src/libattnlab.so}"
arch="${2:-sm_90a}"
for dir in /usr/local/cuda/bin "$root/.deps/cuda-binutils/nvdisasm/nvidia/cu13/bin" \
           "$root/.deps/cuda-binutils/cuobjdump/nvidia/cu13/bin"; do
  [[ -d "$dir" ]] && PATH="$PATH:$dir"
done
cuobjdump="${CUOBJDUMP:-$(command -v cuobjdump || true)}"
if [[ -z "$cuobjdump" ]] || ! command -v nvdisasm >/dev/null; then
  echo "sass-check: no cuobjdump/nvdisasm here (scripts/setup.sh fetches them where the toolkit lacks them)" >&2
  exit 77
fi
[[ -f "$lib" ]] || { echo "sass-check: $lib: no such library" >&2; exit 1; }
"$cuobjdump" -sass -arch "$arch" "$lib" | awk '
  /Function : / { if (name != "") report(); name = $3; hmma = 0; local = 0; barrier = 0; next }
  name != "" && /HMMA/ { hmma++ }
  name != "" && /(LDL|STL)/ { local++ }
  name != "" && /(SYNCS|ARRIVES)[.A-Z0-9]* .*\[[^]]*-0x/ { barrier++ }
  function report() {
    if (name ~ /flash_forward_kernel/) {
      checked++
      status = local ? "SPILL" : (barrier ? "BAR" : (hmma ? "ok" : "NOMMA"))
      printf "%-6s HMMA %5d  local-memory %3d  negative-offset barrier ops %2d  %s\n", status, hmma, local, barrier, name
      if (local) spills++
      if (barrier) barriers++
      if (!hmma) scalar++
    }
  }
  END {
    if (name != "") report()
    if (!checked) { print "no flash kernel for this architecture in the library"; exit 1 }
    if (spills) print spills " kernel(s) touch local memory"
    if (barriers) print barriers " kernel(s) address an mbarrier with a negative offset"
    if (scalar) print scalar " kernel(s) without tensor-core MMA (HMMA)"
    if (spills || barriers || scalar) exit 1
  }'
