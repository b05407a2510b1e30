#!/usr/bin/env bash
# policy-suite.sh: the policy generalisation suite (issue 15 item 1). Runs every sweep file of
# scenarios/suites/policies/ (every scenario through every shipped scheduler, model engine,
# scheduler time measured) and writes, in OUT:
#   table.csv     scenario, scheduler, throughput tok/s, mean batch size, ratio to FCFS, ratio to
#                 the best non-Feather scheduler, that scheduler's name
#   table.md      the headline (Feather policies vs FCFS and vs the best other, per scenario)
#                 and the full table
#   figure.png    the ratios as grouped bars (and figure.svg)
#   run.md        the command, the build, the machine, its load and the wall time
#   sweeps/NAME/  each sweep's points and table (`feather sweep`)
#   pretrained/   pretrain on one, evaluate on the others (issue 15 item 3): Q-learning with the
#                 cascade bins and the hold option pretrained on each source scenario
#                 (SOURCE.json, SOURCE.log), then
#                 run frozen on every scenario (SOURCE/NAME/); the table is pretrained.md
#
#   scripts/policy-suite.sh [--jobs N] [--build DIR] [--set key=value]... OUT
#     --jobs N         points run at once (default 2; the suite is sized for 15 minutes on 2 cores)
#     --build DIR      the build folder holding `feather` (default build/release)
#     --set key=value  override every point (e.g. --set scheduler_time=zero for results that
#                      do not depend on this machine's speed; see the suite's README)
#     OUT              a new or empty folder, or one this script made earlier (resumed: the
#                      finished points are kept). Anything else is refused (exit 2).
#
# Bad usage exits 2 with a message; a failed run exits non-zero. Plotting needs python3 with
# matplotlib (scripts/install-deps.sh: python3-matplotlib).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/policy-suite.sh [--jobs N] [--build DIR] [--set key=value]... OUT" >&2; }
bad() { echo "policy-suite.sh: $1" >&2; usage; exit 2; }

