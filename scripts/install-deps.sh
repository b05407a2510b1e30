#!/usr/bin/env bash
# install-deps.sh: installs, with apt-get, the Debian packages feather needs that are missing.
#
# Idempotent: checks every package with dpkg-query first and does nothing (no `apt-get update`,
# no root needed) when all are installed. Uses sudo when not run as root.
# Usage: scripts/install-deps.sh
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libeigen3-dev libxxhash-dev libyaml-cpp-dev libhdf5-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
  python3 python3-dev python3-venv   # python3-dev/-venv: the Python API (scripts/python-env.sh)
  python3-matplotlib python3-h5py   # feather plot only (scripts/plot_sweep.py)
  clang libclang-rt-dev libomp-dev   # scripts/fuzz.sh: libFuzzer builds with clang
)

log() { echo "install-deps: $*"; }
die() { echo "install-deps: error: $*" >&2; exit 1; }

if ! command -v dpkg-query >/dev/null 2>&1; then
  die "dpkg-query not found: this script supports Debian/Ubuntu (apt) only"
fi

missing=()
for package in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  if [[ $status != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  log "all ${#PACKAGES[@]} packages present"
  exit 0
fi

sudo_cmd=()
if ((EUID != 0)); then
  command -v sudo >/dev/null 2>&1 || die "not root and sudo not found; install as root: ${missing[*]}"
  sudo_cmd=(sudo)
fi

log "installing ${#missing[@]} missing package(s): ${missing[*]}"
apt_log=$(mktemp -t feather-install-deps.XXXXXX)
trap 'rm -f "$apt_log"' EXIT
apt_get=("${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y
         -o DPkg::Lock::Timeout=300)

if ! "${apt_get[@]}" update >"$apt_log" 2>&1; then
  tail -n 30 "$apt_log" >&2
  die "apt-get update failed (output above)"
fi
if ! "${apt_get[@]}" install --no-install-recommends "${missing[@]}" >"$apt_log" 2>&1; then
  tail -n 30 "$apt_log" >&2
  die "apt-get install failed (output above)"
fi

# Check again: a package apt-get skipped must not pass silently.
still_missing=()
for package in "${missing[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || still_missing+=("$package")
done
((${#still_missing[@]} == 0)) || die "still not installed: ${still_missing[*]}"
log "done"
