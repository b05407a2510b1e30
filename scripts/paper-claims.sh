#!/usr/bin/env bash
# paper-claims.sh: the paper's quantitative claims as a rerunnable check. Runs every feather run
# that scripts/paper_claims.yaml's claims need (identical runs once, --jobs at a time), compares
# feather's value of each claim with the paper's and writes results/paper-claims/ (table.md,
# table.csv, summary.md/json, figures/, provenance.json). §3 and appendix A/B are the cost model's
# fitting data; §5 and appendix D the held-out validation. README: results/paper-claims/README.md.
#
#   scripts/paper-claims.sh [--build DIR] [--jobs N] [--out DIR] [--cache DIR] [--claims FILE]
#                           [--only ID_PREFIX...] [--feather-stop STOP] [--check]
#     --build DIR   the build folder holding `feather` (default build/release)
#     --jobs N      runs at once (default 2)
#     --out DIR     output folder (default results/paper-claims); an existing one is replaced
#                   only if this script wrote it (it holds .paper-claims), else exit 2
#     --cache DIR   where runs are kept, per binary (default out/paper-claims): a rerun with the
#                   same binary reuses them; a new binary reruns everything
#     --feather-stop STOP  Feather's runs (the feather* aliases that name the bandit, as the paper
#                   ran Feather) use this stop policy instead, e.g. converge, the binary's default;
#                   needs its own --out (results/paper-claims-converge/ is that check)
#     --check       validate the claims file only (exit 2 with FILE:LINE: FIELD: message)
#
# Needs Python 3 with PyYAML; figures need matplotlib, the time-series claims h5py (Debian's
# python3-yaml, python3-matplotlib, python3-h5py; the project venv has PyYAML and h5py).
# Under a minute on 2 cores since LPM and DFS-weight run under serving.engine sglang (about 10
# minutes before, when they re-ranked the queue every vLLM round); provenance.json: wall_s.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${FEATHER_CLAIMS_PYTHON:-}
if [[ -z $python ]]; then
  for p in /usr/bin/python3 "$HOME/.cache/feather/venv/bin/python" python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import yaml' 2>/dev/null; then python=$p; break; fi
  done
fi
[[ -n $python ]] || { echo "paper-claims.sh: no Python 3 with PyYAML found (set FEATHER_CLAIMS_PYTHON)" >&2; exit 2; }
case ${1:-} in -h | --help) sed -n '2,23p' "$0"; exit 0 ;; esac
exec "$python" scripts/paper_claims.py "$@"
