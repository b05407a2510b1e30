#!/usr/bin/env bash
# main.sh: installs what is missing, builds the release preset and runs the main job: the
# simulator on the built-in default scenario (`feather run`, scenarios/default.yaml: the paper's
# 5 groups x 5K-token prefix at 100 req/s, Llama-3-8B on the RTX 6000 Ada spec profile, CHT +
# bandit). Outputs go to out/default/{summary.json,results.h5}.
# Usage: scripts/main.sh [extra flags for feather run, e.g. --set scheduler.selector=fcfs]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/install-deps.sh
bash scripts/build.sh release
echo "main.sh: running build/release/feather run $*"
exec build/release/feather run "$@"