jobs=2
build=build/release
sets=()
out=
while (($#)); do
  case $1 in
    --jobs)
      (($# >= 2)) || bad "--jobs needs a value"
      [[ $2 =~ ^[1-9][0-9]*$ ]] || bad "--jobs must be a positive integer, not '$2'"
      jobs=$2; shift 2 ;;
    --build)
      (($# >= 2)) || bad "--build needs a value"
      build=$2; shift 2 ;;
    --set)
      (($# >= 2)) || bad "--set needs key=value"
      [[ $2 == ?*=* ]] || bad "--set needs key=value, not '$2'"
      sets+=(--set "$2"); shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    -*) bad "unknown option $1" ;;
    *)
      [[ -z $out ]] || bad "one output folder only (got '$out' and '$1')"
      out=$1; shift ;;
  esac
done
[[ -n $out ]] || bad "no output folder given"
feather="$build/feather"
[[ -x $feather ]] || bad "$feather not found (build it, or pass --build DIR)"
python=python3
[[ -x /usr/bin/python3 ]] && python=/usr/bin/python3   # Debian's, with matplotlib

# Never overwrite what this script did not make: OUT must be new, empty, or carry our marker.
marker=.feather-policy-suite
if [[ -e $out || -L $out ]]; then
  [[ -d $out && ! -L $out ]] || bad "$out exists and is not a folder"
  if [[ ! -e $out/$marker ]] && [[ -n $(ls -A "$out") ]]; then
    bad "$out is not empty and was not made by policy-suite.sh; give a new folder"
  fi
fi
mkdir -p "$out/sweeps"
echo "policy-suite.sh output; rerunning into this folder resumes it" > "$out/$marker"

files=(scenarios/suites/policies/*.yaml)
suite_files=()
for f in "${files[@]}"; do
  [[ $(basename "$f") == base.yaml ]] || suite_files+=("$f")
done

load_log="$out/load.txt"
cut -d' ' -f1 /proc/loadavg > "$load_log"
( while sleep 15; do cut -d' ' -f1 /proc/loadavg >> "$load_log"; done ) &
sampler=$!
trap 'kill $sampler 2>/dev/null || true' EXIT

start=$(date +%s)
for f in "${suite_files[@]}"; do
  name=$(basename "$f" .yaml)
  echo "== $name" >&2
  "$feather" sweep "$f" --jobs "$jobs" --out "$out/sweeps/$name" "${sets[@]}"
done
# Pretrain on one, evaluate on the others: each source is a suite scenario, given as the
# overrides of base.yaml that make it. The frozen runs reuse the sweep files' points: shard 1/R
# (R = the file's vary rows) is each scenario once, and the --set after it makes that point the
# frozen pretrained Q-learning.
# Q-learning with the hold option (policies/qlearning_policy.h): with it the table's decisions
# are few and far apart, so pretraining runs 200,000 steps (40,000 kept a table from the first
# epochs, 0.91-0.94x the bandit); the sources pretrain side by side, $jobs at a time. Judging
# each epoch on 3 held-out workloads (`--held-out 3`) kept, with the earlier batch-only hold
# bound, a table that ran default seeds 1-3 as the single held-out workload's did (0.946 /
# 0.965 / 0.965x the bandit), and a suite run with it took 12.9 minutes instead of 9.4.
pretrain_steps=200000
pretrain_sources=("default" "prefix-1k workload.sharing.prefix_tokens=1000"
                  "rate-20 workload.arrival.rate=20")
qsets=(--set scheduler.selector=cht --set scheduler.stop=qlearning
       --set scheduler.state_bins=cascade --set scheduler.reward_time=step
       --set scheduler.qlearning.hold=true)
mkdir -p "$out/pretrained"
pretraining=()  # pids (the load sampler is a job too, so no bare `wait`)
for source in "${pretrain_sources[@]}"; do
  read -r name overrides <<< "$source"
  over=()
  for o in $overrides; do over+=(--set "$o"); done
  policy="$out/pretrained/$name.json"
  if [[ ! -e $policy ]]; then
    if (( ${#pretraining[@]} >= jobs )); then
      wait "${pretraining[0]}" || true
      pretraining=("${pretraining[@]:1}")
    fi
    echo "== pretrain on $name" >&2
    "$feather" pretrain scenarios/suites/policies/base.yaml "${over[@]}" "${qsets[@]}" \
      "${sets[@]}" --steps "$pretrain_steps" --out "$policy" > "$out/pretrained/$name.log" &
    pretraining+=($!)
  fi
done
for pid in "${pretraining[@]}"; do wait "$pid" || true; done
for source in "${pretrain_sources[@]}"; do
  read -r name overrides <<< "$source"
  policy="$out/pretrained/$name.json"
  [[ -e $policy ]] || { echo "policy-suite.sh: pretraining on $name wrote no $policy" >&2; exit 1; }
  for f in "${suite_files[@]}"; do
    rows=$(sed -n '/^vary:/,$p' "$f" | grep -c '^    - \[')
    "$feather" sweep "$f" --shard "1/$rows" --jobs "$jobs" \
      --out "$out/pretrained/$name/$(basename "$f" .yaml)" "${sets[@]}" "${qsets[@]}" \
      --set "scheduler.policy.load=$(realpath "$policy")" --set scheduler.policy.learning=false
  done
done
end=$(date +%s)
kill $sampler 2>/dev/null || true

"$python" scripts/policy_suite.py "$out"

wall=$((end - start))
loads=$(tr '\n' ' ' < "$load_log")
{
  echo "# How this suite run was made"
  echo
  echo "- command: \`scripts/policy-suite.sh --jobs $jobs --build $build ${sets[*]} $out\`"
  echo "- sweep wall time: ${wall} s ($(awk -v s="$wall" 'BEGIN { printf "%.1f", s / 60 }') min) for the points run by this invocation (finished points of an earlier one are not rerun)"
  echo "- build: $("$feather" version | head -1); git $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified tree)')"
  echo "- machine: $(uname -n), $(nproc) logical CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "- 1-minute load average every 15 s during the sweeps: $loads"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out/run.md"
echo "policy-suite.sh: ${wall} s; $out/table.md, $out/table.csv, $out/figure.png" >&2
