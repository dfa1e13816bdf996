#!/usr/bin/env python3
"""Streaming load against `deepinfer serve`: C concurrent clients, each
sending R streamed chat requests one after another. Checks every stream is
complete and well-formed (role chunk first, JSON chunks, one finish_reason,
usage chunk, [DONE]) and prints p50/p99 time-to-first-token and throughput.

  bench/serve_load.py --url http://127.0.0.1:8080 [--clients 64] [--requests 4] [--max-tokens 16]
  bench/serve_load.py --model M.gguf ...      # starts its own server on a free port

Standard library only; exits 1 if any request failed."""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor


def one_stream(host, port, key, model, max_tokens, i):
    body = json.dumps({"model": model, "max_tokens": max_tokens, "temperature": 0.7, "seed": i,
                       "stream": True, "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": f"Tell me a fact about the number {i}."}]})
    hdrs = {"Content-Type": "application/json"}
    if key:
        hdrs["Authorization"] = f"Bearer {key}"
    t0 = time.monotonic()
    c = http.client.HTTPConnection(host, port, timeout=600)
    c.request("POST", "/v1/chat/completions", body, hdrs)
    r = c.getresponse()
    if r.status != 200:
        return {"error": f"HTTP {r.status}: {r.read()[:200]!r}"}
    ttft, chunks, done, finishes, usage, role = None, 0, False, 0, None, None
    for raw in r:
        line = raw.decode().rstrip("\r\n")
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            break
        j = json.loads(line[6:])
        chunks += 1
        if j.get("usage"):
            usage = j["usage"]
        for ch in j.get("choices", []):
            d = ch.get("delta", {})
            if role is None:
                role = d.get("role")
            if d.get("content") and ttft is None:
                ttft = time.monotonic() - t0
            if ch.get("finish_reason"):
                finishes += 1
    c.close()
    if not (done and role == "assistant" and finishes == 1 and usage):
        return {"error": f"malformed stream: done={done} role={role} finishes={finishes} usage={usage}"}
    return {"ttft": ttft if ttft is not None else time.monotonic() - t0,
            "tokens": usage["completion_tokens"], "time": time.monotonic() - t0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--model")
    ap.add_argument("--bin", default="build/deepinfer")
    ap.add_argument("--key", default="")
    ap.add_argument("--name", default=None, help="model name to send (default: the server's first)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--max-seqs", type=int, default=64)
    a = ap.parse_args()
    proc = None
    if not a.url:
        if not a.model:
            ap.error("--url or --model is required")
        proc = subprocess.Popen([a.bin, "serve", "-m", a.model, "--port", "0", "--quiet", "--ctx", "1024",
                                 "--max-seqs", str(a.max_seqs), "--max-queue", "1024"],
                                stderr=subprocess.PIPE, text=True)
        for line in proc.stderr:
            if "listening on" in line:
                a.url = line.split("listening on ")[1].split()[0]
            if "ready" in line:
                break
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port
    if not a.name:
        c = http.client.HTTPConnection(host, port, timeout=30)
        c.request("GET", "/v1/models", headers={"Authorization": f"Bearer {a.key}"} if a.key else {})
        a.name = json.loads(c.getresponse().read())["data"][0]["id"]
    t0 = time.monotonic()
    results = []
    lock = threading.Lock()

    def client(ci):
        for k in range(a.requests):
            try:
                r = one_stream(host, port, a.key, a.name, a.max_tokens, ci * a.requests + k)
            except Exception as e:  # a broken connection is a failed request, not a crash
                r = {"error": repr(e)}
            with lock:
                results.append(r)

    with ThreadPoolExecutor(a.clients) as ex:
        list(ex.map(client, range(a.clients)))
    wall = time.monotonic() - t0
    if proc:
        proc.terminate()
        proc.wait(timeout=30)
    errors = [r["error"] for r in results if "error" in r]
    ok = [r for r in results if "error" not in r]
    ttfts = sorted(r["ttft"] for r in ok)
    tokens = sum(r["tokens"] for r in ok)
    report = {
        "clients": a.clients, "requests": len(results), "errors": len(errors), "max_tokens": a.max_tokens,
        "wall_s": round(wall, 2), "completion_tokens": tokens, "tokens_per_s": round(tokens / wall, 2),
        "ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
        "ttft_p99_s": round(ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))], 3) if ttfts else None,
    }
    print(json.dumps(report))
    for e in errors[:5]:
        print("error:", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
