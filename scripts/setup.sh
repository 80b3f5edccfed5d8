#!/usr/bin/env bash
# One idempotent set-up for a fresh Debian/Ubuntu machine: installs what is missing and nothing else.
#   - Debian packages: compiler toolchain, CMake, GoogleTest, fmt, CLI11, nlohmann-json (and Chromium for the
#     report's browser test when ATTNLAB_WITH_BROWSER=1);
#   - pinned header-only wheels from PyPI, unpacked into .deps/ (never committed): cudnn-frontend and CUTLASS/CuTe;
#   - where the CUDA toolkit lacks them, the pinned cuobjdump and nvdisasm wheels (.deps/cuda-binutils), which the
#     SASS check of the flash kernels needs (scripts/sass-check.sh, a test of the CUDA build).
# Usage: scripts/setup.sh            (safe to run again; does nothing when everything is there)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$root/.deps"

# Pinned versions (see README: Dependencies).
CUDNN_FRONTEND_VERSION=1.23.0
CUTLASS_VERSION=4.2.0.0
CUDA_BINUTILS_VERSION=13.2.86  # nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (PyPI has no 13.0 builds)

debian_packages=(build-essential cmake ninja-build pkg-config googletest libgtest-dev libfmt-dev libcli11-dev
                 nlohmann-json3-dev python3 python3-pip python3-venv)
if [[ "${ATTNLAB_WITH_BROWSER:-0}" == 1 ]]; then debian_packages+=(chromium); fi

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Header-only wheels: pip downloads the pinned wheel; we unpack only the headers we use.
fetch_wheel() {  # name version marker-path dest
  local name=$1 version=$2 marker=$3 dest=$4
  if [[ -f "$dest/.version" && "$(cat "$dest/.version")" == "$version" && -e "$dest/$marker" ]]; then return; fi
  echo "setup: fetching $name==$version into ${dest#"$root"/}"
  local tmp
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "$name==$version"
  rm -rf "$dest"
  mkdir -p "$dest"
  python3 - "$tmp" "$dest" <<'PY'
import pathlib, sys, zipfile
tmp, dest = map(pathlib.Path, sys.argv[1:])
for whl in tmp.glob("*.whl"):
    with zipfile.ZipFile(whl) as z:
        z.extractall(dest)
PY
  rm -rf "$tmp"
  echo "$version" > "$dest/.version"
}
# The SASS tools: only where the toolkit's own are missing (they come with it on most installs).
toolkit_has() { command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/local/cuda/bin/$1" ]]; }
if [[ "${ATTNLAB_SKIP_WHEELS:-0}" != 1 ]]; then
  fetch_wheel nvidia-cudnn-frontend "$CUDNN_FRONTEND_VERSION" include/cudnn_frontend.h "$deps/cudnn-frontend" || {
    echo "setup: warning: could not fetch nvidia-cudnn-frontend (needed only for the cudnn path)" >&2; }
  fetch_wheel nvidia-cutlass "$CUTLASS_VERSION" cutlass_library/source/include/cute/tensor.hpp "$deps/cutlass" || {
    echo "setup: warning: could not fetch nvidia-cutlass (needed only for the Hopper kernels)" >&2; }
  if ! toolkit_has cuobjdump || ! toolkit_has nvdisasm; then
    for tool in cuobjdump nvdisasm; do
      fetch_wheel "nvidia-cuda-$tool" "$CUDA_BINUTILS_VERSION" "nvidia/cu13/bin/$tool" "$deps/cuda-binutils/$tool" && \
        chmod +x "$deps/cuda-binutils/$tool/nvidia/cu13/bin/$tool" || {
        echo "setup: warning: could not fetch nvidia-cuda-$tool (needed only for the SASS check)" >&2; }
    done
  fi
fi
echo "setup: done"
