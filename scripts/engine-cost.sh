#!/usr/bin/env bash
# engine-cost.sh: measures the CPU time of the real engines' scheduling calls on this machine and
# fits the cost table that `scheduler_time: engine` charges (scripts/engine_cost.py says what is
# measured and how; results/engine-cost/README.md the table's schema and the shipped figures):
# vLLM's Scheduler.schedule() in the vLLM environment, SGLang's SchedulePolicy.calc_priority
# (LPM, DFS-weight) with its RadixCache in the SGLang environment, then a least-squares fit with
# the error on held-out grid points.
#
#   scripts/engine-cost.sh [--quick] [--out FILE] [--sglang-version V]
#
# FILE defaults to results/engine-cost/amd-epyc-vm.yaml (the shipped table), with --quick to
# $TMPDIR/engine-cost-quick.yaml (a quick grid never replaces the shipped table by default).
# --sglang-version V measures another SGLang release (pins python/requirements-sglang-V.txt,
# environment ~/.cache/feather/venv-sglang-V without dots, e.g. venv-sglang-056) and only SGLang:
# the vLLM operation is copied from the shipped table; FILE defaults to
# results/engine-cost/sglang-V.yaml. Releases whose layers load sgl-kernel need libcuda.so.1:
# without a driver, the CUDA toolkit's link stub ($CUDA_HOME/lib/stubs) stands in for it.
#
# The environments are created here on first use (scripts/python-env.sh): vLLM from
# python/requirements-vllm.txt into ${FEATHER_VLLM_VENV:-~/.cache/feather/venv-vllm}, SGLang from
# python/requirements-sglang.txt into ${FEATHER_SGLANG_VENV:-~/.cache/feather/venv-sglang}.
# About 10 minutes on 2 cores (--quick: 1 minute, a small grid for smoke runs). Run it on a quiet
# machine: other load shows up as CPU time through shared caches.
set -euo pipefail
cd "$(dirname "$0")/.."
out=
quick=()
version=
while (($#)); do
  case $1 in
    --quick) quick=(--quick); shift ;;
    --out) out=$2; shift 2 ;;
    --sglang-version) version=$2; shift 2 ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "engine-cost.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z $out ]]; then
  if ((${#quick[@]})); then out=${TMPDIR:-/tmp}/engine-cost-quick.yaml
  elif [[ -n $version ]]; then out=results/engine-cost/sglang-$version.yaml
  else out=results/engine-cost/amd-epyc-vm.yaml; fi
fi
if [[ -n $version ]]; then
  pins=$PWD/python/requirements-sglang-$version.txt
  [[ -f $pins ]] || { echo "engine-cost.sh: no pins $pins" >&2; exit 2; }
  sglang_venv=$HOME/.cache/feather/venv-sglang-${version//./}
else
  pins=$PWD/python/requirements-sglang.txt
  sglang_venv=${FEATHER_SGLANG_VENV:-$HOME/.cache/feather/venv-sglang}
fi
sglang=$(FEATHER_VENV=$sglang_venv FEATHER_REQUIREMENTS=$pins scripts/python-env.sh | tail -n 1)
work=$(mktemp -d -t feather-engine-cost.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Outside the repository (vLLM and SGLang must not import from the source tree), logs filtered.
here=$PWD
rows=("$work/sglang.jsonl")
if [[ -z $version ]]; then
  vllm=$(FEATHER_VENV=${FEATHER_VLLM_VENV:-$HOME/.cache/feather/venv-vllm} \
    FEATHER_REQUIREMENTS=$PWD/python/requirements-vllm.txt scripts/python-env.sh | tail -n 1)
  (cd "$work" && "$vllm" -W ignore "$here/scripts/engine_cost.py" measure-vllm vllm.jsonl \
    "${quick[@]}" 2> >(grep -v -e '^W[0-9]' -e 'Triton' -e 'CPU backend prefers' \
    -e 'Model Runner V2' >&2))
  rows=("$work/vllm.jsonl" "${rows[@]}")
fi
# No GPU driver: the toolkit's stub libcuda.so lets sgl-kernel's library load (never called).
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  stub=${CUDA_HOME:-/usr/local/cuda}/lib/stubs/libcuda.so
  [[ -f $stub ]] || stub=${CUDA_HOME:-/usr/local/cuda}/lib64/stubs/libcuda.so
  if [[ -f $stub ]]; then
    mkdir -p "$work/stubs" && ln -s "$stub" "$work/stubs/libcuda.so.1"
    export LD_LIBRARY_PATH=$work/stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
fi
(cd "$work" && "$sglang" -W ignore "$here/scripts/engine_cost.py" measure-sglang sglang.jsonl \
  "${quick[@]}" 2> >(grep -v -e '^W[0-9]' >&2))
mkdir -p "$(dirname "$out")"
copy=()
[[ -n $version ]] && copy=(--copy-from results/engine-cost/amd-epyc-vm.yaml)
"$sglang" "$here/scripts/engine_cost.py" fit "$out" "${rows[@]}" "${copy[@]}"
