#!/usr/bin/env python3
"""Resume after preemption at several context lengths (issue 36): two documents
of N tokens at once (`deepinfer batch --concurrency 2`) in a pool that holds
the full-attention KV of about one and a half of them, so one sequence is
preempted and resumes when the other is done. With bounded replay the resumed
sequence maps its cached full-attention blocks and replays at most C positions
of sliding-window state; with --no-replay its windows are gone and it
recomputes from where the cache is cut. Reports, per N and configuration, the
preemptions, the positions computed beyond one pass over both prompts
(batch_tokens - prompts - decode tokens), the largest replay, and the wall time
beside the same two requests one at a time in a roomy pool (no preemption).
Outputs must equal the roomy run's (greedy; the script fails otherwise).

  bench/swa_resume.py -m ~/.cache/deepinfer/models/gemma-3-270m-q4_k_m.gguf --contexts 4096,8192,16384"""
import argparse
import json
import random
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GEN, Q = 32, 16


def batch(binary, model, prompts, args, concurrency, tmp):
    inp, outp, stats = tmp / "in.jsonl", tmp / "out.jsonl", tmp / "stats.json"
    with open(inp, "w") as f:
        for i, p in enumerate(prompts):
            body = {"prompt": p, "max_tokens": GEN, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
            f.write(json.dumps({"custom_id": str(i), "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
    r = subprocess.run([binary, "batch", "-m", model, "-i", str(inp), "-o", str(outp), "-q", "--stats-json", str(stats),
                        "--concurrency", str(concurrency), "--ctx", str(len(prompts[0]) + GEN + 16), *args],
                       capture_output=True, text=True, timeout=7200)
    if r.returncode != 0:
        raise SystemExit(f"batch failed: {r.stderr[-2000:]}")
    ids = {}
    for line in outp.read_text().splitlines():
        res = json.loads(line)
        if res["error"]:
            raise SystemExit(f"request {res['custom_id']}: {res['error']}")
        ids[int(res["custom_id"])] = res["response"]["body"]["choices"][0]["token_ids"]
    return [ids[i] for i in range(len(prompts))], json.loads(stats.read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=str(ROOT / "build" / "deepinfer"))
    ap.add_argument("--contexts", default="4096,8192,16384")
    ap.add_argument("--checkpoint", default="2048")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--full-bytes", type=int, default=3072, help="full-attention KV bytes per position (Gemma 3 270M, f16)")
    ap.add_argument("--window-mib", type=float, default=16,
                    help="sliding KV one running sequence needs (window + a chunk), MiB")
    a = ap.parse_args()
    rng = random.Random(36)
    print("| N | server | preemptions | positions recomputed | largest replay | steps | seconds | one at a time, roomy |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in a.contexts.split(",")):
        prompts = [[rng.randrange(100, 200000) for _ in range(n + Q)] for _ in range(2)]
        pool = int(1.5 * (n + Q + GEN + 16) * a.full_bytes + 2 * a.window_mib * 2**20)
        one_pass = 2 * (n + Q) + 2 * (GEN - 1)
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            common = ["--threads", a.threads]
            ref, st0 = batch(a.bin, a.model, prompts, [*common, "--kv-mem", str(4 * pool)], 1, tmp)
            for name, extra in ((f"replay C={a.checkpoint}", ["--swa-checkpoint", a.checkpoint]),
                                ("--no-replay", ["--no-replay"])):
                got, st = batch(a.bin, a.model, prompts, [*common, "--kv-mem", str(pool), *extra], 2, tmp)
                if got != ref:
                    raise SystemExit(f"N={n} {name}: outputs differ from the roomy run")
                print(f"| {n} | {name} | {st['preemptions']} | {st['batch_tokens'] - one_pass} | "
                      f"{st['swa_replay_max']} | {st['steps']} | {st['seconds']:.1f} | {st0['seconds']:.1f} "
                      f"({st0['steps']} steps) |", flush=True)


if __name__ == "__main__":
    main()
