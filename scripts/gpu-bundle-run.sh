#!/usr/bin/env bash
# gpu-bundle-run.sh: on a GPU machine, unpack .gpu/bundle.tgz (scripts/gpu-bundle.sh) and run the
# CUDA target's checks and measurements, each step under its own time limit, writing logs and
# outputs to $OUT (the device tool's folder; default out/gpu-run) and packing them into
# $OUT/gpu-run.tgz after every step, so a run cut short still returns what it did.
#   selfcheck --target cuda; the GPU unit tests; calibrate --target cuda --quick (cpu-small,
#   llama-3-8b); bench experiments --target cuda --model llama-3-8b with the decode kernel, with
#   the general one (FEATHER_CUDA_ATTENTION=general) and with bf16 weights
#   (FEATHER_CUDA_WEIGHTS=bf16), side by side; validate --engine cuda on
#   scenarios/validation/*.yaml with the cpu-small profile; ncu on the attention kernels.
# Usage: scripts/gpu-bundle-run.sh [SECONDS]   (stop starting steps after SECONDS; default 420)
# In session 14 these steps (before the bf16-weight and ncu ones) took 150-270 s on an H100
# (results/cuda-h100/README.md); all of them need about 400 s.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
deadline=${1:-420}
out=${OUT:-$root/out/gpu-run}
if [[ ! -f .gpu/bundle.tgz ]]; then
  echo "gpu-bundle-run.sh: error: .gpu/bundle.tgz is missing; run scripts/gpu-bundle.sh first" >&2
  exit 2
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-bundle-run.sh: error: no GPU (nvidia-smi lists none)" >&2
  exit 2
fi
t0=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/g" "$work/logs" "$work/out" "$out"
tar xzf .gpu/bundle.tgz -C "$work/g"
# cuBLAS / cuBLASLt are opened with dlopen: find the toolkit's copy.
cublaslt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.1[0-9]*' 2>/dev/null | head -1)
cublas_dir=$(dirname "${cublaslt:-/usr/local/cuda/lib64/x}")
export LD_LIBRARY_PATH="$work/g/lib:$cublas_dir:/usr/local/cuda/lib64"
loader=()
if ! "$work/g/bin/feather" --help >/dev/null 2>"$work/logs/start.err"; then
  echo "plain start failed ($(head -1 "$work/logs/start.err")); using the bundled glibc"
  loader=("$work/g/glibc/ld-linux-x86-64.so.2" --library-path "$work/g/glibc:$LD_LIBRARY_PATH")
fi
feather=("${loader[@]}" "$work/g/bin/feather")
pack() { tar czf "$out/gpu-run.tgz" -C "$work" logs out 2>/dev/null; }
# step NAME LIMIT_S CMD...: runs CMD with its output in logs/NAME.log, prints rc, time and tail.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - ($(date +%s) - t0)))
  if ((left < 20)); then
    echo "== $name skipped (${left} s left)"
    return 99
  fi
  ((limit > left)) && limit=$left
  local start
  start=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$work/logs/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc $(($(date +%s) - start)) s"
  tr '\r' '\n' <"$work/logs/$name.log" | sed '/^$/d' | tail -n "${TAIL:-12}"
  pack
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
o=$work/out
stamp=$o/selfcheck/cuda.json
TAIL=45 step selfcheck 60 "${feather[@]}" selfcheck --target cuda --stamp "$stamp"
step device-test 60 "${loader[@]}" "$work/g/bin/device_test" --gtest_brief=1
step calibration-test 60 "${loader[@]}" "$work/g/bin/cuda_calibration_test" --gtest_brief=1
TAIL=25 step calibrate-cpu-small 90 "${feather[@]}" calibrate --target cuda --quick \
  --stamp "$stamp" --out "$o/calibrate/cuda-cpu-small-quick.yaml"
TAIL=25 step calibrate-llama-3-8b 90 "${feather[@]}" calibrate --target cuda --quick \
  --model llama-3-8b --stamp "$stamp" --out "$o/calibrate/cuda-llama-3-8b-quick.yaml"
step experiments-decode 100 "${feather[@]}" bench experiments --target cuda --model llama-3-8b \
  --out "$o/experiments-llama-3-8b-decode"
FEATHER_CUDA_ATTENTION=general step experiments-general 100 "${feather[@]}" bench experiments \
  --target cuda --model llama-3-8b --out "$o/experiments-llama-3-8b-general"
FEATHER_CUDA_WEIGHTS=bf16 step experiments-bf16-weights 100 "${feather[@]}" bench experiments \
  --target cuda --model llama-3-8b --out "$o/experiments-llama-3-8b-bf16-weights"
if [[ -f $o/calibrate/cuda-cpu-small-quick.yaml ]]; then
  for scenario in scenarios/validation/*.yaml; do
    name=$(basename "$scenario" .yaml)
    TAIL=10 step "validate-$name" 60 "${feather[@]}" validate "$scenario" --engine cuda \
      --profile "$o/calibrate/cuda-cpu-small-quick.yaml" --out "$o/validate-cuda/$name"
  done
fi
# Nsight Compute on the attention kernels, one launch per launch configuration (grid size), so
# the samples span small and large batches; last, because it is the least needed.
if command -v ncu >/dev/null; then
  TAIL=20 step ncu-attention 120 ncu --kernel-name regex:'DecodeAttention|PagedAttention' \
    --filter-mode per-launch-config --launch-count 8 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy "${feather[@]}" calibrate --target cuda \
    --quick --model llama-3-8b --stamp "$stamp" --out "$work/ncu-calibration.yaml"
fi
pack
echo "gpu-bundle-run.sh: done in $(($(date +%s) - t0)) s; everything in $out/gpu-run.tgz"
