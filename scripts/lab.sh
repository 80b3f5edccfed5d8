#!/usr/bin/env bash
# The lab on this machine, from a fresh clone: set up what is missing, build with the `default` preset (CUDA paths
# when nvcc is found), then run the lab: `attnlab check`, then `attnlab compare` (on the GPU when a CUDA path is
# available here, else on the CPU).
# Usage: scripts/lab.sh [compare flags...]     e.g. scripts/lab.sh --dtype bf16 --causal
#        CMAKE_BUILD_PARALLEL_LEVEL=2 scripts/lab.sh   to limit build jobs
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# A CUDA toolkit in its usual place counts as found even when its bin/ is not on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

scripts/setup.sh
cmake --preset default
cmake --build --preset default

attnlab=build/default/lab/attnlab
echo
"$attnlab" check
"$attnlab" compare "$@"
