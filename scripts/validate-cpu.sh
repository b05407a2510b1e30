#!/usr/bin/env bash
# validate-cpu.sh: calibrate this machine's CPU profile, then validate the three shipped
# validation scenarios against it (issue 20), recording the machine's load beside every step.
#   scripts/validate-cpu.sh OUT_DIR [--quick] [--primed] [--repeat N] [--model-repeat M]
#                           [--requests R]
#                           [--profile PROFILE.yaml]   (skip calibration, validate against it)
#                           [--allow-foreign-profile]  (passed to validate: on a loaded VM the
#                           DRAM probe of the same host can drift past hw/foreign_host.h's 40 %)
#                           [--block-tokens N]  (KV pages of N tokens: calibrate --block-tokens N
#                           and the scenarios' serving.block_tokens=N; default their 16)
# --quick and --primed go to calibrate. Writes OUT_DIR/cpu.yaml + cpu-rows.csv +
# cpu-passes.csv (calibrate), OUT_DIR/<scenario>/ (validate: its validation.json,
# same-plan-rows.csv, run folders), OUT_DIR/host.json (`feather info --json`) and
# OUT_DIR/load.log: `uptime` before and after each command, since on a shared VM the load decides
# what a figure means. --requests R scales the scenarios down (the smallest case that
# reproduces an effect, when a full run is too expensive under load).
set -euo pipefail
cd "$(dirname "$0")/.."
feather="${FEATHER:-build/release/feather}"
out="$1"; shift
allow=(); quick=(); repeat=3; model_repeat=""; requests=(); profile=""; pages=(); block=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=(--quick); shift ;;
    --primed) quick+=(--primed); shift ;;
    --repeat) repeat="$2"; shift 2 ;;
    --model-repeat) model_repeat="$2"; shift 2 ;;
    --requests) requests=(--set "workload.requests=$2"); shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --allow-foreign-profile) allow=(--allow-foreign-profile); shift ;;
    --block-tokens) block=(--block-tokens "$2"); pages=(--set "serving.block_tokens=$2"); shift 2 ;;
    *) echo "validate-cpu.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
"$feather" info --json > "$out/host.json"
step() {  # step NAME COMMAND...: runs it with the load before and after in load.log
  local name="$1"; shift
  echo "$name start $(date -u +%FT%TZ) $(uptime)" >> "$out/load.log"
  "$@"
  echo "$name end   $(date -u +%FT%TZ) $(uptime)" >> "$out/load.log"
}
if [[ -z "$profile" ]]; then
  profile="$out/cpu.yaml"
  step calibrate "$feather" calibrate --target cpu "${quick[@]}" "${block[@]}" \
    --out "$profile" > "$out/calibrate.log"
fi
extra=()
[[ -n "$model_repeat" ]] && extra=(--model-repeat "$model_repeat")
for scenario in default no-sharing groups-20; do
  step "validate-$scenario" "$feather" validate "scenarios/validation/$scenario.yaml" \
    --profile "$profile" --out "$out/$scenario" --repeat "$repeat" "${extra[@]}" "${allow[@]}" \
    "${requests[@]}" "${pages[@]}" > "$out/$scenario.txt"
  cat "$out/$scenario.txt"
done
