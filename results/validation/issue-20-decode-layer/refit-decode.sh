#!/usr/bin/env bash
# Refits every committed CPU calibration (cpu-rows.csv with cpu.yaml beside it) twice: with
# decode_layer_fixed_ns held at the base's 0 (the model before it) and free; prints the decode
# term's and the step's held-out MAPE (with the noise floor where cpu-passes.csv is beside).
# Usage: results/validation/issue-20-decode-layer/refit-decode.sh  (FEATHER=path/to/feather)
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
bin=${FEATHER:-build/release/feather}
out_dir=$(mktemp -d)
holdout() { grep "^$1" <<<"$2" | grep -o "holdout *[0-9.]*%" | grep -o "[0-9.]*%"; }
floor() { grep "^$1" <<<"$2" | grep -o "noise floor [0-9.]*%" | grep -o "[0-9.]*%"; }
printf "%-34s %10s %10s %8s | %10s %10s | %9s\n" set decode_old decode_new floor step_old step_new layer_ns
for rows in results/profiles/cpu-rows.csv results/validation/*/cpu-rows.csv results/validation/*/*/cpu-rows.csv; do
  d=$(dirname "$rows")
  [[ -f $d/cpu.yaml ]] || continue
  old=$("$bin" calibrate --refit "$rows" --base "$d/cpu.yaml" --hold decode_layer_fixed_ns --out "$out_dir/o.yaml" 2>&1)
  new=$("$bin" calibrate --refit "$rows" --base "$d/cpu.yaml" --out "$out_dir/n.yaml" 2>&1)
  step_old=$(grep -o "holdout rows, MAPE [0-9.]*%" <<<"$old" | grep -o "[0-9.]*%")
  step_new=$(grep -o "holdout rows, MAPE [0-9.]*%" <<<"$new" | grep -o "[0-9.]*%")
  layer=$(grep "  decode_layer_fixed_ns" <<<"$new" | awk '{print $3}')
  printf "%-34s %10s %10s %8s | %10s %10s | %9s\n" "${d#results/}" "$(holdout decode_attention "$old")" \
    "$(holdout decode_attention "$new")" "$(floor decode_attention "$new")" "$step_old" "$step_new" "$layer"
done
