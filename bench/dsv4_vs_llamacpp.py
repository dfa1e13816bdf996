#!/usr/bin/env python3
"""DeepSeek-V4: DeepInfer and llama.cpp side by side on the same GGUF (llama.cpp's layout,
bench/gen_random_gguf_dsv4.py writes a V4-Flash-like one), same prompt ids, same thread count.

For each depth D: one process per engine loads the model, prefills D random token ids from an
empty cache (prefill tok/s = D / time) and then decodes G tokens greedily at depth D (decode tok/s
= (G - 1) / time after the first generated token, as `deepinfer run --stats` counts). KV bytes
per token = the KV memory each engine allocated for the context, divided by the context length
(llama.cpp: every cache and compressor state it logs; DeepInfer: `--stats` kv_bytes, the grouped
pool), so window buffers count as they do at that length. llama.cpp runs with swa_full = false
(the window ring its DSV4 cache is built for), F16 caches (its default), flash attention default.

llama.cpp runs through llama-cpp-python in another interpreter: --llamacpp-python PATH or
$LLAMACPP_PYTHON. The engines run one after the other, never at once; on a shared machine the
wall-clock figures are noisy (the load average before each run is printed with it).

  bench/dsv4_vs_llamacpp.py --depths 512,8192 --gen 16           # generates dsv4-flash-mini.gguf if missing
  bench/dsv4_vs_llamacpp.py -m FILE.gguf --depths 512 --skip-llamacpp
  bench/dsv4_vs_llamacpp.py --depths 8192,65536 --kv-only   # each engine's KV allocation for that
      context (D + gen + 16 positions) without running it: one token of prompt, one generated
  bench/dsv4_vs_llamacpp.py -m ~/.cache/deepinfer/bench/dsv4-tiny-f32.gguf --depths 300 --gen 8 --logits
      (--logits: both engines also dump every prompt position's logits; max / median |difference|
      and the argmax agreement are printed)
"""
import argparse
import atexit
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BENCH_DIR = Path(os.environ.get("DI_BENCH_DIR") or (Path.home() / ".cache" / "deepinfer" / "bench"))


def prompt_ids(n, vocab, seed=42):
    r = random.Random(seed)
    return [r.randrange(2, vocab) for _ in range(n)]


def llamacpp_worker(a):
    import numpy as np
    import llama_cpp as L

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.use_mmap = False
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        raise SystemExit(f"llama.cpp could not load {a.model}")
    nv = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    ids = prompt_ids(a.depth, nv)
    cp = L.llama_context_default_params()
    cp.n_ctx = a.depth + a.gen + 16
    cp.n_batch = cp.n_ubatch = 512
    cp.n_threads = cp.n_threads_batch = a.threads
    cp.swa_full = False
    cp.no_perf = True
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise SystemExit("llama_init_from_model failed")
    if a.kv_only:  # the caches are allocated (and logged) at creation
        print(json.dumps({"prefill_tok_s": 0.0, "decode_tok_s": 0.0, "gen": [], "n_ctx": cp.n_ctx}))
        return
    b = L.llama_batch_init(512, 0, 1)

    def decode(toks, pos0, want_logits):
        for s in range(0, len(toks), 512):
            ch = toks[s:s + 512]
            b.n_tokens = len(ch)
            for i, t in enumerate(ch):
                b.token[i], b.pos[i], b.n_seq_id[i] = t, pos0 + s + i, 1
                b.seq_id[i][0] = 0
                b.logits[i] = 1 if (want_logits and (a.logits_out or s + i == len(toks) - 1)) else 0
            if L.llama_decode(ctx, b) != 0:
                raise SystemExit("llama_decode failed")
            if a.logits_out and want_logits and len(toks) > 1:
                rows.append(np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(len(ch) * nv,)).copy())
        L.llama_synchronize(ctx)

    def argmax_last():
        return int(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(nv,)).argmax())

    rows = []
    t0 = time.perf_counter()
    decode(ids, 0, True)
    t1 = time.perf_counter()
    gen = [argmax_last()]
    t2 = time.perf_counter()
    for i in range(a.gen - 1):
        decode([gen[-1]], a.depth + i, True)
        gen.append(argmax_last())
    t3 = time.perf_counter()
    if a.logits_out:
        np.concatenate(rows).astype(np.float32).tofile(a.logits_out)
    print(json.dumps({"prefill_tok_s": a.depth / (t1 - t0), "decode_tok_s": (a.gen - 1) / (t3 - t2), "gen": gen,
                      "n_ctx": cp.n_ctx, "version": L.__version__}))


