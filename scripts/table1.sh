#!/usr/bin/env bash
# table1.sh: the paper's Table 1 (scheduler share of execution time, §3 Experiment 7) with
# `scheduler_time: engine`: runs scenarios/experiments/scheduler-overhead.yaml once per selector
# and prints the scheduler time charged, the run's duration and their ratio beside the paper's.
#
#   scripts/table1.sh [--build DIR] [--set key=value]...
#
# --set goes to every run (e.g. --set scheduler_engine_cost=results/engine-cost/sglang-0.5.6.yaml
# for SGLang 0.5.6, whose radix match runs token by token in Python). Deterministic: the same
# table, scenario and seed give the same figures. About 20 s.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release
sets=()
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "table1.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=$(mktemp -d -t feather-table1.XXXXXX)
trap 'rm -rf "$out"' EXIT
printf '%-12s %9s %9s %8s %10s   %s\n' selector sched_s exec_s share tok/s "paper (share)"
for row in "fcfs:vLLM FCFS 0.00%" "dfs-weight:SGLang DFS-W 51.8%" "lpm:SGLang LPM 31.2%" \
    "block-table:PAT block table 29.0%" "oracle:vLLM user IDs 0.03%"; do
  selector=${row%%:*}
  "$build/feather" run scenarios/experiments/scheduler-overhead.yaml --out "$out/$selector" \
    --set scheduler.selector="$selector" "${sets[@]}" >/dev/null
  python3 - "$out/$selector/summary.json" "$selector" "${row#*:}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
share = s["scheduler_cpu_s"] / s["duration_s"]
print(f"{sys.argv[2]:<12} {s['scheduler_cpu_s']:9.2f} {s['duration_s']:9.2f} {share:8.1%} "
      f"{s['throughput_tok_s']:10.1f}   {sys.argv[3]}")
PY
done
