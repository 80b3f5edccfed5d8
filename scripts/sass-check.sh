#!/usr/bin/env bash
# Per flash kernel in a built libattnlab.so: tensor-core instructions (HMMA), local-memory traffic (LDL/STL: spills)
# and mbarrier operations addressed with a negative immediate offset, from the SASS. A kernel fails the check
# without HMMA, with local-memory instructions, or with such a barrier operation: compute-sanitizer's racecheck
# does not follow a barrier reached as [reg − offset] and reports the copies it orders as races
# (docs/perf-notes-flash-sm80.md, v6a). The sm_90a family's kernels (flash-sm90, sm90::forward_kernel) must also use
# the Hopper instructions they are built on: warpgroup MMA (HGMMA), TMA loads (UTMALDG) and the TMA store of O
# (UTMASTG); on another architecture the library has none of them and only the flash kernels are checked.
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
  /Function : / { if (name != "") report(); name = $3; hmma = 0; hgmma = 0; tmald = 0; tmast = 0; local = 0;
                  barrier = 0; next }
  name != "" && /HGMMA/ { hgmma++ }
  name != "" && /HMMA/ { hmma++ }
  name != "" && /UTMALDG/ { tmald++ }
  name != "" && /UTMASTG/ { tmast++ }
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
    } else if (name ~ /sm9014forward_kernel/) {
      checked++
      status = local ? "SPILL" : (barrier ? "BAR" : ((hgmma && tmald && tmast) ? "ok" : "NOTMA"))
      printf "%-6s HGMMA %4d  UTMALDG %3d  UTMASTG %2d  local-memory %3d  %s\n", status, hgmma, tmald, tmast, local, name
      if (local) spills++
      if (barrier) barriers++
      if (!(hgmma && tmald && tmast)) hopper++
    }
  }
  END {
    if (name != "") report()
    if (!checked) { print "no flash kernel for this architecture in the library"; exit 1 }
    if (spills) print spills " kernel(s) touch local memory"
    if (barriers) print barriers " kernel(s) address an mbarrier with a negative offset"
    if (scalar) print scalar " kernel(s) without tensor-core MMA (HMMA)"
    if (hopper) print hopper " sm_90a kernel(s) without HGMMA, UTMALDG or UTMASTG"
    if (spills || barriers || scalar || hopper) exit 1
  }'
