#!/usr/bin/env bash
# catalogue.sh: regenerates results/catalogue/ and results/traces/: the paper's evaluation on the
# model engine and the committed spec profiles. Every sweep of scenarios/sweeps/ is run
# (`feather sweep`), drawn (`feather plot`), and its table, figures and provenance are copied to
# results/catalogue/<sweep>/; results/catalogue/README.md indexes them with the wall times, the
# machine load and the build that produced them. Every trace of ../shared/traces is described
# (`feather trace-stats`) in results/traces/.
#
#   scripts/catalogue.sh [--build DIR] [--jobs N] [--traces DIR] [--slow] [SWEEP_NAME...]
#     --build DIR   the build folder holding `feather` (default build/release)
#     --jobs N      points run at once (default 2)
#     --traces DIR  the Mooncake-format traces to describe (default ../shared/traces)
#     --slow        also the sweeps of scenarios/sweeps/slow/ (outside the 30-minute budget:
#                   the block-table selector on the trace takes about an hour on 2 cores)
#     SWEEP_NAME    only these sweeps (file stems of scenarios/sweeps/*.yaml); default all
#
# Runs land in out/catalogue/<sweep>/ (points with summary.json and results.h5): a rerun skips
# finished points, so an interrupted catalogue resumes, and a sweep whose points were all
# finished keeps the run time recorded when they ran. results.h5 files stay in out/ (too big to
# commit); the time-series figures are drawn from them before the copy. Plotting needs
# matplotlib (python3-matplotlib, python3-h5py); the sweeps themselves do not.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/release
jobs=2
traces=../shared/traces
only=()
slow=false
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --traces) traces=$2; shift 2 ;;
    --slow) slow=true; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "catalogue.sh: unknown option $1" >&2; exit 2 ;;
    *) only+=("$1"); shift ;;
  esac
done
feather="$build/feather"
[[ -x $feather ]] || { echo "catalogue.sh: $feather not found (build it, or pass --build DIR)" >&2; exit 2; }
python=python3
[[ -x /usr/bin/python3 ]] && python=/usr/bin/python3   # Debian's, with matplotlib

