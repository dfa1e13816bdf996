#!/usr/bin/env bash
# quickstart.sh: set everything up, build, and chat with the default model
# (SmolLM2-135M-Instruct) through `deepinfer chat`; with a prompt, complete it
# once through `deepinfer run` instead.
#
#   scripts/quickstart.sh ["prompt"]
#
# Environment: JOBS (build parallelism, default 2).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
case "${1:-}" in -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
scripts/setup.sh --no-venv
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"${JOBS:-2}"
MODEL="$(scripts/fetch-models --print-default)"
if [[ $# -eq 0 ]]; then
  echo "[quickstart] deepinfer chat -m $MODEL --stats"
  exec build/deepinfer chat -m "$MODEL" --stats
fi
echo "[quickstart] deepinfer run -m $MODEL -p \"$1\" -n 64 --temp 0"
exec build/deepinfer run -m "$MODEL" -p "$1" -n 64 --temp 0
