#!/usr/bin/env bash
# quickstart.sh: set everything up, build, and talk to the default model
# (SmolLM2-135M-Instruct) through `deepinfer run`.
#
#   scripts/quickstart.sh ["prompt"]
#
# Environment: JOBS (build parallelism, default 2).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
case "${1:-}" in -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
PROMPT="${1:-The three most useful things to know about the ocean are}"
scripts/setup.sh --no-venv
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"${JOBS:-2}"
MODEL="$(scripts/fetch-models --print-default)"
echo "[quickstart] deepinfer run -m $MODEL -p \"$PROMPT\" -n 64 --temp 0"
exec build/deepinfer run -m "$MODEL" -p "$PROMPT" -n 64 --temp 0