sweeps=()
sweep_files=(scenarios/sweeps/*.yaml)
[[ $slow == true ]] && sweep_files+=(scenarios/sweeps/slow/*.yaml)
for file in "${sweep_files[@]}"; do
  name=$(basename "$file" .yaml)
  if ((${#only[@]})) && [[ " ${only[*]} " != *" $name "* ]]; then continue; fi
  sweeps+=("$file")
done
((${#sweeps[@]})) || { echo "catalogue.sh: no sweep matches: ${only[*]}" >&2; exit 2; }

mkdir -p out/catalogue results/catalogue
timings=out/catalogue/timings.tsv   # sweep, run s, points run, plot s, date
touch "$timings"
# Machine load while the catalogue runs: the 1-minute load average every 15 s (other users of
# the machine slow the runs and inflate the measured scheduler time).
load_log=out/catalogue/load.txt
cut -d' ' -f1 /proc/loadavg > "$load_log"
( while sleep 15; do cut -d' ' -f1 /proc/loadavg >> "$load_log"; done ) &
sampler=$!
trap 'kill $sampler 2>/dev/null || true' EXIT

start=$(date +%s)
for file in "${sweeps[@]}"; do
  name=$(basename "$file" .yaml)
  out="out/catalogue/$name"
  echo "== $name" >&2
  t0=$(date +%s)
  summary=$("$feather" sweep "$file" --jobs "$jobs" --out "$out")
  t1=$(date +%s)
  echo "$summary"
  "$feather" plot "$out"
  t2=$(date +%s)
  dest="results/catalogue/$name"
  rm -rf "$dest"
  mkdir -p "$dest"
  cp "$out/table.csv" "$out/table.h5" "$out/sweep.json" "$out/index.md" "$dest/"
  cp -r "$out/figures" "$dest/"
  # "sweep NAME: P points, R run, F already finished, S s": keep the old time when R is 0.
  ran=$(sed -n 's/.* points\(.*\)\?, \([0-9]*\) run, .*/\2/p' <<< "$summary" | head -n1)
  if [[ ${ran:-0} != 0 ]] || ! grep -q "^$name	" "$timings"; then
    grep -v "^$name	" "$timings" > "$timings.tmp" || true
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$((t1 - t0))" "${ran:-0}" "$((t2 - t1))" \
      "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$timings.tmp"
    mv "$timings.tmp" "$timings"
  fi
done

# Traces: statistics (text and JSON) and a figure per trace.
mkdir -p results/traces
shopt -s nullglob
for trace in "$traces"/*.jsonl; do
  stem=$(basename "$trace" .jsonl)
  echo "== trace-stats $stem" >&2
  "$feather" trace-stats "$trace" > "results/traces/$stem.stats.txt"
  "$feather" trace-stats "$trace" --json > "results/traces/$stem.stats.json"
  "$python" scripts/plot_sweep.py --trace-stats "results/traces/$stem.stats.json" \
    --out results/traces
done
shopt -u nullglob
total=$(($(date +%s) - start))
kill $sampler 2>/dev/null || true
cut -d' ' -f1 /proc/loadavg >> "$load_log"

"$python" - "$feather" "$jobs" "$total" "$timings" "$load_log" "$traces" <<'PY'
import json, os, pathlib, subprocess, sys

feather, jobs, total, timings_path, load_path, traces_dir = sys.argv[1:7]
timings = {}
for line in pathlib.Path(timings_path).read_text().splitlines():
    name, run_s, ran, plot_s, date = line.split("\t")
    timings[name] = (int(run_s), int(ran), int(plot_s), date)
loads = [float(x) for x in pathlib.Path(load_path).read_text().split() if x]
version = subprocess.run([feather, "version"], capture_output=True, text=True).stdout.strip()
info = json.loads(subprocess.run([feather, "info", "--json"], capture_output=True,
                                 text=True).stdout or "{}")
root = pathlib.Path("results/catalogue")
rows = []
sweep_files = sorted(pathlib.Path("scenarios/sweeps").glob("*.yaml"))
sweep_files += sorted(pathlib.Path("scenarios/sweeps/slow").glob("*.yaml"))
for sweep in sweep_files:
    name = sweep.stem
    folder = root / name
    if not (folder / "sweep.json").exists():
        continue
    meta = json.loads((folder / "sweep.json").read_text())
    table = (folder / "table.csv").read_text().splitlines()
    figs = sorted(p.name for p in (folder / "figures").glob("*.png"))
    rows.append((name, meta.get("plot", {}).get("title", name), len(table) - 1,
                 meta.get("set", []), timings.get(name), figs))
run_total = sum(t[0] for t in timings.values())
plot_total = sum(t[2] for t in timings.values())
# Beyond the own --jobs workers, a load above the logical CPUs means other users shared them.
busy = sum(loads) / max(1, len(loads)) > float(info.get("logical_cpus", 0) or 0) + 0.5
load_comment = ("Other users shared the machine: that slows the runs and inflates the *measured* "
                "scheduler CPU time charged to simulated time (`scheduler_time: measured` in the "
                "bases), which matters most for LPM and DFS-weight" if busy else
                "Nothing else ran: the load is the sweep's own workers")
lines = ["# Experiment catalogue (model engine, spec profiles)", "",
         "Every sweep of `scenarios/sweeps/` (one per experiment of the paper's evaluation, "
         "DESIGN.md), run with `feather sweep`, drawn with `feather plot`. Regenerate all of it, "
         "and `results/traces/`, with `scripts/catalogue.sh --build BUILD_DIR` (runs in "
         "`out/catalogue/`, resumable); one experiment with "
         "`scripts/catalogue.sh --build BUILD_DIR NAME`.", "",
         "Each folder holds `table.csv` / `table.h5` (one row per point: swept values, "
         "scheduler, model, profile and every summary.json metric), `sweep.json` (the points "
         "and the provenance: sweep file, command, build, host, date), `index.md` (figures, "
         "main columns) and `figures/` (PNG + SVG). Requests per point are scaled down from the "
         "paper's 20,000 (see `scenarios/sweeps/README.md`), so absolute numbers differ from "
         "the 20,000-request runs of `results/scheduler-comparison.md`.", "",
         "| experiment | points | requests per point | run wall s (`--jobs %s`) | figures |" % jobs,
         "| --- | ---: | --- | ---: | --- |"]
for name, title, n, fixed, timing, figs in rows:
    req = next((s.split("=", 1)[1] for s in fixed if s.startswith("workload.requests=")),
               "base")
    fig_links = ", ".join("[%s](%s/figures/%s)" % (
        "time series" if f.endswith("-timeseries.png") else "summary", name, f) for f in figs)
    lines.append("| [%s](%s/index.md) | %d | %s | %s | %s |" % (
        title, name, n, req, "-" if timing is None else timing[0], fig_links))
lines += ["",
          "Real traces: statistics and figures of `%s` in [`../traces/`](../traces/README.md); "
          "the replay through every scheduler is `trace-conversation` above, and the vLLM "
          "block-table selector, which rescans every waiting request's block hashes each round "
          "and is too slow for the catalogue's budget, is `trace-conversation-block-table` "
          "(`scenarios/sweeps/slow/`, run with `--slow`)." % traces_dir, "",
          "## How this run was made", "",
          "- build: %s; host %s (%s, %s logical CPUs), %s" % (
              version, info.get("hostname", "?"), info.get("cpu_model", "?"),
              info.get("logical_cpus", "?"), info.get("os", "?")),
          "- command: `scripts/catalogue.sh --build %s --jobs %s` (each sweep: `feather sweep "
          "scenarios/sweeps/NAME.yaml --jobs %s --out out/catalogue/NAME`, then `feather plot`)"
          % (os.path.dirname(feather) or ".", jobs, jobs),
          "- sweep run times add up to %d s (%.1f min), plots to %d s; this invocation of "
          "`catalogue.sh` took %d s (%.1f min; points already finished in `out/catalogue/` "
          "are not rerun, their sweep keeps the run time recorded when they ran)" % (
              run_total, run_total / 60, plot_total, int(total), int(total) / 60),
          "- machine load during this invocation (1-minute load average every 15 s): "
          "mean %.1f, max %.1f, min %.1f over %d samples on %s logical CPUs. %s" % (
              sum(loads) / max(1, len(loads)), max(loads or [0]), min(loads or [0]), len(loads),
              info.get("logical_cpus", "?"), load_comment),
          "- profiles: the committed spec-sheet profiles (`results/profiles/`), "
          "`rtx6000-ada` unless a sweep varies it; model engine only", ""]
(root / "README.md").write_text("\n".join(lines))

# results/traces/README.md
troot = pathlib.Path("results/traces")
tl = ["# Real traces: statistics before replay", "",
      "`feather trace-stats TRACE` on every trace of `%s` (regenerated by "
      "`scripts/catalogue.sh`): requests, duration, rate over time, input/output lengths and "
      "prefix sharing counted in trace order with an unbounded cache. `<trace>.stats.json` is "
      "the `--json` form; the figure shows the rate over time, the length percentiles and how "
      "many leading blocks of each request were seen before. The replay through every "
      "scheduler: [`../catalogue/trace-conversation/`](../catalogue/trace-conversation/index.md)."
      % traces_dir, ""]
for txt in sorted(troot.glob("*.stats.txt")):
    stem = txt.name[: -len(".stats.txt")]
    tl += ["## %s" % stem, "", "![%s](%s.png)" % (stem, stem), "", "```",
           txt.read_text().rstrip(), "```", ""]
(troot / "README.md").write_text("\n".join(tl))
print("wrote %s and %s" % (root / "README.md", troot / "README.md"))
PY
echo "catalogue: ${#sweeps[@]} sweep(s) in ${total} s" >&2
