#!/usr/bin/env python3
"""Bytes and exchanges per decode token under --tp N (deterministic counters
of `run --stats`): runs -n 8 and -n 16 with --ignore-eos and takes the
difference / 8, with the logits reduced on the ranks (sampling on split
logits) and with whole rows gathered on rank 0 (DI_TP_FULL_LOGITS=1).

  bench/tp_bytes.py [--bin build/deepinfer] [--ranks 2 3] MODEL... """
import argparse
import json
import os
import subprocess

SAMPLING = {"greedy": ["--temp", "0"], "top-k 40": ["--temp", "0.8", "--top-k", "40", "--top-p", "0.95"]}


def stats(binary, model, n, gen, args, full):
    env = dict(os.environ, **({"DI_TP_FULL_LOGITS": "1"} if full else {}))
    argv = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "-np", str(n),
            "-x", "DI_TP_FULL_LOGITS"] if full else ["mpirun", "--oversubscribe", "--allow-run-as-root",
                                                     "--bind-to", "none", "-np", str(n)]
    argv += [binary, "run", "-m", model, "-p", "Once upon a time", "-n", str(gen), "--ignore-eos", "--threads", "1",
             "--stats", "--print-ids", "--tp", str(n), *args]
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    r.check_returncode()
    return json.loads(r.stderr.strip().splitlines()[-1])["tp"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/deepinfer")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    print("| model | ranks | sampling | exchanges / token | KB / token, whole rows -> split |")
    print("|---|---|---|---|---|")
    for m in a.models:
        for n in a.ranks:
            for name, args in SAMPLING.items():
                per = {}
                for full in (True, False):
                    s8, s16 = (stats(a.bin, m, n, g, args, full) for g in (8, 16))
                    per[full] = ((s16["exchanges"] - s8["exchanges"]) / 8, (s16["exchange_bytes"] - s8["exchange_bytes"]) / 8e3)
                print(f"| {os.path.basename(m)} | {n} | {name} | {per[True][0]:g} -> {per[False][0]:g} | "
                      f"{per[True][1]:.1f} -> {per[False][1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
