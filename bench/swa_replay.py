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

--llama-server PATH adds llama.cpp's server (built from llama-cpp-python's vendored llama.cpp)
on the same prompts: one slot with a context of one document plus question and answer, first
with its default cache settings (a host-memory prompt cache of 8 GiB, --cache-ram 8192: far more
memory than --kv-mem), then at equal memory: its slot's KV (as its log reports it) plus --cache-ram
adding up to --kv-mem, without and with --swa-full (skipped when the slot alone needs more). Its outputs are not compared (other numerics); its TTFT and cached tokens are."""
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
    return p, wait_ready(f"http://127.0.0.1:{port}")


def wait_ready(base):
    for _ in range(600):  # /health answers 200 once the model is loaded (both servers)
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return base
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{base} not ready")


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


def start_llama(binary, model, args):
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    p = subprocess.Popen([binary, "-m", model, "--port", str(port), "--host", "127.0.0.1", "-np", "1", *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p, wait_ready(f"http://127.0.0.1:{port}")


def ask_llama(base, ids, gen):
    body = {"prompt": ids, "n_predict": gen, "temperature": 0, "ignore_eos": True, "stream": True,
            "cache_prompt": True}
    req = urllib.request.Request(base + "/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft, text, cached = None, [], 0
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            ch = json.loads(line[6:])
            if ch.get("content") and ttft is None:
                ttft = time.monotonic() - t0
            text.append(ch.get("content", ""))
            if ch.get("timings"):
                cached = ch["timings"].get("cache_n", 0)
    return ttft, "".join(text), cached


def llama_kv_bytes(binary, model, ctx, extra):
    """Bytes llama-server allocates for one slot of context ctx (the sum of its log's KV cache size lines)."""
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    p = subprocess.Popen([binary, "-m", model, "--port", str(port), "--host", "127.0.0.1", "-np", "1",
                          "-c", str(ctx), "-v", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    total, deadline = 0.0, time.monotonic() + 300
    try:
        for line in p.stderr:
            m = re.search(r"llama_kv_cache: size =\s+([\d.]+) MiB", line)
            if m:
                total += float(m.group(1)) * 2**20
            if "listening" in line or "sched_reserve" in line or time.monotonic() > deadline:
                break
    finally:
        p.terminate()
        p.wait()
    return total


def report(name, work, ttfts, cached, replayed=None):
    """cached: per request, the prompt tokens served from cache (replayed ones included for ours)."""
    first = [t for (d, q, _), t in zip(work, ttfts) if q == 0]
    later = [t for (d, q, _), t in zip(work, ttfts) if q > 0]
    n_prompt = len(work[0][2])
    later_cached = [c for (d, q, _), c in zip(work, cached) if q > 0]
    reused = sum(1 for c in later_cached if c >= n_prompt / 2)
    tail = f", replayed {replayed} in all" if replayed is not None else ""
    print(f"{name:>24}: cold first questions TTFT {statistics.mean(first):.2f} s, later questions "
          f"{statistics.mean(later):.2f} s ({statistics.mean(later) / statistics.mean(first):.0%} of cold); "
          f"later questions took {statistics.mean(later_cached) / n_prompt:.0%} of their prompt from cache, "
          f"{reused} of {len(later)} at least half{tail}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=str(ROOT / "build" / "deepinfer"))
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--doc-tokens", type=int, default=4096)
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--gen", type=int, default=8)
    ap.add_argument("--kv-mem", default="160M")
    ap.add_argument("--checkpoint", default="1024", help="C, or several separated by commas (one server each)")
    ap.add_argument("--skip-no-replay", action="store_true", help="leave out the --no-replay server")
    ap.add_argument("--skip-ours", action="store_true", help="run only llama.cpp (with --llama-server)")
    ap.add_argument("--skip-llama-default", action="store_true",
                    help="leave out llama.cpp with its default 8 GiB host cache (run only at equal memory)")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--llama-server", help="llama-server binary to compare (see above)")
    a = ap.parse_args()
    rng = random.Random(36)
    docs = [[rng.randrange(100, 200000) for _ in range(a.doc_tokens)] for _ in range(a.docs)]
    work = [(d, q, docs[d] + [rng.randrange(100, 200000) for _ in range(20)])
            for q in range(a.questions) for d in range(a.docs)]
    configs = {} if a.skip_ours else {f"replay C={c}": ["--swa-checkpoint", c] for c in a.checkpoint.split(",")}
    if not a.skip_no_replay and not a.skip_ours:
        configs["--no-replay"] = ["--no-replay"]
    outs = {}
    for name, extra in configs.items():
        p, base = start(a.bin, a.model, ["--threads", a.threads, "--kv-mem", a.kv_mem, *extra])
        try:
            res = [ask(base, prompt, a.gen) for _, _, prompt in work]
        finally:
            p.terminate()
            p.wait()
        outs[name] = [r[1] for r in res]
        cached = [r[2]["prompt_tokens_details"]["cached_tokens"] for r in res]
        reps = [r[2]["prompt_tokens_details"].get("replayed_tokens", 0) for r in res]
        replayed = sum(reps)
        print(f"{name:>24}: per request (document, question: cached + replayed of the prompt, TTFT): " +
              ", ".join(f"d{d} q{q}: {c} + {rp} of {len(pr)}, {r[0]:.2f} s"
                        for (d, q, pr), c, rp, r in zip(work, cached, reps, res)), flush=True)
        report(name, work, [r[0] for r in res], cached, replayed)
    vals = list(outs.values())
    if vals and any(v != vals[0] for v in vals):
        raise SystemExit("outputs differ between configurations")
    if len(vals) > 1:
        print("outputs identical across configurations", flush=True)
    if a.llama_server:
        mib = int(a.kv_mem.rstrip("MmKkGg")) * {"M": 1, "K": 1 / 1024, "G": 1024}.get(a.kv_mem[-1].upper(), 1 / 2**20)
        ctx = a.doc_tokens + 20 + a.gen + 16
        configs = {} if a.skip_llama_default else {"llama.cpp default cache (8 GiB)": []}
        for label, extra in {"": [], " --swa-full": ["--swa-full"]}.items():
            # Equal memory: the slot's own KV plus its host prompt cache add up to our --kv-mem.
            rest = int(mib - llama_kv_bytes(a.llama_server, a.model, ctx, extra) / 2**20)
            if rest < 1:
                print(f"llama.cpp{label}: one slot's KV alone exceeds {a.kv_mem}; not run at equal memory")
                continue
            configs[f"llama.cpp{label} {int(mib)} MiB in all"] = [*extra, "--cache-ram", str(rest)]
        for name, extra in configs.items():
            p, base = start_llama(a.llama_server, a.model, ["-c", str(ctx), "-t", a.threads, *extra])
            try:
                res = [ask_llama(base, ids, a.gen) for _, _, ids in work]
            finally:
                p.terminate()
                p.wait()
            report(name, work, [r[0] for r in res], [r[2] for r in res])


if __name__ == "__main__":
    main()
