#!/usr/bin/env python3
"""Speculative decoding under load (issue 35): C concurrent requests through
`deepinfer serve`, half input-grounded (the edit / extract / rewrite prompts
of bench/spec_bench.py), half open-ended (short questions whose answers do
not repeat their prompt), greedy, --gen tokens each. Two servers with the
same settings but --spec off and --spec ngram run the same request set in
alternating rounds (off, ngram, off, ngram, ...), so drift on a shared host
hits both alike; aggregate throughput = generated tokens / wall time of a
round. Prints per-round and mean throughput, the ratio ngram / off, and the
acceptance the ngram server reports; exits 1 if any output differs between
the two (speculation must never change greedy output).

  bench/spec_load.py -m ~/.cache/deepinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf [--clients 16] [--rounds 2]"""
import argparse
import json
import re
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spec_bench import workloads  # noqa: E402  (the grounded prompts)
from swa_replay import ROOT, start  # noqa: E402  (one server launcher for the benches)

OPEN_ENDED = ["Once upon a time, in a village by the sea, there lived", "The three most important ideas in physics are",
              "Here is a short story about a robot who learns to paint:", "A recipe for a simple vegetable soup:",
              "The history of the printing press begins", "Ten things to do on a rainy afternoon:",
              "Dear diary, today something strange happened.", "An explanation of how vaccines work:"]


def complete(base, prompt, gen):
    body = {"prompt": prompt, "max_tokens": gen, "temperature": 0}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        out = json.loads(r.read())
    return out["choices"][0]["text"], out["usage"]["completion_tokens"]


def one_round(base, prompts, gen, clients):
    t0 = time.monotonic()
    with ThreadPoolExecutor(clients) as ex:
        res = list(ex.map(lambda p: complete(base, p, gen), prompts))
    return res, sum(n for _, n in res) / (time.monotonic() - t0)


def metric(base, pattern):
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        m = re.search(r"^" + re.escape(pattern) + r" (\S+)$", r.read().decode(), re.M)
    return float(m.group(1)) if m else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=str(ROOT / "build" / "deepinfer"))
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", default="2")
    a = ap.parse_args()
    grounded = [p for _, p in workloads((a.clients // 2 + 2) // 3)][: a.clients // 2]
    prompts = grounded + [OPEN_ENDED[i % len(OPEN_ENDED)] + f" ({i})" for i in range(a.clients - len(grounded))]
    common = ["--threads", a.threads, "--max-seqs", str(a.clients), "--ctx", "2048"]
    servers = {"off": start(a.bin, a.model, [*common, "--spec", "off"]),
               "ngram": start(a.bin, a.model, [*common, "--spec", "ngram"])}
    tps, outs = {k: [] for k in servers}, {}
    try:
        for _ in range(a.rounds):
            for name, (_, base) in servers.items():
                res, t = one_round(base, prompts, a.gen, a.clients)
                tps[name].append(t)
                outs.setdefault(name, [o for o, _ in res])
                print(f"{name:>6}: {t:7.1f} tok/s aggregate ({a.clients} concurrent)", flush=True)
        base = servers["ngram"][1]
        drafted = metric(base, 'deepinfer:spec_draft_tokens_total{drafter="ngram"}')
        accepted = metric(base, 'deepinfer:spec_accepted_tokens_total{drafter="ngram"}')
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait()
    off, on = statistics.mean(tps["off"]), statistics.mean(tps["ngram"])
    print(f"mean: off {off:.1f} tok/s, ngram {on:.1f} tok/s, ratio {on / off:.3f}; "
          f"ngram drafted {drafted:.0f} tokens, accepted {accepted:.0f} ({accepted / max(drafted, 1):.0%})")
    if outs["off"] != outs["ngram"]:
        bad = sum(x != y for x, y in zip(outs["off"], outs["ngram"]))
        sys.exit(f"{bad} of {len(prompts)} outputs differ between --spec off and ngram")
    print("outputs identical with and without speculation")


if __name__ == "__main__":
    main()
