#!/usr/bin/env bash
# setup.sh: make this machine ready to build and test DeepInfer. Idempotent.
#
#   1. Debian packages (build tools and libraries), when running as root and something is
#      missing; otherwise prints the apt-get command a developer should run.
#   2. The Python venv .venv/ in the repository, from tests/requirements.txt (test tools only;
#      the engine itself needs no Python). Reinstalled only when the requirements change.
#   3. Test models into ~/.cache/deepinfer/models (or $DI_MODELS_DIR) via scripts/fetch-models.
#
# Options: --no-apt  --no-venv  --no-models  -h/--help
# Environment: PYTHON (interpreter for the venv, default python3), DI_MODELS_DIR, CI.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
DO_APT=1 DO_VENV=1 DO_MODELS=1
for arg in "$@"; do
  case "$arg" in
    --no-apt) DO_APT=0 ;;
    --no-venv) DO_VENV=0 ;;
    --no-models) DO_MODELS=0 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

say() { printf '[setup] %s\n' "$*"; }

# --- 1. Debian packages ----------------------------------------------------------------------
APT_PACKAGES=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libjansson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libxxhash-dev libsimde-dev
  python3 python3-venv python3-pip xz-utils prometheus git ca-certificates
  chromium chromium-driver python3-selenium
  openmpi-bin libopenmpi-dev libhwloc-dev
)

missing_packages() {
  local p
  for p in "${APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      printf '%s\n' "$p"
    fi
  done
}

if [[ $DO_APT == 1 ]]; then
  if ! command -v dpkg-query >/dev/null 2>&1; then
    say "apt: not a Debian-like system; install the equivalents of: ${APT_PACKAGES[*]}"
  else
    mapfile -t MISSING < <(missing_packages)
    if [[ ${#MISSING[@]} -eq 0 ]]; then
      say "apt: all ${#APT_PACKAGES[@]} packages already installed"
    elif [[ $(id -u) -eq 0 ]]; then
      say "apt: installing ${MISSING[*]}"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -q
      apt-get install -y -q --no-install-recommends "${MISSING[@]}"
    else
      say "apt: missing packages: ${MISSING[*]}"
      say "apt: not root, so not installing them; run:"
      say "     sudo apt-get update && sudo apt-get install -y ${MISSING[*]}"
    fi
  fi
else
  say "apt: skipped (--no-apt)"
fi

# --- 2. Python venv for the tests ------------------------------------------------------------
VENV="$REPO/.venv"
REQ="$REPO/tests/requirements.txt"
if [[ $DO_VENV == 1 ]]; then
  if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    say "venv: creating $VENV with $PYTHON ($("$PYTHON" --version 2>&1))"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
  else
    say "venv: $VENV exists ($("$VENV/bin/python" --version 2>&1))"
  fi
  if [[ -f "$REQ" ]]; then
    want="$( (sha256sum "$REQ"; "$VENV/bin/python" --version 2>&1) | sha256sum | cut -d' ' -f1)"
    stamp="$VENV/.deepinfer-requirements.sha256"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
      say "venv: requirements unchanged since last install ($REQ)"
    else
      say "venv: installing $REQ"
      "$VENV/bin/python" -m pip install -q --upgrade pip
      "$VENV/bin/python" -m pip install -r "$REQ"
      printf '%s\n' "$want" > "$stamp"
    fi
  else
    say "venv: $REQ not found; nothing to install"
  fi
else
  say "venv: skipped (--no-venv)"
fi

# --- 3. test models --------------------------------------------------------------------------
if [[ $DO_MODELS == 1 ]]; then
  say "models: scripts/fetch-models"
  if [[ -x "$VENV/bin/python" ]]; then export DI_PYTHON="${DI_PYTHON:-$VENV/bin/python}"; fi
  FETCH_PY="$PYTHON"
  command -v "$FETCH_PY" >/dev/null 2>&1 || FETCH_PY=python3
  # pip for downloads: the system one, or the venv's when the system has none
  if ! "$FETCH_PY" -m pip --version >/dev/null 2>&1 && [[ -x "$VENV/bin/python" ]]; then
    export PIP="${PIP:-$VENV/bin/python -m pip}"
  fi
  "$FETCH_PY" "$REPO/scripts/fetch-models"
else
  say "models: skipped (--no-models)"
fi

say "done"
