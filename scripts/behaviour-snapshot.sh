#!/usr/bin/env bash
# behaviour-snapshot.sh: what the model engine computes for every shipped scenario and sweep, in
# a form two builds can be compared by, byte for byte. For refactors that must not change
# behaviour (issue 14): take a snapshot with the build before, one with the build after, compare.
#
#   scripts/behaviour-snapshot.sh [--build DIR] [--jobs N] [--no-sweeps] OUT
#     Runs with `--set scheduler_time=zero` (measured scheduler CPU differs run to run):
#       every scenarios/*.yaml, scenarios/experiments/*.yaml and scenarios/validation/*.yaml
#       (the last with engine=model) -> OUT/scenarios/<folder>-<stem>/summary.json, results.h5;
#       every scenarios/sweeps/*.yaml (not slow/) -> OUT/sweeps/<stem>/ (table.csv, points).
#     OUT must not exist (nothing is ever overwritten).
#   scripts/behaviour-snapshot.sh --compare BEFORE AFTER
#     Compares two snapshots: each summary.json without its "provenance" (build and host, which
#     differ by design) and each sweep's table.csv, byte for byte; exits 1 and names every file
#     that differs, 0 when all are identical.
#
# Wall time on 2 cores: about 2 minutes without sweeps, 15-20 with them (--jobs 2).
set -euo pipefail
cd "$(dirname "$0")/.."

compare_snapshots() {
  python3 - "$1" "$2" <<'PY'
import json, pathlib, sys
before, after = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
def files(root):
    found = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if p.name == "summary.json" or (p.name == "table.csv" and rel.parts[0] == "sweeps"):
            found[str(rel)] = p
    return found
a, b = files(before), files(after)
differ = []
for rel in sorted(set(a) | set(b)):
    if rel not in a or rel not in b:
        differ.append(f"{rel}: only in {'after' if rel in b else 'before'}")
        continue
    x, y = a[rel].read_bytes(), b[rel].read_bytes()
    if rel.endswith("summary.json"):
        jx, jy = json.loads(x), json.loads(y)
        jx.pop("provenance", None); jy.pop("provenance", None)
        jx.get("scenario", {}).pop("source", None); jy.get("scenario", {}).pop("source", None)
        x, y = json.dumps(jx, indent=1).encode(), json.dumps(jy, indent=1).encode()
    if x != y:
        differ.append(f"{rel}: differs")
print(f"compared {len(set(a) | set(b))} files: {len(differ)} differ")
for line in differ:
    print("  " + line)
sys.exit(1 if differ else 0)
PY
}

build=build/release
jobs=2
sweeps=true
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --no-sweeps) sweeps=false; shift ;;
    --compare)
      (($# == 3)) || { echo "behaviour-snapshot.sh: --compare BEFORE AFTER" >&2; exit 2; }
      compare_snapshots "$2" "$3"
      exit $?
      ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "behaviour-snapshot.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
(($# == 1)) || { echo "behaviour-snapshot.sh: one output folder expected (see --help)" >&2; exit 2; }
out=$1
feather="$build/feather"
[[ -x $feather ]] || { echo "behaviour-snapshot.sh: $feather not found (--build DIR)" >&2; exit 2; }
[[ -e $out ]] && { echo "behaviour-snapshot.sh: $out exists; name a new folder" >&2; exit 2; }
mkdir -p "$out/scenarios" "$out/sweeps"

start=$SECONDS
for file in scenarios/*.yaml scenarios/experiments/*.yaml scenarios/validation/*.yaml; do
  folder=$(basename "$(dirname "$file")")
  name="$folder-$(basename "$file" .yaml)"
  extra=()
  [[ $folder == validation ]] && extra=(--set engine=model)
  echo "behaviour-snapshot: $file"
  "$feather" run "$file" --set scheduler_time=zero "${extra[@]}" --out "$out/scenarios/$name" \
    >"$out/scenarios/$name.txt"
done
if [[ $sweeps == true ]]; then
  for file in scenarios/sweeps/*.yaml; do
    name=$(basename "$file" .yaml)
    echo "behaviour-snapshot: sweep $file"
    "$feather" sweep "$file" --jobs "$jobs" --set scheduler_time=zero --out "$out/sweeps/$name" \
      >"$out/sweeps/$name.txt"
  done
fi
echo "behaviour-snapshot: $out written in $((SECONDS - start)) s"
