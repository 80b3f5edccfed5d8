#!/usr/bin/env bash
# Builds attnlab for a GPU machine into one self-contained folder (default: build/gpu-dist):
#   bin/attnlab, bin/launch_floor, bin/clock_probe, bin/cudnn_direct, bin/test_gpu, bin/test_gpu_flash, bin/test_gpu_embed, bin/test_gpu_fp8, bin/test_gpu_fp8_recipe,
#   bin/gpu_teardown,
#   lib/libattnlab.so*, bench/ (peers.py, summary.py, decode_ab.py,
#   flash_configs.py, flash_table.py, ncu_summary.py, flash_ab.py, flash_runs.py, workloads), run.sh, flash-check.sh
#   (scripts/gpu-flash-check.sh), flash-profile.sh (scripts/gpu-flash-profile.sh), sm90-check.sh
#   (scripts/gpu-sm90-check.sh), serving-check.sh (scripts/gpu-serving-check.sh), ring-check.sh
#   (scripts/gpu-ring-check.sh), clock-check.sh (scripts/gpu-clock-check.sh), include/attnlab/version.h (for
#   scripts/gpu-python.sh, the Python package there)
# The folder needs nothing on the GPU machine beyond the NVIDIA driver, cuDNN and cuBLAS: the CUDA runtime is
# linked statically, fmt/CLI11/nlohmann-json are header-only, GoogleTest is linked statically.
# Kernels are compiled for sm_80 (A100, and sm_86/89 GPUs such as L4) and sm_90a (H100/H200).
# Usage: scripts/gpu-build.sh [DIST_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dist="${1:-$root/build/gpu-dist}"
build="$root/build/gpu"

"$root/scripts/setup.sh"
command -v nvcc >/dev/null || { echo "gpu-build: nvcc not found: the GPU build needs the CUDA toolkit" >&2; exit 1; }
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNLAB_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="80-real;90a-real" -DATTNLAB_BUILD_BENCH=OFF
cmake --build "$build" -j"$(nproc)"

rm -rf "$dist"
mkdir -p "$dist/bin" "$dist/lib" "$dist/bench"
# The library as built now: its file, the soname link and the link-time name (older versions left in the build
# folder stay there).
lib_file="$(readlink -f "$build/src/libattnlab.so")"
soname="$(objdump -p "$lib_file" | awk '$1 == "SONAME" { print $2 }')"
cp "$lib_file" "$dist/lib/"
ln -s "$(basename "$lib_file")" "$dist/lib/$soname"
ln -s "$soname" "$dist/lib/libattnlab.so"
cp "$build/lab/attnlab" "$build/lab/launch_floor" "$build/lab/clock_probe" "$build/lab/cudnn_direct" "$dist/bin/"
cp "$build/tests/test_gpu" "$build/tests/test_gpu_flash" "$build/tests/test_gpu_embed" \
  "$build/tests/test_gpu_fp8" "$build/tests/test_gpu_fp8_recipe" "$build/tests/gpu_teardown" \
  "$build/tests/split_kv_phases" "$dist/bin/"
cp "$root/scripts/gpu-run.sh" "$dist/run.sh"
cp "$root/scripts/gpu-flash-check.sh" "$dist/flash-check.sh"
cp "$root/scripts/gpu-flash-profile.sh" "$dist/flash-profile.sh"
cp "$root/scripts/gpu-sm90-check.sh" "$dist/sm90-check.sh"
cp "$root/scripts/gpu-serving-check.sh" "$dist/serving-check.sh"
cp "$root/scripts/gpu-ring-check.sh" "$dist/ring-check.sh"
cp "$root/scripts/gpu-clock-check.sh" "$dist/clock-check.sh"
# The generated version header, for the Python extension built on the GPU machine (scripts/gpu-python.sh).
mkdir -p "$dist/include/attnlab"
cp "$build/include/attnlab/version.h" "$dist/include/attnlab/"
cp "$root"/bench/peers.py "$root"/bench/summary.py "$root"/bench/flash_configs.py "$root"/bench/flash_table.py \
  "$root"/bench/ncu_summary.py "$root"/bench/ncu_stalls.py "$root"/bench/flash_ab.py "$root"/bench/flash_runs.py \
  "$root"/bench/decode_peers.py "$root"/bench/decode_phases.py "$root"/bench/decode_ab.py "$root"/bench/python_overhead.py \
  "$root"/bench/clock_table.py "$root"/bench/*.json "$dist/bench/"
du -sh "$dist"
echo "gpu-build: ready in $dist — on the GPU machine run: $dist/run.sh [OUT_DIR]"
