#!/usr/bin/env bash
# scaling.sh: how `feather run` scales with the number of requests (issue 19's table): the
# default scenario (CHT + UCB bandit) and FCFS at 5K, 20K, 100K and 1M requests, each run once,
# with wall time and peak RSS (/usr/bin/time) and simulated seconds per wall second (from
# summary.json's duration_s). Scheduler time is measured, as in the default scenario.
#
#   scripts/scaling.sh [--build DIR] [--requests "5000 20000 ..."]
#
# Prints a Markdown table on stdout. A size whose estimated peak memory would take more than half
# of the available memory is not run; its row says so. Prompts are stored once per distinct
# prefix (sim/workload/prompt_store.h), so memory follows requests, not prompt tokens: the
# estimate is 2 KB per request (measured: 1.3 KB per request at 100K and 1.1 KB at 1M with CHT,
# whose waiting queue grows with the run; FCFS 0.7-0.9 KB). Runs go to a temporary folder that is removed at
# the end.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/release
sizes="5000 20000 100000 1000000"
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --requests) sizes=$2; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "scaling.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
feather="$build/feather"
[[ -x $feather ]] || { echo "scaling.sh: $feather not found (--build DIR)" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "scaling.sh: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }

tmp=$(mktemp -d -t feather-scaling.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
available_kb=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
# The default scenario's prompts: 5,000 shared + 50-150 own tokens (scenarios/default.yaml);
# limits.max_total_tokens counts them as if stored whole, so it is raised to fit.
tokens_per_request=5100
bytes_per_request=2048

echo "| requests | scheduler | wall s | peak RSS MB | simulated s | simulated s per wall s |"
echo "|---:|---|---:|---:|---:|---:|"
for n in $sizes; do
  need_kb=$((n * bytes_per_request / 1024))
  for scheduler in "cht bandit" "fcfs always"; do
    read -r selector stop <<<"$scheduler"
    label="$selector + $stop"
    if ((need_kb * 2 > available_kb)); then
      echo "| $n | $label | not run: an estimated $((need_kb / 1024)) MB is over half of the $((available_kb / 1024)) MB available | | | |"
      continue
    fi
    out="$tmp/run-$n-$selector"
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$feather" run \
      --set workload.requests="$n" --set scheduler.selector="$selector" --set scheduler.stop="$stop" \
      --set limits.max_total_tokens=$((n * tokens_per_request * 2)) --set limits.allow_unservable=true \
      --out "$out" >/dev/null 2>"$tmp/err" || {
      echo "| $n | $label | failed: $(tail -n 1 "$tmp/err") | | | |"
      continue
    }
    read -r wall rss_kb <"$tmp/time"
    simulated=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['duration_s'])" "$out/summary.json")
    python3 - "$n" "$label" "$wall" "$rss_kb" "$simulated" <<'PY'
import sys
n, label, wall, rss_kb, simulated = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
rate = simulated / wall if wall > 0 else float("inf")
print(f"| {n} | {label} | {wall:.2f} | {rss_kb / 1024:.0f} | {simulated:.0f} | {rate:.0f} |")
PY
    rm -rf "$out"
  done
done
