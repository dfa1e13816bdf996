#!/usr/bin/env python3
"""DeepSeek-V4 prefill and decode, two binaries side by side (A/B runs
alternated, medians, so load from other processes hits both alike): `deepinfer
run --stats` on one of the tiny test models (tests/golden/deepseek_v4/gen_tiny.py
writes them; test_deepseek_v4 leaves them in ~/.cache/deepinfer/gen) with a
random prompt of N token ids, greedy, G generated tokens. The generated ids must
agree between the binaries (the script fails otherwise). Besides the wall-clock
tok/s of --stats it reports CPU-time rates, which a loaded machine disturbs far
less: prefill = N / CPU seconds of a run generating 1 token (loading the tiny
model included), decode = (G - 1) / the CPU seconds a G-token run adds (nan when load noise
makes that difference negative: raise G).

  bench/dsv4_ab.py --a OLD/deepinfer --b build/deepinfer \\
      -m ~/.cache/deepinfer/gen/deepseek-v4-tiny-g2/flashratio --prompt 4096 --gen 256 --reps 3 -t 1

Also for GGUF models with a real vocabulary (--vocab 32768 for flash-mini's random prompt ids)."""
import argparse
import json
import random
import resource
import statistics
import subprocess


def run(binary, model, ids, gen, threads, ctx):
    cmd = [binary, "run", "-m", model, "--ids", ",".join(map(str, ids)), "-n", str(gen), "--temp", "0",
           "--ignore-eos", "--print-ids", "--stats", "-t", str(threads), "-c", str(ctx)]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    stats = json.loads(p.stderr.strip().splitlines()[-1])
    stats["cpu_s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return stats, p.stdout.strip().splitlines()[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--each", action="store_true", help="also print every run's figures (round by round)")
    args = ap.parse_args()
    rng = random.Random(7)
    ids = [rng.randrange(args.vocab) for _ in range(args.prompt)]
    ctx = args.prompt + args.gen + 16
    res = {"a": [], "b": []}
    outs = {}
    for _ in range(args.reps):
        for k in ("a", "b"):
            one, _ = run(getattr(args, k), args.model, ids, 1, args.threads, ctx)
            st, out = run(getattr(args, k), args.model, ids, args.gen, args.threads, ctx)
            res[k].append({"prefill": args.prompt / st["prefill_s"], "decode": st["decode_tok_s"],
                           "prefill_cpu": args.prompt / one["cpu_s"],
                           "decode_cpu": (args.gen - 1) / (st["cpu_s"] - one["cpu_s"])
                           if st["cpu_s"] > one["cpu_s"] else float("nan")})
            outs.setdefault(k, out)
            if args.each:
                r = res[k][-1]
                print(f"  round {len(res[k])} {k}: decode {r['decode']:.2f} tok/s wall, {r['decode_cpu']:.2f} tok/s CPU "
                      f"(CPU s: 1 token {one['cpu_s']:.2f}, {args.gen} tokens {st['cpu_s']:.2f})", flush=True)
    if outs["a"] != outs["b"]:
        raise SystemExit("generated ids differ between the binaries")
    med = {k: {m: statistics.median(r[m] for r in res[k]) for m in res[k][0]} for k in res}
    for k in ("a", "b"):
        x = med[k]
        print(f"{k}: prefill {x['prefill']:8.1f} tok/s wall {x['prefill_cpu']:8.1f} tok/s CPU   "
              f"decode {x['decode']:7.1f} tok/s wall {x['decode_cpu']:7.1f} tok/s CPU  ({getattr(args, k)})")
    print("b/a: " + "  ".join(f"{m} {med['b'][m] / med['a'][m]:.2f}x" for m in med["a"]))

if __name__ == "__main__":
    main()
