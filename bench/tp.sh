#!/usr/bin/env bash
# Tensor parallel overhead on one host (issue 37): decode tok/s at --tp 1 and
# --tp 2 in alternating runs (drift on a shared host hits both alike), the
# share of generation time rank 0 spends in exchanges (waiting for the slower
# rank included), and `info --tp 2`'s exchange latency. On one host the ranks
# share its cores and memory bandwidth, so this measures overhead, not scaling.
#   bench/tp.sh [MODEL] [REPS]      (env: DEEPINFER_BIN, N_GEN, THREADS)
set -euo pipefail
BIN=${DEEPINFER_BIN:-build/deepinfer}
MODEL=${1:-$HOME/.cache/deepinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf}
REPS=${2:-3}
N_GEN=${N_GEN:-64}
THREADS=${THREADS:-1}
MPI=(mpirun --oversubscribe --allow-run-as-root --bind-to core -np 2)  # one core per rank
common=(bench -m "$MODEL" -p 0 -n "$N_GEN" --reps 1 --threads "$THREADS" --no-bw --json)
for r in $(seq "$REPS"); do
  one=$("$BIN" "${common[@]}" 2>/dev/null | tail -1)
  two=$("${MPI[@]}" "$BIN" "${common[@]}" --tp 2 2>/dev/null | tail -1)
  python3 - "$one" "$two" "$r" <<'PY'
import json, sys
a, b, r = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
print(f"rep {r}: tp1 {a['tg_tok_s']:.1f} tok/s, tp2 {b['tg_tok_s']:.1f} tok/s ({b['tg_tok_s'] / a['tg_tok_s']:.2f}x); "
      f"tp2 exchanges {100 * b['tp_exchange_share']:.1f}% of generation, {b['tp_exchange_us']:.1f} us each, "
      f"{b['tp_exchange_bytes']:.0f} B on average")
PY
done
"${MPI[@]}" "$BIN" info --tp 2 | tail -1
