#!/usr/bin/env python3
"""KV bytes one sequence holds at 1K..32K tokens of context (issue 36): DeepInfer
with bounded replay at several checkpoint intervals C, with --no-replay (no
checkpoints: the window plus the chunk being computed) and with --swa-full,
beside llama.cpp's server with and without --swa-full.

Ours is measured: one server per configuration with a roomy --kv-mem, one
document whose prefixes of N tokens are sent in increasing N (each request
reuses the previous prefix, so the whole sweep costs one prefill of the
longest); at the second streamed token the script reads
deepinfer:kv_cache_blocks_used{group} (the blocks the running sequence holds:
full-attention layers, and sliding-window layers = window plus checkpoints)
times deepinfer:kv_cache_block_bytes. llama.cpp's is what its server
allocates for one slot of context N (its log's `llama_kv_cache: size =`
lines; no inference needed); by default it also keeps up to 32 context
checkpoints of its SWA cache per slot in host memory, which the table leaves
out.

  bench/swa_kv_sweep.py -m ~/.cache/deepinfer/models/gemma-3-270m-q4_k_m.gguf \\
      --llama-server /work/lcp-build/bin/llama-server"""
import argparse
import json
import random
import re
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from swa_replay import ROOT, llama_kv_bytes, start  # noqa: E402  (shared with the replay bench)

MIB = 2**20


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    if not m:
        raise SystemExit(f"{name} missing from /metrics")
    return float(m.group(1))


def held_at_first_token(base, prompt):
    """Streams one completion; at its second token returns the bytes the sequence holds by group (the
    engine publishes its gauges after each step, so at the first token they may still show the step
    before the prompt's last chunk)."""
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    held, seen = None, 0
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            seen += line.startswith("data: {")
            if held is None and seen == 2:
                bb = metric(base, "deepinfer:kv_cache_block_bytes")
                held = {g: metric(base, f'deepinfer:kv_cache_blocks_used{{group="{g}"}}') * bb
                        for g in ("full", "window")}
    return held


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=str(ROOT / "build" / "deepinfer"))
    ap.add_argument("--contexts", default="1024,2048,4096,8192,16384,32000",
                    help="prompt lengths in tokens (the model's context must hold each plus 2)")
    ap.add_argument("--checkpoints", default="1024,2048,4096,8192", help="values of --swa-checkpoint to measure ('' for none)")
    ap.add_argument("--kv-mem", default="1200M")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--llama-server", help="llama-server binary to compare")
    a = ap.parse_args()
    ns = [int(x) for x in a.contexts.split(",")]
    rng = random.Random(36)
    doc = [rng.randrange(100, 200000) for _ in range(max(ns))]
    configs = {f"ours C={c}": ["--swa-checkpoint", c] for c in a.checkpoints.split(",") if c}
    configs["ours --no-replay"] = ["--no-replay"]  # window + chunk only: what checkpoints add on top
    configs["ours --swa-full"] = ["--swa-full"]
    rows = {}
    for name, extra in configs.items():
        p, base = start(a.bin, a.model, ["--threads", a.threads, "--kv-mem", a.kv_mem, "--ctx", str(max(ns) + 16),
                                         *extra])
        try:
            for n in ns:
                h = held_at_first_token(base, doc[:n])
                rows.setdefault(n, {})[name] = h["full"] + h["window"]
                print(f"{name:>20} {n:>6} tokens: full {h['full'] / MIB:7.1f} MiB + window {h['window'] / MIB:7.1f} MiB",
                      flush=True)
        finally:
            p.terminate()
            p.wait()
    if a.llama_server:
        for n in ns:
            for name, extra in {"llama.cpp": [], "llama.cpp --swa-full": ["--swa-full"]}.items():
                rows[n][name] = llama_kv_bytes(a.llama_server, a.model, n + 16, extra)
    cols = list(rows[ns[0]])
    print("\n| context | " + " | ".join(cols) + " |")
    print("|---:|" + "---:|" * len(cols))
    for n in ns:
        print(f"| {n} | " + " | ".join(f"{rows[n][c] / MIB:.1f} MiB" for c in cols) + " |")


if __name__ == "__main__":
    main()
