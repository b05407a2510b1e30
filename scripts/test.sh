#!/usr/bin/env bash
# test.sh: installs what is missing, builds the release preset and runs every test with ctest,
# then the Python API's tests: the venv (scripts/python-env.sh) is made or updated first, the
# release tree builds the extension too (FEATHER_BUILD_PYTHON, one build for C++ and Python), and
# pytest runs tests/python against build/release/python.
# With --asan, or when CI=true, it also builds the asan preset (ASan+UBSan) and runs every test
# there. With --fuzz, or when CI=true, it also runs every libFuzzer target for a short smoke time
# (scripts/fuzz.sh, clang; FUZZ_SECONDS each, default 15). With --vllm, or when CI=true, it also
# runs the tests that need vLLM (tests/python/test_vllm_*.py: the vLLM plugin inside vLLM's real
# Scheduler, the live conformance replay) in the vLLM environment, made or updated first from
# python/requirements-vllm.txt in ~/.cache/feather/venv-vllm ($FEATHER_VLLM_VENV; about 7 GB and
# 4 minutes the first time, cached outside the repository after that). Exits non-zero when
# anything fails; every phase runs even if an earlier one fails.
# Usage: scripts/test.sh [--asan] [--fuzz] [--vllm]
set -euo pipefail

asan=false
fuzz=false
vllm=false
[[ ${CI:-} == true ]] && asan=true && fuzz=true && vllm=true
for arg in "$@"; do
  case $arg in
    --asan) asan=true ;;
    --fuzz) fuzz=true ;;
    --vllm) vllm=true ;;
    -h | --help)
      echo "usage: scripts/test.sh [--asan] [--fuzz] [--vllm]   (CI=true implies all three)"
      exit 0
      ;;
    *)
      echo "test.sh: error: unknown argument '$arg'" >&2
      exit 2
      ;;
  esac
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
start=$SECONDS
jobs=$(nproc 2>/dev/null || echo 2)
((jobs > 2)) || jobs=2

bash scripts/install-deps.sh

failed=()
run_tests() {  # run_tests PRESET
  local preset=$1 phase_start=$SECONDS
  echo "test.sh: running the $preset tests"
  if ctest --test-dir "build/$preset" --output-on-failure --no-tests=error -j"$jobs"; then
    echo "test.sh: $preset tests passed in $((SECONDS - phase_start)) s"
  else
    echo "test.sh: $preset tests FAILED" >&2
    failed+=("$preset")
  fi
}

# The Python package builds in the release tree (no second C++ build); without its venv the C++
# still builds and is tested, and the run fails at the end.
python_args=(-DFEATHER_BUILD_PYTHON=OFF)
if python=$(bash scripts/python-env.sh | tail -n 1); then
  python_args=(-DFEATHER_BUILD_PYTHON=ON "-DPython_EXECUTABLE=$python")
else
  echo "test.sh: the Python environment could not be made; Python tests skipped" >&2
  failed+=(python-env)
fi
bash scripts/build.sh release "${python_args[@]}"
run_tests release

if [[ ${python_args[0]} == -DFEATHER_BUILD_PYTHON=ON ]]; then
  phase_start=$SECONDS
  echo "test.sh: running the Python tests (pytest tests/python)"
  if PYTHONPATH="$root/build/release/python" FEATHER_BINARY="$root/build/release/feather" \
      "$python" -m pytest -q -p no:cacheprovider "$root/tests/python"; then
    echo "test.sh: Python tests passed in $((SECONDS - phase_start)) s"
  else
    echo "test.sh: Python tests FAILED" >&2
    failed+=(python)
  fi
fi

if [[ $vllm == true && ${python_args[0]} == -DFEATHER_BUILD_PYTHON=ON ]]; then
  phase_start=$SECONDS
  echo "test.sh: running the vLLM tests (tests/python/test_vllm_*.py)"
  if vllm_python=$(FEATHER_VENV=${FEATHER_VLLM_VENV:-$HOME/.cache/feather/venv-vllm} \
      FEATHER_REQUIREMENTS="$root/python/requirements-vllm.txt" bash scripts/python-env.sh |
      tail -n 1) &&
    (cd /tmp && PYTHONPATH="$root/build/release/python" VLLM_TARGET_DEVICE=cpu \
      "$vllm_python" -m pytest -q -p no:cacheprovider "$root"/tests/python/test_vllm_*.py); then
    echo "test.sh: vLLM tests passed in $((SECONDS - phase_start)) s"
  else
    echo "test.sh: vLLM tests FAILED" >&2
    failed+=(vllm)
  fi
fi

if [[ $asan == true ]]; then
  bash scripts/build.sh asan
  # Same settings as the asan test preset in CMakePresets.json.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  run_tests asan
fi

if [[ $fuzz == true ]]; then
  echo "test.sh: fuzz smoke run (${FUZZ_SECONDS:-15} s per target)"
  if bash scripts/fuzz.sh "${FUZZ_SECONDS:-15}"; then
    echo "test.sh: fuzz smoke run clean"
  else
    echo "test.sh: fuzz smoke run FAILED" >&2
    failed+=(fuzz)
  fi
fi

elapsed=$((SECONDS - start))
if ((${#failed[@]} > 0)); then
  echo "test.sh: FAILED (${failed[*]}) after ${elapsed} s" >&2
  exit 1
fi
echo "test.sh: all tests passed after ${elapsed} s"
