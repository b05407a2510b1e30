#!/usr/bin/env bash
# engine-cost.sh: measures the CPU time of the real engines' scheduling calls on this machine and
# fits the cost table that `scheduler_time: engine` charges (scripts/engine_cost.py says what is
# measured and how; results/engine-cost/README.md the table's schema and the shipped figures):
# vLLM's Scheduler.schedule() in the vLLM environment, SGLang's SchedulePolicy.calc_priority
# (LPM, DFS-weight) with its RadixCache in the SGLang environment, then a least-squares fit with
# the error on held-out grid points.
#
#   scripts/engine-cost.sh [--quick] [--out FILE]
#
# FILE defaults to results/engine-cost/amd-epyc-vm.yaml (the shipped table), with --quick to
# $TMPDIR/engine-cost-quick.yaml (a quick grid never replaces the shipped table by default).
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
while (($#)); do
  case $1 in
    --quick) quick=(--quick); shift ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "engine-cost.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z $out ]]; then
  if ((${#quick[@]})); then out=${TMPDIR:-/tmp}/engine-cost-quick.yaml
  else out=results/engine-cost/amd-epyc-vm.yaml; fi
fi
vllm=$(FEATHER_VENV=${FEATHER_VLLM_VENV:-$HOME/.cache/feather/venv-vllm} \
  FEATHER_REQUIREMENTS=$PWD/python/requirements-vllm.txt scripts/python-env.sh | tail -n 1)
sglang=$(FEATHER_VENV=${FEATHER_SGLANG_VENV:-$HOME/.cache/feather/venv-sglang} \
  FEATHER_REQUIREMENTS=$PWD/python/requirements-sglang.txt scripts/python-env.sh | tail -n 1)
work=$(mktemp -d -t feather-engine-cost.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Outside the repository (vLLM and SGLang must not import from the source tree), logs filtered.
here=$PWD
(cd "$work" && "$vllm" -W ignore "$here/scripts/engine_cost.py" measure-vllm vllm.jsonl \
  "${quick[@]}" 2> >(grep -v -e '^W[0-9]' -e 'Triton' -e 'CPU backend prefers' \
  -e 'Model Runner V2' >&2))
(cd "$work" && "$sglang" -W ignore "$here/scripts/engine_cost.py" measure-sglang sglang.jsonl \
  "${quick[@]}")
mkdir -p "$(dirname "$out")"
"$sglang" "$here/scripts/engine_cost.py" fit "$out" "$work/vllm.jsonl" "$work/sglang.jsonl"
