#!/usr/bin/env python3
"""Single-thread encode throughput: DeepInfer's C tokenizer vs PyPI `tokenizers`
(Rust) and `tiktoken` (where the tokenizer is tiktoken-shaped), on the same
~20 MB of mixed English / Chinese / code text built from the tokenizer corpus
(generated into ~/.cache/deepinfer/bench, never committed). Prints MB/s and
ratios; all three must produce identical ids.

usage: .venv/bin/python bench/bench_tokenizer.py [--mb 20] [--quick] [--bin build/deepinfer]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # HF tokenizers: one thread
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from tok_common import TOKDATA, tokenizer_dir  # noqa: E402

CACHE = Path.home() / ".cache" / "deepinfer" / "bench"

CODE = '''def merge(a, b):
    """Merge two sorted lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i]); i += 1
        else:
            out.append(b[j]); j += 1
    return out + a[i:] + b[j:]

static int cmp(const void *x, const void *y) { return *(const int *)x - *(const int *)y; }
for (size_t k = 0; k < n; k++) { sum += v[k] * 0x9E3779B9u; }
'''


def make_text(mb):
    """Mixed text: corpus lines by script, plus code, shuffled deterministically."""
    path = CACHE / f"mixed_{mb}mb.txt"
    if path.exists():
        return path.read_text(encoding="utf-8")
    lines = [json.loads(l) for l in open(TOKDATA / "corpus.jsonl", encoding="utf-8")]
    lines = [l for l in lines if l and len(set(l)) > 3]  # drop the pathological repeats
    cjk = [l for l in lines if any("\u4e00" <= c <= "\u9fff" for c in l)]
    eng = [l for l in lines if sum(c.isascii() and c.isalpha() for c in l) > 0.6 * len(l)]
    rng = random.Random(1234)
    parts, size = [], 0
    while size < mb * 1_000_000:
        r = rng.random()
        src = eng if r < 0.45 else cjk if r < 0.7 else [CODE] if r < 0.85 else lines
        s = rng.choice(src)
        parts.append(s)
        size += len(s.encode())
    text = "\n".join(parts)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return text


def bench_ours(binary, tokdir, docs):
    data = "".join(json.dumps(d) + "\n" for d in docs).encode()
    p = subprocess.run([binary, "tokenize", "--tokenizer", str(tokdir), "--parse-special", "--stats", "--jsonl"],
                       input=data, capture_output=True)
    if p.returncode != 0:
        raise SystemExit(p.stderr.decode())
    stats = dict(kv.split("=") for kv in p.stderr.decode().split())
    return float(stats["encode_s"]), [json.loads(l) for l in p.stdout.decode().splitlines()]


def bench_hf(tokdir, docs, reps):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tokdir / "tokenizer.json"))
    best, ids = 1e9, None
    for _ in range(reps):
        t0 = time.perf_counter()
        ids = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
        best = min(best, time.perf_counter() - t0)
    return best, ids


def bench_tiktoken(tokdir, docs, reps):
    """llama3 is tiktoken's own format: ranks = ids of the byte-level vocab."""
    try:
        import tiktoken
    except ImportError:
        return None, None
    j = json.load(open(tokdir / "tokenizer.json", encoding="utf-8"))
    if not j["model"].get("ignore_merges"):
        return None, None
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    unmap = {chr(c): b for b, c in zip(bs, cs)}
    ranks = {bytes(unmap[c] for c in tok): i for tok, i in j["model"]["vocab"].items()}
    pat = j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    specials = {a["content"]: a["id"] for a in j["added_tokens"]}
    enc = tiktoken.Encoding("bench", pat_str=pat, mergeable_ranks=ranks, special_tokens=specials)
    best, ids = 1e9, None
    for _ in range(reps):
        t0 = time.perf_counter()
        ids = [enc.encode(d, allowed_special="all") for d in docs]
        best = min(best, time.perf_counter() - t0)
    return best, ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=20)
    ap.add_argument("--quick", action="store_true", help="2 MB, one repetition (CI)")
    ap.add_argument("--bin", default=str(Path(__file__).resolve().parents[1] / "build" / "deepinfer"))
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    if a.quick:
        a.mb, a.reps = 2, 1
    text = make_text(a.mb if a.mb != int(a.mb) else int(a.mb))
    # documents of ~16 KB: how a server sees text; one 20 MB string is a
    # pathological case for HF tokenizers (0.1 MB/s) and not what we compare
    docs, cur, size = [], [], 0
    for line in text.split("\n"):
        cur.append(line)
        size += len(line) + 1
        if size > 16384:
            docs.append("\n".join(cur))
            cur, size = [], 0
    if cur:
        docs.append("\n".join(cur))
    mb = sum(len(d.encode()) for d in docs) / 1e6
    print(f"text: {mb:.1f} MB mixed English/Chinese/code in {len(docs)} documents, single thread, best of {a.reps}")
    print(f"{'tokenizer':<12} {'ours MB/s':>10} {'HF MB/s':>9} {'tiktoken':>9} {'ours/HF':>8} {'ours/tiktoken':>14}  ids")
    for name in ["deepseek-v3", "llama3"]:
        d = tokenizer_dir(name)
        ours = min((bench_ours(a.bin, d, docs) for _ in range(a.reps)), key=lambda r: r[0])
        hf = bench_hf(d, docs, a.reps)
        tk = bench_tiktoken(d, docs, a.reps)
        same = ours[1] == hf[1] and (tk[1] is None or tk[1] == hf[1])
        tks = f"{mb / tk[0]:9.2f}" if tk[0] else f"{'-':>9}"
        tkr = f"{hf[0] and tk[0] / ours[0]:14.2f}" if tk[0] else f"{'-':>14}"
        print(f"{name:<12} {mb / ours[0]:10.2f} {mb / hf[0]:9.2f} {tks} {hf[0] / ours[0]:8.2f} {tkr}  "
              f"{'identical' if same else 'DIFFER'} ({sum(map(len, hf[1]))} tokens, {len(docs)} docs)")


if __name__ == "__main__":
    main()
