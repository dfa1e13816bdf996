#!/usr/bin/env python3
"""Shared-document workload through the HTTP server (issue 36): D documents of
N tokens, Q questions each, interleaved across documents (q0 of every
document, then q1 of every document, ...), one request at a time, streamed.
Reports the mean TTFT of the non-first questions and of the first (cold)
ones, and the cached/replayed prompt tokens, for each server configuration
given (default: bounded replay with --swa-checkpoint C, and --no-replay),
all with the same --kv-mem. Outputs of every configuration must be equal
(greedy); the script fails otherwise.

  bench/swa_replay.py -m ~/.cache/deepinfer/models/gemma-3-270m-q4_k_m.gguf \\
      --docs 3 --doc-tokens 4096 --questions 3 --kv-mem 160M

llama.cpp's llama-server is not compared: it is not available on this host."""
import argparse
import json
import random
import re
import statistics
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start(binary, model, args):
    p = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    port = None
    for line in p.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        raise SystemExit("server did not start")
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):  # /health answers 200 once the engine runs
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return p, base
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("server not ready")


def ask(base, prompt, gen):
    body = {"prompt": prompt, "max_tokens": gen, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft, text, usage = None, [], None
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            ch = json.loads(line[6:])
            for c in ch.get("choices", []):
                if c.get("text") and ttft is None:
                    ttft = time.monotonic() - t0
                text.append(c.get("text", ""))
            usage = ch.get("usage") or usage
    return ttft, "".join(text), usage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=str(ROOT / "build" / "deepinfer"))
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--doc-tokens", type=int, default=4096)
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--gen", type=int, default=8)
    ap.add_argument("--kv-mem", default="160M")
    ap.add_argument("--checkpoint", default="1024")
    ap.add_argument("--threads", default="2")
    a = ap.parse_args()
    rng = random.Random(36)
    docs = [[rng.randrange(100, 200000) for _ in range(a.doc_tokens)] for _ in range(a.docs)]
    work = [(d, q, docs[d] + [rng.randrange(100, 200000) for _ in range(20)])
            for q in range(a.questions) for d in range(a.docs)]
    configs = {f"replay C={a.checkpoint}": ["--swa-checkpoint", a.checkpoint], "--no-replay": ["--no-replay"]}
    outs = {}
    for name, extra in configs.items():
        p, base = start(a.bin, a.model, ["--threads", a.threads, "--kv-mem", a.kv_mem, *extra])
        try:
            res = [ask(base, prompt, a.gen) for _, _, prompt in work]
        finally:
            p.terminate()
            p.wait()
        outs[name] = [r[1] for r in res]
        first = [r[0] for (d, q, _), r in zip(work, res) if q == 0]
        later = [r[0] for (d, q, _), r in zip(work, res) if q > 0]
        cached = sum(r[2]["prompt_tokens_details"]["cached_tokens"] for (d, q, _), r in zip(work, res) if q > 0)
        replayed = sum(r[2]["prompt_tokens_details"].get("replayed_tokens", 0) for r in res)
        print(f"{name:>16}: cold first questions TTFT {statistics.mean(first):.2f} s, later questions "
              f"{statistics.mean(later):.2f} s ({statistics.mean(later) / statistics.mean(first):.0%} of cold); "
              f"later questions cached {cached} tokens, replayed {replayed} in all")
    vals = list(outs.values())
    if any(v != vals[0] for v in vals):
        raise SystemExit("outputs differ between configurations")
    print("outputs identical across configurations")


if __name__ == "__main__":
    main()
