#!/usr/bin/env bash
# python-env.sh: creates or updates the virtual environment for feather's Python API (building
# the extension and running tests/python) from the pins in python/requirements-dev.txt.
#
# Where: $FEATHER_VENV, default ~/.cache/feather/venv (outside the repository, shared by every
# checkout). Which Python: $FEATHER_PYTHON, default python3 on PATH (3.9 or newer, with its
# headers: Debian's python3-dev and python3-venv, which scripts/install-deps.sh installs).
# Idempotent: pip runs only when the pins or the interpreter changed since the last run (a stamp
# file in the venv records both), so a second call takes well under a second. Prints the venv's
# python on the last line of stdout.
# $FEATHER_REQUIREMENTS names another pin file (scripts/vllm-conformance.sh: python/requirements-vllm.txt
# into ~/.cache/feather/venv-vllm).
# A pin file with the line `# pip: --no-deps` is installed with --no-deps: it lists every
# package itself (python/requirements-sglang.txt, into ~/.cache/feather/venv-sglang, for
# scripts/engine-cost.sh).
# Usage: scripts/python-env.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${FEATHER_VENV:-$HOME/.cache/feather/venv}
python=${FEATHER_PYTHON:-python3}
requirements=${FEATHER_REQUIREMENTS:-$root/python/requirements-dev.txt}

log() { echo "python-env: $*" >&2; }
die() { echo "python-env: error: $*" >&2; exit 1; }

command -v "$python" >/dev/null 2>&1 || die "$python not found (set FEATHER_PYTHON)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' ||
  die "$python is older than 3.9"
base_version=$("$python" -c 'import sys; print(sys.version.split()[0], sys.executable)')

# A venv made by another interpreter (or a broken one) is rebuilt from scratch.
if [[ -x $venv/bin/python ]]; then
  venv_base=$(cat "$venv/.feather-base" 2>/dev/null || true)
  if [[ $venv_base != "$base_version" ]] || ! "$venv/bin/python" -c '' 2>/dev/null; then
    log "$venv was made by another Python ($venv_base); recreating it"
    rm -rf "$venv"
  fi
fi
if [[ ! -x $venv/bin/python ]]; then
  log "creating $venv with $base_version"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" || die "python -m venv failed (Debian: apt-get install python3-venv)"
  echo "$base_version" >"$venv/.feather-base"
fi

stamp=$venv/.feather-requirements
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [[ $(cat "$stamp" 2>/dev/null || true) != "$want" ]]; then
  log "installing the pins of $requirements"
  pip_log=$(mktemp -t feather-python-env.XXXXXX)
  trap 'rm -f "$pip_log"' EXIT
  pip_flags=()
  grep -qx '# pip: --no-deps' "$requirements" && pip_flags=(--no-deps)
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q "${pip_flags[@]}" \
      -r "$requirements" \
      >"$pip_log" 2>&1; then
    tail -n 30 "$pip_log" >&2
    die "pip install failed (output above)"
  fi
  echo "$want" >"$stamp"
  log "done"
fi
echo "$venv/bin/python"
