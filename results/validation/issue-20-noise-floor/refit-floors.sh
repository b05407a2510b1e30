#!/usr/bin/env bash
# Refits every committed CPU calibration that kept its repetitions (cpu-passes.csv beside
# cpu-rows.csv) and prints each term's held-out MAPE beside its noise floor.
# Usage: results/validation/issue-20-noise-floor/refit-floors.sh  (FEATHER=path/to/feather)
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
bin=${FEATHER:-build/release/feather}
out_dir=$(mktemp -d)
for passes in results/validation/*/cpu-passes.csv results/validation/*/*/cpu-passes.csv; do
  d=$(dirname "$passes")
  # decode_layer_fixed_ns (a later term, ../issue-20-decode-layer) held at 0: the model of the
  # commit that wrote refit-floors.txt.
  log=$("$bin" calibrate --refit "$d/cpu-rows.csv" --base "$d/cpu.yaml" \
    --hold decode_layer_fixed_ns --out "$out_dir/p.yaml" 2>&1)
  echo "$d"
  grep -E "^(step total|gemm |decode_att|cascade|prefill_att|overhead)" <<<"$log" |
    sed -E 's/rows +[0-9]+ \+ +[0-9]+ held  MAPE fit +[0-9.]+%  //;
            s/step total: [0-9]+ fit rows, MAPE [0-9.]+%; [0-9]+ holdout rows, MAPE/total holdout/' |
    sed 's/^/   /'
done
