#!/usr/bin/env bash
# Builds and tests every configuration this machine can build: the CPU-only `cpu` preset always, and the
# `default` preset (CUDA paths) when nvcc is found, so both sides of ATTNLAB_CUDA are tested. GPU tests skip
# cleanly on machines without a GPU.
# Then the Python package: built by `pip install .` (CPU paths; the C++ presets above cover CUDA's) into a fresh
# virtual environment, and its tests (python/tests) run there.
# Usage: scripts/test.sh       exits non-zero when a configuration fails to build or a test fails
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# A CUDA toolkit in its usual place counts as found even when its bin/ is not on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

scripts/setup.sh

presets=(cpu)
if command -v nvcc >/dev/null 2>&1 || [[ -n "${CUDACXX:-}" ]]; then
  presets+=(default)
else
  echo "test: no nvcc found: testing the CPU-only configuration only"
fi

declare -A result
failed=0
for preset in "${presets[@]}"; do
  echo
  echo "=== test: preset '$preset' ==="
  # Keep going after a failure so one run reports every configuration.
  if cmake --preset "$preset" && cmake --build --preset "$preset" && ctest --preset "$preset"; then
    result[$preset]=passed
  else
    result[$preset]=FAILED
    failed=1
  fi
done

echo
echo "=== test: the Python package ==="
venv="$root/build/python-venv"
rm -rf "$venv"
if python3 -m venv "$venv" && "$venv/bin/pip" install -q ".[test]" --config-settings=cmake.define.ATTNLAB_CUDA=OFF &&
   (cd "$venv" && "$venv/bin/python" -m pytest -q -rs "$root/python/tests"); then
  result[python]=passed
else
  result[python]=FAILED
  failed=1
fi

echo
for preset in "${presets[@]}"; do echo "test: preset '$preset': ${result[$preset]}"; done
echo "test: the Python package: ${result[python]}"
exit "$failed"
