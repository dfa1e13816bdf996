#!/usr/bin/env python3
"""`deepinfer serve` vs llama.cpp's own `llama-server`, same GGUF, same workload, same run.

Each server is started in turn on a free port, waited for (/health), and driven by the same
closed loop: R requests, C in flight at a time, each a prompt of P random token ids (a fixed
seed, different ids per request, so no prefix-cache help) sent as an id array to
/v1/completions, G greedy tokens with EOS ignored, streamed. Per request: TTFT (send -> first
token) and the mean inter-token latency ((last - first) / (tokens - 1)); the run's aggregate
output tokens/s is all completion tokens / wall time. Every request must return exactly G
tokens (from `usage`), or the run fails. Then the server is stopped.

llama-server is not built here: pass the binary (built outside the repository from the
llama.cpp sources of your choice). Its flags follow llama.cpp's serving defaults for this
comparison: `--parallel C -c <C x (P + G) rounded up> -t T --no-webui` (plus --extra-llama).

  bench/serve_vs_llamacpp.py --model M.gguf --llama-server /path/llama-server [--threads 2]
      [--requests 32 --concurrency 8 --prompt-len 128 --gen-len 128] [--json]
"""
import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server not ready in time")


def one_request(port, model, prompt, gen):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": gen, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    first = last = None
    usage = None
    for raw in r:
        line = raw.decode().rstrip("\r\n")
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage"):
            usage = j["usage"]
        if any(ch.get("text") for ch in j.get("choices", [])):
            now = time.monotonic()
            first = first or now
            last = now
    c.close()
    n = usage["completion_tokens"] if usage else None
    if n != gen:
        raise RuntimeError(f"expected {gen} completion tokens, usage says {n}")
    return {"ttft": first - t0, "itl": (last - first) / (n - 1) if n > 1 else 0.0, "tokens": n}


def drive(port, model, prompts, gen, conc):
    t0 = time.monotonic()
    with ThreadPoolExecutor(conc) as ex:
        res = list(ex.map(lambda p: one_request(port, model, p, gen), prompts))
    wall = time.monotonic() - t0
    ttft = sorted(r["ttft"] for r in res)
    return {"wall_s": wall, "output_tok_s": sum(r["tokens"] for r in res) / wall,
            "ttft_mean_s": statistics.mean(ttft), "ttft_p99_s": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
            "itl_mean_ms": 1000 * statistics.mean(r["itl"] for r in res)}


def run_server(name, cmd, port, model_name, prompts, a, env=None):
    print(f"[{name}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_ready(port, proc, a.start_timeout)
        one_request(port, model_name, prompts[0][:8], 2)  # warm-up
        r = drive(port, model_name, prompts, a.gen_len, a.concurrency)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    r["server"] = name
    print(f"[{name}] {r['output_tok_s']:.1f} tok/s", file=sys.stderr, flush=True)
    return r


def loadavg():
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--llama-server", required=True, help="path of llama.cpp's llama-server binary")
    ap.add_argument("--bin", default="build/deepinfer", help="deepinfer binary (default build/deepinfer)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--extra-llama", default="", help="extra llama-server flags (one string)")
    ap.add_argument("--extra-deepinfer", default="", help="extra deepinfer serve flags (one string)")
    ap.add_argument("--start-timeout", type=float, default=300)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    a = ap.parse_args()

    rng = random.Random(a.seed)
    # ids from 256 up: clear of the special and byte tokens of the usual vocabularies
    prompts = [[rng.randrange(256, 32000) for _ in range(a.prompt_len)] for _ in range(a.requests)]
    per_seq = a.prompt_len + a.gen_len + 8
    ctx = (a.concurrency * per_seq + 255) // 256 * 256
    load0 = loadavg()

    port = free_port()
    di = run_server("deepinfer", [a.bin, "serve", "-m", a.model, "--port", str(port), "--threads", str(a.threads),
                                  "--max-seqs", str(a.concurrency), "--ctx", str(per_seq), "--quiet",
                                  "--served-model-name", "deepinfer-bench",
                                  *a.extra_deepinfer.split()], port, "deepinfer-bench", prompts, a)
    port = free_port()
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    ll = run_server("llama-server", [a.llama_server, "-m", a.model, "--port", str(port), "--host", "127.0.0.1",
                                     "--parallel", str(a.concurrency), "-c", str(ctx), "-t", str(a.threads),
                                     "--no-webui", *a.extra_llama.split()], port, "llama", prompts, a, env=env)
    out = {"model": a.model, "threads": a.threads, "requests": a.requests, "concurrency": a.concurrency,
           "prompt_len": a.prompt_len, "gen_len": a.gen_len, "llama_ctx": ctx, "load_before": load0,
           "load_after": loadavg(), "deepinfer": di, "llama_server": ll,
           "throughput_ratio": di["output_tok_s"] / ll["output_tok_s"]}
    if a.json:
        print(json.dumps(out))
        return
    name = os.path.basename(a.model)
    print(f"| model | server | output tok/s | mean TTFT | p99 TTFT | mean ITL |")
    print(f"|---|---|---|---|---|---|")
    for r in (ll, di):
        print(f"| {name} | {r['server']} | {r['output_tok_s']:.1f} | {r['ttft_mean_s']:.2f} s | "
              f"{r['ttft_p99_s']:.2f} s | {r['itl_mean_ms']:.0f} ms |")
    print(f"\nDeepInfer / llama-server aggregate throughput: {out['throughput_ratio']:.2f}x "
          f"(load average {load0} before, {out['load_after']} after)")


if __name__ == "__main__":
    main()
