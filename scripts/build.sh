#!/usr/bin/env bash
# build.sh: configures (CMake preset, Ninja) into build/<preset> and builds everything.
# Usage: scripts/build.sh [release|debug|asan] [-DVAR=VALUE...]     (default: release)
# Presets live in CMakePresets.json; asan = ASan+UBSan on RelWithDebInfo. -D arguments go to
# the configure step and stay in the build folder's cache (scripts/test.sh passes
# -DFEATHER_BUILD_PYTHON=ON and the venv's Python).
set -euo pipefail

preset=${1:-release}
case $preset in
  release | debug | asan) ;;
  -h | --help)
    echo "usage: scripts/build.sh [release|debug|asan] [-DVAR=VALUE...]"
    exit 0
    ;;
  *)
    echo "build.sh: error: unknown preset '$preset' (expected release, debug or asan)" >&2
    exit 2
    ;;
esac
shift $(($# > 0 ? 1 : 0))
for arg in "$@"; do
  if [[ $arg != -D* ]]; then
    echo "build.sh: error: '$arg': after the preset only -DVAR=VALUE arguments" >&2
    exit 2
  fi
done

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
cmake --preset "$preset" --log-level=WARNING "$@" >/dev/null
echo "build.sh: building $preset"
cmake --build --preset "$preset"
echo "build.sh: $preset built in $((SECONDS - start)) s"
