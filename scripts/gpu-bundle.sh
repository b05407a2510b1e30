#!/usr/bin/env bash
# gpu-bundle.sh: pack this machine's CUDA build (feather, the GPU tests) with every shared library
# they load that is not glibc into .gpu/bundle.tgz, for a GPU machine that has the NVIDIA driver
# and CUDA toolkit but none of feather's Debian packages (yaml-cpp, HDF5, xxhash, OpenBLAS, ...):
# the lent machines of the device tool. scripts/gpu-bundle-run.sh runs it there. glibc and the
# loader travel too, used only if the machine's own glibc is older than this one's.
# Usage: scripts/gpu-bundle.sh [BUILD_DIR]   (default build/release; must be configured with CUDA)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build/release}
if ! grep -q '^FEATHER_ENABLE_CUDA:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "gpu-bundle.sh: error: $build is not a CUDA build (FEATHER_ENABLE_CUDA=ON, nvcc on PATH)" >&2
  exit 2
fi
binaries=("$build/feather" "$build/tests/device_test" "$build/tests/cuda_calibration_test")
for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "gpu-bundle.sh: error: $b is missing; build first" >&2; exit 2; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/glibc" "$root/.gpu"
cp "${binaries[@]}" "$stage/bin/"
ldd "${binaries[@]}" | awk '$3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  case $name in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | libutil.so.* | libresolv.so.*)
      cp -L "$path" "$stage/glibc/$name" ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done
cp -L /lib64/ld-linux-x86-64.so.2 "$stage/glibc/"
tar czf "$root/.gpu/bundle.tgz.tmp" -C "$stage" .
mv "$root/.gpu/bundle.tgz.tmp" "$root/.gpu/bundle.tgz"
echo "gpu-bundle.sh: wrote .gpu/bundle.tgz ($(du -h "$root/.gpu/bundle.tgz" | cut -f1));" \
  "on the GPU machine: scripts/gpu-bundle-run.sh (device tool: carry .gpu)"
