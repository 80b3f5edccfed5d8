#!/usr/bin/env bash
# The lab on this machine, from a fresh clone: set up what is missing, build with the `default` preset (CUDA paths
# when nvcc is found), then run the whole lab: `attnlab lab --report lab-report` (check, compare, causal, bench,
# sweep seq, sweep batch, heads; on the GPU when a CUDA path is available here, else on the CPU), which writes
# lab-report/report.html.
# Usage: scripts/lab.sh [lab flags...]     e.g. scripts/lab.sh --quick, scripts/lab.sh --dtype f32 --graph
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

echo
build/default/lab/attnlab lab --report lab-report "$@"