def run_llamacpp(a, depth):
    cmd = [a.llamacpp_python, __file__, "--_worker", "-m", str(a.model), "--depth", str(depth),
           "--gen", str(a.gen), "--threads", str(a.threads)] + (["--kv-only"] if a.kv_only else [])
    if a.logits:
        cmd += ["--logits-out", str(a.logits_dir / f"llamacpp-{depth}.f32")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if p.returncode != 0:
        raise SystemExit(f"llama.cpp worker failed:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    # every KV cache and compressor state llama.cpp allocates for this context
    mib = [float(x) for x in re.findall(r"CPU (?:KV|DSV4 \w+ state) buffer size =\s*([\d.]+) MiB", p.stderr)]
    r["kv_bytes"] = sum(mib) * 1024 * 1024
    r["kv_caches"] = re.findall(r"creating ([^,\n]+cache)", p.stderr)
    return r


def run_deepinfer(a, depth):
    vocab = int(re.search(r"vocab:\s+(\d+)", subprocess.run([a.deepinfer, "info", "-m", str(a.model)],
                                                             capture_output=True, text=True).stdout).group(1))
    n_ctx = depth + a.gen + 16
    ids = prompt_ids(1 if a.kv_only else depth, vocab)  # kv_only: the pool is sized for -c n_ctx all the same
    ids_file = a.logits_dir / f"ids-{depth}.txt"  # a 64K-id list is longer than one argument may be
    ids_file.write_text(",".join(map(str, ids)))
    cmd = [a.deepinfer, "run", "-m", str(a.model), "--ids", f"@{ids_file}", "-n", str(1 if a.kv_only else a.gen), "--temp", "0",
           "--ignore-eos", "--print-ids", "--stats", "-t", str(a.threads), "-c", str(n_ctx)]
    if a.logits:
        cmd += ["--dump-logits", str(a.logits_dir / f"deepinfer-{depth}.f32")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if p.returncode != 0:
        raise SystemExit(f"deepinfer failed:\n{p.stderr[-3000:]}")
    st = json.loads([ln for ln in p.stderr.splitlines() if ln.startswith("{")][-1])
    if a.kv_only:
        return {"prefill_tok_s": 0.0, "decode_tok_s": 0.0, "gen": [], "kv_bytes": st["tp"]["kv_bytes"][0], "n_ctx": n_ctx}
    return {"prefill_tok_s": depth / st["prefill_s"], "decode_tok_s": st["decode_tok_s"],
            "gen": json.loads(p.stdout.strip().splitlines()[-1]), "kv_bytes": st["tp"]["kv_bytes"][0], "n_ctx": n_ctx}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", help="GGUF (default: ~/.cache/deepinfer/bench/dsv4-flash-mini.gguf, generated)")
    ap.add_argument("--depths", default="512,8192")
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--deepinfer", default=os.environ.get("DEEPINFER", str(REPO / "build" / "deepinfer")))
    ap.add_argument("--llamacpp-python", default=os.environ.get("LLAMACPP_PYTHON", "/tmp/refvenv/bin/python"))
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--skip-deepinfer", action="store_true")
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--json-out")
    ap.add_argument("--logits", action="store_true", help="compare every prompt position's logits")
    ap.add_argument("--kv-only", action="store_true", help="only each engine's KV allocation for the context")
    ap.add_argument("--logits-out", help=argparse.SUPPRESS)
    ap.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--depth", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._worker:
        llamacpp_worker(a)
        return
    if not a.model:
        a.model = BENCH_DIR / "dsv4-flash-mini.gguf"
        if not a.model.exists():
            subprocess.run([sys.executable, str(HERE / "gen_random_gguf_dsv4.py"), "--out", str(a.model)], check=True)
    a.logits_dir = Path(tempfile.mkdtemp(prefix="dsv4_logits_"))
    atexit.register(shutil.rmtree, a.logits_dir, True)  # logits at 64K depth are GBs
    rows = []
    for depth in [int(x) for x in a.depths.split(",")]:
        row = {"depth": depth}
        for eng, fn, skip in (("deepinfer", run_deepinfer, a.skip_deepinfer), ("llamacpp", run_llamacpp, a.skip_llamacpp)):
            if skip:
                continue
            load = os.getloadavg()[0]
            r = fn(a, depth)
            r["load_before"] = load
            row[eng] = r
            print(f"[dsv4] depth {depth} {eng}: prefill {r['prefill_tok_s']:.1f} tok/s, decode {r['decode_tok_s']:.2f} "
                  f"tok/s, KV {r['kv_bytes'] / r['n_ctx']:.0f} B/token of context (load {load:.1f})", file=sys.stderr,
                  flush=True)
        if "deepinfer" in row and "llamacpp" in row and not a.kv_only:
            g1, g2 = row["deepinfer"]["gen"], row["llamacpp"]["gen"]
            row["greedy_agree"] = next((i for i, (x, y) in enumerate(zip(g1, g2)) if x != y), len(g1))
            if a.logits:
                import numpy as np
                x = np.fromfile(a.logits_dir / f"llamacpp-{depth}.f32", np.float32)
                nv = x.size // depth
                x = x.reshape(depth, nv)
                y = np.fromfile(a.logits_dir / f"deepinfer-{depth}.f32", np.float32).reshape(-1, nv)[:depth]
                d = np.abs(x - y).max(1)
                row["logits"] = {"max_abs": float(d.max()), "median_pos_max_abs": float(np.median(d)),
                                 "max_logit": float(np.abs(y).max()), "argmax_agree": float((x.argmax(1) == y.argmax(1)).mean())}
                print(f"[dsv4] depth {depth} logits: {row['logits']}", file=sys.stderr, flush=True)
        rows.append(row)
    print(f"| depth | engine | prefill tok/s | decode tok/s | KV B/token | load |\n|---|---|---|---|---|---|")
    for row in rows:
        for eng in ("deepinfer", "llamacpp"):
            if eng in row:
                r = row[eng]
                print(f"| {row['depth']} | {eng} | {r['prefill_tok_s']:.1f} | {r['decode_tok_s']:.2f} | "
                      f"{r['kv_bytes'] / r['n_ctx']:.0f} | {r['load_before']:.1f} |")
        if "greedy_agree" in row:
            print(f"| {row['depth']} | greedy: first {row['greedy_agree']} of {a.gen} tokens agree | | | | |")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
