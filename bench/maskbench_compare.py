#!/usr/bin/env python3
"""MaskBench side by side: DeepInfer's `grammar-bench`, LLGuidance and XGrammar on the
same schema files and the same Llama 3 tokenizer, one thread each.

Each engine compiles every schema (compile time = TTFM), then walks every test instance
token by token: compute the mask, check the instance's token is in it, commit it (the
mask+commit time per token = TBM). A valid instance must be accepted to the end, an
invalid one must be refused somewhere or not be accepting at the end; a schema passes when
it compiles and every test is decided right (an invalid instance accepted is an
invalidation error, the worst outcome). Instances are serialised as MaskBench does:
`json.dumps(data, ensure_ascii=False)` (", " and ": "), tokenised without special tokens.

Engine settings follow MaskBench's own harness (guidance-ai/jsonschemabench, maskbench/):
XGrammar `compile_json_schema(any_whitespace=False, strict_mode=True)` with
`GrammarCompiler(max_threads=1)`; LLGuidance `LLMatcher` on `grammar_from_json_schema`
with its default options (flexible whitespace, which admits MaskBench's spacing).
Peers' per-token times include one Python call each; DeepInfer's are taken in C. With
--clock cpu (the default) every engine is timed in process CPU time (all its threads), so
other work on a shared host inflates the figures far less than wall time would.

The peers are not test dependencies: install them into a separate venv, e.g.
    python3 -m venv /work/mbvenv && /work/mbvenv/bin/pip install llguidance xgrammar
(XGrammar imports torch; a .pth file pointing at a venv that has it is enough), then
    /work/mbvenv/bin/python bench/maskbench_compare.py --dir mb/dev \\
        --list ../shared/data/maskbench/ci-sample.txt --deepinfer build/deepinfer
Each peer runs in a child process that is restarted when one schema exceeds --timeout-s.
"""
import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path


def pct(v, q):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


# ---- peers, inside a worker process ----

class Llg:
    name = "llguidance"

    def __init__(self, tok_dir):
        import llguidance
        import llguidance.hf
        import transformers
        self.llg = llguidance
        hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(Path(tok_dir) / "tokenizer.json"))
        self.tok = llguidance.hf.from_tokenizer(hf)
        self.words = (self.tok.vocab_size + 31) // 32
        import numpy as np
        self.mask = np.zeros(self.words, dtype=np.int32)

    def compile(self, schema):
        g = self.llg.LLMatcher.grammar_from_json_schema(schema)
        m = self.llg.LLMatcher(self.tok, g, log_level=0)
        if m.is_error():
            raise ValueError(m.get_error())
        return m

    def matcher(self, compiled):
        return compiled.deep_copy()

    def step(self, m, t):
        m.unsafe_compute_mask_ptr(self.mask.ctypes.data, self.words * 4)
        ok = bool(self.mask[t >> 5] >> (t & 31) & 1)
        return ok and m.consume_token(t)

    def accepting(self, m):
        return m.is_accepting()


class Xgr:
    name = "xgrammar"

    def __init__(self, tok_dir):
        import transformers
        import xgrammar
        self.xgr = xgrammar
        hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(Path(tok_dir) / "tokenizer.json"))
        # Llama 3.1's embedding rows (128,256) exceed the tokenizer's ids, as in MaskBench
        info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=128256)
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1)
        self.mask = xgrammar.allocate_token_bitmask(1, info.vocab_size)
        self.stop_ids = list(info.stop_token_ids)

    def compile(self, schema):
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=True)

    def matcher(self, compiled):
        return self.xgr.GrammarMatcher(compiled)

    def step(self, m, t):
        m.fill_next_token_bitmask(self.mask)
        ok = bool(int(self.mask[0, t >> 5]) >> (t & 31) & 1)
        return ok and m.accept_token(t)

    def accepting(self, m):
        # accepting = end of sequence would be allowed now
        m.fill_next_token_bitmask(self.mask)
        return any(int(self.mask[0, e >> 5]) >> (e & 31) & 1 for e in self.stop_ids)


