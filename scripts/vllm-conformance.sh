#!/usr/bin/env bash
# vllm-conformance.sh: replays every conformance scenario of tests/golden/vllm through feather's
# simulator and vLLM's own Scheduler in lockstep (python/feather/vllm/conformance.py) and prints,
# per scenario, how many steps agree and the first difference. With --write-golden, rewrites
# NAME.jsonl (vLLM's side) for each scenario that agrees in every step; the golden files are
# what tests/python/test_vllm_conformance.py checks feather against without vLLM.
#
#   scripts/vllm-conformance.sh [--build DIR] [--write-golden] [--keep-going] [NAME...]
#
# Needs the extension built in DIR (default build/release, -DFEATHER_BUILD_PYTHON=ON) and the vLLM
# environment (created here on first use from python/requirements-vllm.txt). Exit 1 when any
# scenario differs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release
write=0
keep=()
names=()
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --write-golden) write=1; shift ;;
    --keep-going) keep=(--keep-going); shift ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "vllm-conformance.sh: unknown option $1" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
[[ -d $build/python/feather ]] || {
  echo "vllm-conformance.sh: no Python package in $build/python (configure with -DFEATHER_BUILD_PYTHON=ON)" >&2
  exit 2
}
python=$(FEATHER_VENV=${FEATHER_VLLM_VENV:-$HOME/.cache/feather/venv-vllm} \
  FEATHER_REQUIREMENTS=$PWD/python/requirements-vllm.txt scripts/python-env.sh | tail -n 1)
((${#names[@]})) || names=($(cd tests/golden/vllm && ls *.yaml | sed 's/\.yaml$//'))
status=0
for name in "${names[@]}"; do
  args=(tests/golden/vllm/$name.yaml "${keep[@]}")
  ((write)) && args+=(--golden tests/golden/vllm/$name.jsonl)
  PYTHONPATH=$build/python "$python" -W ignore -m feather.vllm.conformance "${args[@]}" 2> >(grep -v \
    -e '^W[0-9]' -e 'Triton' -e 'CPU backend prefers' -e 'Model Runner V2' >&2) || status=1
done
exit $status
