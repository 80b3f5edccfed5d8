#!/usr/bin/env bash
# The Python package on a GPU machine that has no network, from a folder made by scripts/gpu-build.sh: compiles the
# extension (python/src) with that machine's nanobind and jaxlib against the folder's libattnlab, and lays the
# package out as `pip install .` would, in SITE (default /tmp/attnlab-site):
#   SITE/attnlab/{__init__.py, jax.py, torch.py, serving.py, _arrays.py, _attnlab*.so, libattnlab.so.X.Y}
# so that the package's tests and bench/python_overhead.py run there against the same library as the C++ tests:
#   PYTHONPATH=SITE python3 -m pytest python/tests
# No CMake run and no second build of the library: nanobind's own translation unit and the bindings' (the
# sources of python/CMakeLists.txt's nanobind_add_module) in parallel, about a minute. The compile flags are those
# nanobind_add_module(... NB_STATIC) uses (python/CMakeLists.txt).
# Usage, from the repository root on the GPU machine: scripts/gpu-python.sh DIST [SITE]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dist="$(cd "${1:?usage: gpu-python.sh DIST [SITE]}" && pwd)"
site="${2:-/tmp/attnlab-site}"
py="${PYTHON:-python3}"

nb="$("$py" -c 'import nanobind, os; print(os.path.dirname(nanobind.__file__))')"
py_include="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
suffix="$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
jax_include="$("$py" -c 'import jax.ffi; print(jax.ffi.include_dir())' 2>/dev/null || true)"
lib="$(readlink -f "$dist/lib/libattnlab.so")"
soname="$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')"

flags=(-O2 -DNDEBUG -std=c++17 -fPIC -fvisibility=hidden -fno-strict-aliasing -ffunction-sections -fdata-sections
       -I"$py_include" -I"$nb/include" -I"$nb/ext/robin_map/include" -I"$root/include" -I"$dist/include")
sources=("$root/python/src/module.cpp" "$root/python/src/arrays.cpp" "$root/python/src/serving.cpp")
if [[ -n "$jax_include" && -f "$jax_include/xla/ffi/api/ffi.h" ]]; then
  flags+=(-DATTNLAB_JAX_FFI=1 -isystem "$jax_include")
  sources+=("$root/python/src/jax_ffi.cpp")
else
  flags+=(-DATTNLAB_JAX_FFI=0)
  echo "gpu-python: no jaxlib FFI headers in $py: the package is built without its JAX op" >&2
fi

objects="$(mktemp -d)"
trap 'rm -rf "$objects"' EXIT
pids=()
for src in "$nb/src/nb_combined.cpp" "${sources[@]}"; do
  c++ "${flags[@]}" -c "$src" -o "$objects/$(basename "$src").o" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

rm -rf "$site/attnlab"
mkdir -p "$site/attnlab"
cp "$root"/python/attnlab/*.py "$site/attnlab/"
cp "$lib" "$site/attnlab/$soname"
c++ -shared -Wl,--gc-sections -Wl,-rpath,'$ORIGIN' "$objects"/*.o -L"$site/attnlab" -l:"$soname" \
  -o "$site/attnlab/_attnlab$suffix"
echo "gpu-python: the package is in $site (PYTHONPATH=$site)"
