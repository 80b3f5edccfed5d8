#!/usr/bin/env bash
# Per flash kernel in a built libattnlab.so: tensor-core instructions (HMMA), local-memory traffic (LDL/STL: spills)
# and mbarrier operations addressed with a negative immediate offset, from the SASS. A kernel with local-memory
# instructions or such a barrier operation fails the check: compute-sanitizer's racecheck does not follow a barrier
# reached as [reg − offset] and reports the copies it orders as races (docs/perf-notes.md, flash v6a).
#   scripts/sass-check.sh [LIB] [ARCH]     defaults: build/gpu/src/libattnlab.so, sm_90a
# Needs cuobjdump (CUDA toolkit; PyPI's nvidia-cuda-cuobjdump provides one where the toolkit lacks it).
set -euo pipefail
lib="${1:-build/gpu/src/libattnlab.so}"
arch="${2:-sm_90a}"
cuobjdump="${CUOBJDUMP:-cuobjdump}"
"$cuobjdump" -sass -arch "$arch" "$lib" | awk '
  /Function : / { if (name != "") report(); name = $3; hmma = 0; local = 0; barrier = 0; next }
  name != "" && /HMMA/ { hmma++ }
  name != "" && /(LDL|STL)/ { local++ }
  name != "" && /(SYNCS|ARRIVES)[.A-Z0-9]* .*\[[^]]*-0x/ { barrier++ }
  function report() {
    if (name ~ /flash_forward_kernel/) {
      status = local ? "SPILL" : (barrier ? "BAR" : "ok")
      printf "%-6s HMMA %5d  local-memory %3d  negative-offset barrier ops %2d  %s\n", status, hmma, local, barrier, name
      if (local) spills++
      if (barrier) barriers++
    }
  }
  END {
    if (name != "") report()
    if (spills) print spills " kernel(s) touch local memory"
    if (barriers) print barriers " kernel(s) address an mbarrier with a negative offset"
    if (spills || barriers) exit 1
  }'