CLOCK = time.process_time


def run_schema(eng, enc, path, timeout_s):
    doc = json.loads(Path(path).read_text())
    r = {"result": "pass", "tbm": [], "ttfm": None, "why": ""}
    t0 = CLOCK()
    try:
        compiled = eng.compile(doc["schema"])
    except Exception as e:  # a compile error is a result, not a crash
        r["result"], r["why"] = "compile_error", str(e)[:300]
        return r
    r["ttfm"] = (CLOCK() - t0) * 1e6
    start = time.perf_counter()
    for ti, t in enumerate(doc.get("tests", [])):
        text = json.dumps(t["data"], ensure_ascii=False)
        ids = enc(text)
        m = eng.matcher(compiled)
        refused = False
        for tok in ids:
            a = CLOCK()
            ok = eng.step(m, tok)
            r["tbm"].append((CLOCK() - a) * 1e6)
            if not ok:
                refused = True
                break
        accepting = not refused and eng.accepting(m)
        if time.perf_counter() - start > timeout_s:
            r["result"] = "timeout"
            break
        if t["valid"] and not accepting:
            r["result"], r["why"] = "validation_error", f"test {ti} (valid) refused"
            break
        if not t["valid"] and accepting:
            r["result"], r["why"] = "invalidation_error", f"test {ti} (invalid) accepted"
            break
    return r


def worker(kind, tok_dir, timeout_s, clock, conn):
    global CLOCK
    CLOCK = time.process_time if clock == "cpu" else time.perf_counter
    import tokenizers
    tk = tokenizers.Tokenizer.from_file(str(Path(tok_dir) / "tokenizer.json"))
    enc = lambda s: tk.encode(s, add_special_tokens=False).ids  # noqa: E731
    eng = Llg(tok_dir) if kind == "llguidance" else Xgr(tok_dir)
    conn.send("ready")
    while True:
        path = conn.recv()
        if path is None:
            return
        conn.send(run_schema(eng, enc, path, timeout_s))


def run_peer(kind, tok_dir, files, timeout_s, clock, verbose):
    ctx = mp.get_context("spawn")
    counts = dict.fromkeys(["pass", "compile_error", "validation_error", "invalidation_error", "timeout"], 0)
    tbm, ttfm = [], []
    proc = conn = None

    def start():
        nonlocal proc, conn
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker, args=(kind, tok_dir, timeout_s, clock, child), daemon=True)
        proc.start()
        conn = parent
        if not conn.poll(600):
            raise RuntimeError(f"{kind}: worker did not start")
        conn.recv()

    start()
    for f in files:
        conn.send(str(f))
        if conn.poll(timeout_s * 3 + 30):
            try:
                r = conn.recv()
            except EOFError:  # the worker died (a crash in the engine)
                r = {"result": "compile_error", "tbm": [], "ttfm": None, "why": "engine crashed"}
                start()
        else:
            proc.kill()
            proc.join()
            r = {"result": "timeout", "tbm": [], "ttfm": None, "why": "no answer"}
            start()
        counts[r["result"]] += 1
        tbm += r["tbm"]
        if r["ttfm"] is not None:
            ttfm.append(r["ttfm"])
        if verbose and r["result"] != "pass":
            print(f"{kind}: {f.name}: {r['result']}: {r['why']}", file=sys.stderr)
    conn.send(None)
    proc.join(10)
    return summary(counts, tbm, ttfm)


def summary(counts, tbm, ttfm):
    return {"schemas": sum(counts.values()), "passing": counts["pass"], "compile_error": counts["compile_error"],
            "validation_error": counts["validation_error"], "invalidation_error": counts["invalidation_error"],
            "timeout": counts["timeout"],
            "tbm_us": {"p50": pct(tbm, .5), "p90": pct(tbm, .9), "p99": pct(tbm, .99), "max": max(tbm, default=0)},
            "ttfm_us": {"p50": pct(ttfm, .5), "p90": pct(ttfm, .9), "p99": pct(ttfm, .99), "max": max(ttfm, default=0)},
            "tokens": len(tbm)}


