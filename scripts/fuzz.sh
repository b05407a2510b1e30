#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer targets of fuzz/ with clang (build/fuzz: -fsanitize=fuzzer with
# ASan+UBSan) and runs each for SECONDS. The seed corpus fuzz/corpus/<target>/ is read, never
# written: new inputs go to build/fuzz/corpus/<target>/, crashes to build/fuzz/artifacts/<target>/.
# Prints each target's executions; exits non-zero when a target finds a crash, a leak or a timeout
# (the reproducer's path is printed: run `build/fuzz/fuzz/<target> FILE` to replay it).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     (default 60 s each, every target)
#   CI runs `scripts/fuzz.sh 15` from scripts/test.sh. FUZZ_JOBS=N runs N targets at a time.
set -euo pipefail

seconds=60
targets=()
for arg in "$@"; do
  case $arg in
    -h | --help)
      sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *[!0-9]*) targets+=("$arg") ;;
    *) seconds=$arg ;;
  esac
done
all_targets=(scenario_fuzzer trace_reader_fuzzer profile_fuzzer cht_ops_fuzzer radix_fuzzer)
((${#targets[@]} > 0)) || targets=("${all_targets[@]}")
for target in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $target "* ]] || {
    echo "fuzz.sh: error: unknown target '$target' (known: ${all_targets[*]})" >&2
    exit 2
  }
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=build/fuzz
command -v clang++ >/dev/null || { echo "fuzz.sh: error: clang++ not found (scripts/install-deps.sh)" >&2; exit 1; }

start=$SECONDS
cmake -S . -B "$build_dir" -G Ninja --log-level=WARNING -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFEATHER_FUZZ=ON \
  -DFEATHER_BUILD_TESTS=OFF >/dev/null
cmake --build "$build_dir" --target "${targets[@]}"
echo "fuzz.sh: built ${#targets[@]} target(s) in $((SECONDS - start)) s"

# Inputs larger than these add nothing but time: scenarios and profiles are a few KB, operation
# sequences stop after 256 operations.
declare -A max_len=([scenario_fuzzer]=8192 [trace_reader_fuzzer]=16384 [profile_fuzzer]=8192
                    [cht_ops_fuzzer]=4096 [radix_fuzzer]=4096)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_target() {  # run_target NAME: fuzzes NAME for $seconds; its log is build/fuzz/logs/NAME.log
  local name=$1
  local work=$build_dir/corpus/$name artifacts=$build_dir/artifacts/$name/
  local log=$build_dir/logs/$name.log
  mkdir -p "$work" "$artifacts" "$build_dir/logs"
  local dict=()
  [[ -f fuzz/$name.dict ]] && dict=(-dict="fuzz/$name.dict")
  local status=0
  "$build_dir/fuzz/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len="${max_len[$name]}" -print_final_stats=1 -artifact_prefix="$artifacts" \
    "${dict[@]}" "$work" "fuzz/corpus/$name" >"$log" 2>&1 || status=$?
  echo "$status" >"$build_dir/logs/$name.status"
}

jobs=${FUZZ_JOBS:-1}
failed=()
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  echo "fuzz.sh: fuzzing $target for $seconds s"
  rm -f "$build_dir/logs/$target.status"
  run_target "$target" &
done
wait
for target in "${targets[@]}"; do
  status=$(cat "$build_dir/logs/$target.status" 2>/dev/null || echo 1)
  log=$build_dir/logs/$target.log
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  corpus=$(find "$build_dir/corpus/$target" -type f | wc -l)
  if ((status == 0)); then
    echo "fuzz.sh: $target: ${execs:-?} executions in $seconds s, corpus $corpus inputs, nothing found"
  else
    failed+=("$target")
    echo "fuzz.sh: $target FAILED (exit $status) after ${execs:-?} executions; log $log:" >&2
    grep -E "ERROR|SUMMARY|check failed|runtime error|Test unit written" "$log" | head -n 20 >&2 || true
  fi
done

if ((${#failed[@]} > 0)); then
  echo "fuzz.sh: FAILED: ${failed[*]} ($((SECONDS - start)) s)" >&2
  exit 1
fi
echo "fuzz.sh: all ${#targets[@]} target(s) clean after $((SECONDS - start)) s"
