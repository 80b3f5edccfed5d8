#!/usr/bin/env bash
# Per flash kernel in a built libattnlab.so: tensor-core instructions (HMMA), local-memory traffic (LDL/STL: spills)
# and the register count, from the SASS. A kernel with local-memory instructions fails the check.
#   scripts/sass-check.sh [LIB] [ARCH]     defaults: build/gpu/src/libattnlab.so, sm_90a
# Needs cuobjdump (CUDA toolkit; PyPI's nvidia-cuda-cuobjdump provides one where the toolkit lacks it).
set -euo pipefail
lib="${1:-build/gpu/src/libattnlab.so}"
arch="${2:-sm_90a}"
cuobjdump="${CUOBJDUMP:-cuobjdump}"
"$cuobjdump" -sass -arch "$arch" "$lib" | awk '
  /Function : / { if (name != "") report(); name = $3; hmma = 0; local = 0; next }
  name != "" && /HMMA/ { hmma++ }
  name != "" && /(LDL|STL)/ { local++ }
  function report() {
    if (name ~ /flash_forward_kernel/) {
      printf "%-6s HMMA %5d  local-memory %3d  %s\n", local ? "SPILL" : "ok", hmma, local, name
      if (local) bad++
    }
  }
  END { if (name != "") report(); if (bad) { print bad " kernel(s) touch local memory"; exit 1 } }'