def run_deepinfer(binary, tok_dir, d, names, timeout_s, clock, verbose):
    lst = Path(os.environ.get("TMPDIR", "/tmp")) / f"maskbench_compare_{os.getpid()}.txt"
    lst.write_text("".join(n + "\n" for n in names))
    cmd = [binary, "grammar-bench", "--tokenizer", str(tok_dir), str(d), "--list", str(lst), "--json",
           "--timeout-s", str(timeout_s), "--clock", clock] + (["--verbose"] if verbose else [])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    lst.unlink()
    if p.returncode:
        raise SystemExit(f"grammar-bench failed ({p.returncode})")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="folder of MaskBench files (e.g. mb/dev from dev.tar.xz)")
    ap.add_argument("--list", help="file names (one a line) to run, relative to --dir")
    ap.add_argument("--sample", type=int, default=0, help="every k-th file of the sorted folder (0: all)")
    ap.add_argument("--tokenizer", default=str(Path.home() / ".cache/deepinfer/tokenizers/llama3"),
                    help="folder with Llama 3's tokenizer.json")
    ap.add_argument("--deepinfer", default="build/deepinfer")
    ap.add_argument("--engines", default="deepinfer,llguidance,xgrammar")
    ap.add_argument("--timeout-s", type=float, default=10)
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="time in process CPU time (default) or wall time")
    ap.add_argument("--json-out", help="write all summaries here")
    ap.add_argument("--verbose", action="store_true", help="name each schema that does not pass (stderr)")
    a = ap.parse_args()
    d = Path(a.dir)
    if a.list:
        names = [n.strip() for n in Path(a.list).read_text().splitlines() if n.strip()]
    else:
        names = sorted(p.name for p in d.glob("*.json"))
        if a.sample > 1:
            names = names[::a.sample]
    files = [d / n for n in names]
    missing = [f for f in files if not f.exists()]
    if missing:
        raise SystemExit(f"{len(missing)} files not found, e.g. {missing[0]}")
    res = {}
    for e in a.engines.split(","):
        t = time.time()
        if e == "deepinfer":
            res[e] = run_deepinfer(a.deepinfer, a.tokenizer, d, names, a.timeout_s, a.clock, a.verbose)
        elif e in ("llguidance", "xgrammar"):
            res[e] = run_peer(e, a.tokenizer, files, a.timeout_s, a.clock, a.verbose)
        else:
            raise SystemExit(f"unknown engine '{e}' (deepinfer, llguidance, xgrammar)")
        res[e]["wall_s"] = round(time.time() - t, 1)
        print(f"{e}: {json.dumps(res[e])}", file=sys.stderr, flush=True)
    rows = [("schemas", lambda r: r["schemas"]), ("passing", lambda r: r["passing"]),
            ("compile errors", lambda r: r["compile_error"]), ("validation errors", lambda r: r["validation_error"]),
            ("invalidation errors", lambda r: r["invalidation_error"]), ("timeouts", lambda r: r["timeout"]),
            ("mask+commit p50 (us)", lambda r: f"{r['tbm_us']['p50']:.1f}"),
            ("mask+commit p99 (us)", lambda r: f"{r['tbm_us']['p99']:.1f}"),
            ("compile p50 (ms)", lambda r: f"{r['ttfm_us']['p50'] / 1000:.2f}"),
            ("tokens", lambda r: r["tokens"]), ("wall (s)", lambda r: r["wall_s"])]
    engines = list(res)
    print(f"| {'':22} | " + " | ".join(f"{e:>10}" for e in engines) + " |")
    print(f"|{'-' * 24}|" + "|".join("-" * 12 for _ in engines) + "|")
    for label, f in rows:
        print(f"| {label:22} | " + " | ".join(f"{f(res[e])!s:>10}" for e in engines) + " |")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
