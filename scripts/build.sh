#!/usr/bin/env bash
# build.sh: configures (CMake preset, Ninja) into build/<preset> and builds everything.
# Usage: scripts/build.sh [release|debug|asan]     (default: release)
# Presets live in CMakePresets.json; asan = ASan+UBSan on RelWithDebInfo.
set -euo pipefail

preset=${1:-release}
case $preset in
  release | debug | asan) ;;
  -h | --help)
    echo "usage: scripts/build.sh [release|debug|asan]"
    exit 0
    ;;
  *)
    echo "build.sh: error: unknown preset '$preset' (expected release, debug or asan)" >&2
    exit 2
    ;;
esac
if (($# > 1)); then
  echo "build.sh: error: one argument at most (the preset)" >&2
  exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir="build/$preset"

# A build folder copied from another checkout points at that checkout's sources: start afresh.
cache="$build_dir/CMakeCache.txt"
if [[ -f $cache ]]; then
  cached_source=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache")
  if [[ -n $cached_source && $cached_source != "$root" ]]; then
    echo "build.sh: $build_dir was configured for $cached_source; removing it"
    rm -rf "$build_dir"
  fi
fi

start=$SECONDS
echo "build.sh: configuring $preset in $build_dir"
cmake --preset "$preset" --log-level=WARNING >/dev/null
echo "build.sh: building $preset"
cmake --build --preset "$preset"
echo "build.sh: $preset built in $((SECONDS - start)) s"
