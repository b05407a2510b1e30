#!/usr/bin/env bash
# Refit every committed CPU row set twice: the pairs-only prefill model (--hold) and with the row cost.
# Usage: results/validation/issue-20-prefill-query/refit-all.sh  (FEATHER=path/to/feather; EXTRA="dir ..." adds row sets).
# Writes its profiles to a fresh temporary folder and prints one line per set and model.
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
bin=${FEATHER:-build/release/feather}
out_dir=$(mktemp -d)
printf "%-28s %-7s %9s %9s %9s %12s %8s\n" set model total_ho prefill_ho gemm_ho q_ns attn_eff
for d in results/validation/issue-20-fresh-vm results/validation/issue-20-host-probes results/validation/issue-20-passes results/validation/issue-20-quiet results/validation/issue-20-weight-stream results/validation/issue-20-xeon-amx-1202 results/validation/issue-20-zen5 results/validation/issue-21-after-avx results/validation/issue-21-bf16-math results/validation/issue-21-headdim results/profiles results/validation/issue-20-zen4-1201/a ${EXTRA:-}; do
  for mode in old new; do
    # decode_layer_fixed_ns (a later term, issue-20-decode-layer) held at 0 in both: this
    # compares the prefill term alone, as at the commit that wrote refit-all.txt.
    args=(--hold decode_layer_fixed_ns)
    [[ $mode == old ]] && args=(--hold prefill_query_fixed_ns,decode_layer_fixed_ns)
    out=$out_dir/refit-$(basename $d)-$mode.yaml
    log=$($bin calibrate --refit $d/cpu-rows.csv --base $d/cpu.yaml "${args[@]}" --out $out 2>&1)
    total=$(grep -o "holdout rows, MAPE [0-9.]*%" <<<"$log" | head -1 | grep -o "[0-9.]*%")
    pre=$(grep "^prefill_attention" <<<"$log" | grep -o "holdout *[0-9.]*%" | grep -o "[0-9.]*%")
    gemm=$(grep "^gemm " <<<"$log" | grep -o "holdout *[0-9.]*%" | grep -o "[0-9.]*%")
    q=$(grep "prefill_query_fixed_ns" <<<"$log" | awk '{print $3}' | head -1)
    e=$(grep "  attn_flops_efficiency" <<<"$log" | awk '{print $3}' | head -1)
    printf "%-28s %-7s %9s %9s %9s %12s %8s\n" $(basename $d) $mode "$total" "$pre" "$gemm" "$q" "$e"
  done
done
