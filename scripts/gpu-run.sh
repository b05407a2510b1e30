#!/usr/bin/env bash
# gpu-run.sh: everything the CUDA target has to do on a GPU machine, in order, stopping at the
# first failure (issue 18), on a GPU machine with feather's build dependencies. Its steps ran once
# on an H100 (results/cuda-h100/), from prebuilt binaries: a machine without the dependencies
# takes scripts/gpu-bundle.sh (here) and scripts/gpu-bundle-run.sh (there) instead.
#   1. build (Release, CUDA for sm_80/89/90) and run the test suite (the GPU tests run there);
#   2. feather selfcheck --target cuda  (every kernel vs the CPU, probes vs the datasheet; writes
#      out/selfcheck/cuda.json, which calibrate requires);
#   3. feather calibrate --target cuda  (out/calibrate/cuda[-quick].yaml and its rows);
#   4. feather bench experiments --target cuda  (Exps 1-6 with CUPTI DRAM bytes and L2 hit rate:
#      out/experiments-cuda/experiments.h5 and .csv);
#   5. feather validate --engine cuda on the validation scenarios against the new profile.
# Usage: scripts/gpu-run.sh [--quick]
set -euo pipefail

quick=()
case ${1:-} in
  --quick) quick=(--quick) ;;
  "") ;;
  *)
    echo "gpu-run.sh: error: unknown argument '$1' (expected --quick)" >&2
    exit 2
    ;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-run.sh: no GPU (nvidia-smi lists none); nothing to do" >&2
  exit 2
fi

scripts/build.sh release
(cd build/release && ctest --output-on-failure -j"$(nproc)")
feather=build/release/feather
suffix=${quick:+-quick}
"$feather" selfcheck --target cuda
"$feather" calibrate --target cuda "${quick[@]}" --out "out/calibrate/cuda$suffix.yaml"
"$feather" bench experiments --target cuda "${quick[@]}" --out out/experiments-cuda
for scenario in scenarios/validation/*.yaml; do
  "$feather" validate "$scenario" --engine cuda --profile "out/calibrate/cuda$suffix.yaml" \
    --out "out/validate-cuda/$(basename "$scenario" .yaml)"
done
echo "gpu-run.sh: done; profile out/calibrate/cuda$suffix.yaml, experiments out/experiments-cuda," \
  "validations out/validate-cuda"
