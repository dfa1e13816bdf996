#!/usr/bin/env python3
"""Serving engine vs llama.cpp on the same machine, in the same run.

llama.cpp through llama-cpp-python (its server has no --parallel slots, so its
aggregate throughput at any concurrency is its single-stream throughput):
R requests one after another, P random prompt tokens, G greedy tokens each.
DeepInfer: `deepinfer bench --concurrency N` with the same P and G, N = 1 and 16.
Prints one JSON line per measurement plus a summary with the ratios.

  bench/engine_vs_llamacpp.py --model M.gguf [--bin build/deepinfer] [--threads 2]
"""
import argparse
import json
import os
import random
import resource
import subprocess
import time


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def llamacpp(model, threads, n_req, plen, glen, seed=1):
    # Its OpenMP threads busy-wait by default, which on a shared 2-core
    # machine costs it ~10x; passive waiting is its best setting here.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_threads=threads, n_threads_batch=threads, n_ctx=1024, verbose=False, seed=seed)
    rng = random.Random(seed)
    nv = llm.n_vocab()
    toks, ttft, tpot = 0, [], []
    t0, c0 = time.time(), cpu()
    for _ in range(n_req):
        llm.reset()
        prompt = [rng.randrange(256, nv) for _ in range(plen)]
        ts, n = time.time(), 0
        first = last = ts
        for _tok in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
            n += 1
            now = time.time()
            if n == 1:
                first = now
            last = now
            if n == glen:
                break
        toks += n
        ttft.append(first - ts)
        if n > 1:
            tpot.append((last - first) / (n - 1))
    wall, c = time.time() - t0, cpu() - c0
    return {"engine": "llama.cpp (llama-cpp-python)", "concurrency": 1, "requests": n_req, "output_tok_s": toks / wall,
            "tpot_p50": sorted(tpot)[len(tpot) // 2], "ttft_p50": sorted(ttft)[len(ttft) // 2],
            "output_tok_per_cpu_s": toks / c}


def deepinfer(binary, model, threads, conc, n_req, plen, glen):
    out = subprocess.run([binary, "bench", "-m", model, "-t", str(threads), "--json", "--concurrency", str(conc),
                          "--requests", str(n_req), "--prompt-len", str(plen), "--gen-len", str(glen)],
                         capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    d["engine"] = "deepinfer"
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", default="build/deepinfer")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--gen-len", type=int, default=48)
    a = ap.parse_args()
    rows = [llamacpp(a.model, a.threads, 2, a.prompt_len, a.gen_len),
            deepinfer(a.bin, a.model, a.threads, 1, 1, a.prompt_len, a.gen_len),
            deepinfer(a.bin, a.model, a.threads, 16, 16, a.prompt_len, a.gen_len)]
    for r in rows:
        print(json.dumps({k: r[k] for k in ("engine", "concurrency", "output_tok_s", "tpot_p50", "ttft_p50",
                                            "output_tok_per_cpu_s")}))
    l, d1, d16 = rows
    print(json.dumps({"deepinfer16_vs_llamacpp_wall": d16["output_tok_s"] / l["output_tok_s"],
                      "deepinfer16_vs_llamacpp_cpu": d16["output_tok_per_cpu_s"] / l["output_tok_per_cpu_s"],
                      "deepinfer1_vs_llamacpp_cpu": d1["output_tok_per_cpu_s"] / l["output_tok_per_cpu_s"]}))


if __name__ == "__main__":
    main()
