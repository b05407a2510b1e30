#!/usr/bin/env bash
# main.sh: installs what is missing, builds the release preset and runs the main job.
# The main job is, for now, the CHT operations benchmark (`feather bench cht-ops`); once the
# simulator lands it becomes `feather run scenarios/default.yaml`.
# Usage: scripts/main.sh [extra flags for the main job, e.g. --json]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/install-deps.sh
bash scripts/build.sh release
echo "main.sh: running build/release/feather bench cht-ops $*"
exec build/release/feather bench cht-ops "$@"
