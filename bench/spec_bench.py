#!/usr/bin/env python3
"""Speculative decoding on input-grounded work: n-gram (prompt lookup) vs off, side by side
with llama.cpp's prompt-lookup decoding vs its own plain decoding, on the same prompts.

Workloads (a base-model continuation prompt each, built from text in this repository so the
run needs nothing from outside): edit a C function (rename an identifier), extract fields of a
generated record as JSON, rewrite a paragraph of the docs. Greedy, up to --gen tokens, EOS ends
a reply. Each prompt runs off and on back to back (alternating), so drift on a shared host hits
both alike; speedup = decode tokens/s on / off summed over the prompts of a workload (decode
time: from the first generated token to the last; the prompt's forward is excluded on both
sides; "with prompt" is the whole request's time off / on, prompt forwards included, which
counts a draft model's own prompt forward). DeepInfer's outputs with and without speculation are compared
and must be identical.

DeepInfer: `deepinfer run ... --stats --spec off|ngram` (the last stderr line is JSON);
`--draft-model D` measures `--spec draft --draft-model D` instead of ngram (e.g. a model's F16 copy
from bench/make_gguf_copy.py as --model and the original as D).
llama.cpp: llama-cpp-python's Llama(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=K))
vs Llama() in a separate interpreter (--llamacpp-python, default $LLAMACPP_PYTHON); skipped when
it is missing (--skip-llamacpp).

  python3 bench/spec_bench.py --model ~/.cache/deepinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf
  python3 bench/spec_bench.py --model M --prompts 3 --gen 64 --skip-llamacpp     # quick look
"""
import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def c_functions(n):
    """n C functions of 8..40 lines from src/, deterministic."""
    out = []
    for f in sorted((ROOT / "src").rglob("*.c")):
        lines = f.read_text(errors="replace").splitlines()
        i = 0
        while i < len(lines) and len(out) < n * 4:
            ln = lines[i]
            if ln and not ln[0].isspace() and ln.rstrip().endswith("{") and "(" in ln and not ln.startswith(("static const", "typedef", "struct", "#")):
                j = i + 1
                while j < len(lines) and lines[j] != "}":
                    j += 1
                if 8 <= j - i <= 40:
                    out.append("\n".join(lines[i:j + 1]))
                i = j
            i += 1
    random.Random(1).shuffle(out)
    return out[:n]


def idents(code):
    import re
    names = [w for w in re.findall(r"\b([a-z][a-z_0-9]{2,})\b", code) if w not in
             {"int", "for", "return", "const", "static", "void", "size_t", "char", "if", "else", "while", "sizeof", "bool", "true", "false", "float", "double", "break", "continue", "struct", "uint64_t", "int32_t", "uint32_t", "int64_t", "uint8_t", "unsigned", "long", "short", "null"}]
    names.sort(key=lambda w: (-names.count(w), w))
    return names[0] if names else "x"


def records(n):
    rng = random.Random(2)
    first = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Margaret", "Dennis"]
    last = ["Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson", "Hamilton", "Ritchie"]
    streets = ["Mill Lane", "Harbour Road", "Station Street", "Kings Avenue", "Elm Close"]
    towns = ["Leeds", "Bristol", "Norwich", "Exeter", "York"]
    out = []
    for i in range(n):
        f, l = rng.choice(first), rng.choice(last)
        d = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        amt = f"{rng.randint(10, 9999)}.{rng.randint(0, 99):02d}"
        addr = f"{rng.randint(1, 200)} {rng.choice(streets)}, {rng.choice(towns)}"
        email = f"{f.lower()}.{l.lower()}@example.org"
        inv = f"INV-{rng.randint(10000, 99999)}"
        doc = (f"Invoice {inv} was issued on {d} to {f} {l}, who lives at {addr}. The amount due is "
               f"{amt} GBP, payable within 30 days. Questions about this invoice go to {email}. "
               f"Reference {inv} in any payment. {f} {l} asked for a paper copy to be sent to {addr}.")
        out.append(doc)
    return out


def paragraphs(n):
    paras = []
    for f in ["docs/ARCHITECTURE.md", "README.md", "docs/API.md"]:
        text = (ROOT / f).read_text(errors="replace")
        for p in text.split("\n\n"):
            p = " ".join(p.split())
            if 300 <= len(p) <= 900 and not p.startswith(("|", "#", "```", "-", "*")):
                paras.append(p)
    random.Random(3).shuffle(paras)
    return paras[:n]


def workloads(n):
    w = []
    for code in c_functions(n):
        name = idents(code)
        w.append(("edit", f"Below is a C function, then the same function with `{name}` renamed to `{name}_v2` and "
                          f"nothing else changed.\n\nOriginal:\n```c\n{code}\n```\n\nEdited:\n```c\n"))
    for doc in records(n):
        w.append(("extract", f"Document:\n{doc}\n\nThe fields of the document as JSON with keys invoice, date, name, "
                             f"address, amount, email:\n{{\"invoice\": \""))
    for p in paragraphs(n):
        w.append(("rewrite", f"Paragraph:\n{p}\n\nThe same paragraph, rewritten with every sentence kept and only "
                             f"obvious typos fixed:\n"))
    return w


def run_ours(binary, model, prompt, gen, spec, threads, k, draft=None):
    cmd = [binary, "run", "-m", model, "-p", prompt, "-n", str(gen), "--temp", "0", "--threads", str(threads),
           "--stats", "--print-ids", "--spec", spec]
    if spec != "off":
        cmd += ["--spec-k-max", str(k)]
    if spec == "draft":
        cmd += ["--draft-model", draft]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"deepinfer failed: {r.stderr[-2000:]}")
    st = json.loads(r.stderr.strip().splitlines()[-1])
    ids = json.loads(r.stdout.strip().splitlines()[-1])
    return st, ids


LLAMA_WORKER = r"""
import json, sys, time
import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
args = json.loads(sys.argv[1])
res = {}
for mode in ("off", "pld"):
    draft = LlamaPromptLookupDecoding(num_pred_tokens=args["k"]) if mode == "pld" else None
    # With a draft model llama-cpp-python keeps every position's logits (it sets logits_all
    # itself) but sizes that buffer from the logits_all argument: pass True, or a prompt longer
    # than n_batch overflows it.
    res[mode] = llama_cpp.Llama(model_path=args["model"], n_ctx=4096, n_threads=args["threads"],
                                n_threads_batch=args["threads"], draft_model=draft, verbose=False, seed=1,
                                logits_all=draft is not None)
for line in sys.stdin:
    p = json.loads(line)
    out = {}
    for mode in ("off", "pld"):
        llm = res[mode]
        llm.reset()
        t_first = t_last = None
        n = 0
        text = []
        for ch in llm.create_completion(p, max_tokens=args["gen"], temperature=0.0, top_k=1, stream=True):
            t = time.perf_counter()
            if t_first is None:
                t_first = t
            t_last = t
            n += 1
            text.append(ch["choices"][0]["text"])
        out[mode] = {"tokens": n, "decode_s": (t_last - t_first) if n > 1 else 0.0, "text": "".join(text)}
    print(json.dumps(out), flush=True)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--bin", default=os.environ.get("DEEPINFER_BIN", str(ROOT / "build" / "deepinfer")))
    ap.add_argument("--prompts", type=int, default=7, help="prompts per workload (3 workloads)")
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=8, help="draft tokens at most (ours: --spec-k-max; llama.cpp: num_pred_tokens)")
    ap.add_argument("--llamacpp-python", default=os.environ.get("LLAMACPP_PYTHON", "/tmp/spec_llama_venv/bin/python"))
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--json", help="write per-prompt results here")
    ap.add_argument("--draft-model", help="measure --spec draft with this draft model instead of --spec ngram")
    a = ap.parse_args()
    wl = workloads(a.prompts)
    rows, detail = [], []
    for model in a.model:
        llama = None
        if not a.skip_llamacpp and pathlib.Path(a.llamacpp_python).exists():
            llama = subprocess.Popen([a.llamacpp_python, "-c", LLAMA_WORKER,
                                      json.dumps({"model": model, "threads": a.threads, "gen": a.gen, "k": a.k})],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        agg = {}
        for i, (kind, prompt) in enumerate(wl):
            off, ids_off = run_ours(a.bin, model, prompt, a.gen, "off", a.threads, a.k)
            spec = "draft" if a.draft_model else "ngram"
            on, ids_on = run_ours(a.bin, model, prompt, a.gen, spec, a.threads, a.k, a.draft_model)
            if ids_off != ids_on:
                sys.exit(f"{model} prompt {i} ({kind}): outputs differ with --spec {spec}")
            g = agg.setdefault(kind, {"off_t": 0, "off_s": 0, "on_t": 0, "on_s": 0, "off_all_s": 0, "on_all_s": 0,
                                      "drafted": 0, "accepted": 0,
                                      "l_off_t": 0, "l_off_s": 0, "l_on_t": 0, "l_on_s": 0, "n": 0})
            g["n"] += 1
            for tag, st in (("off", off), ("on", on)):
                g[tag + "_t"] += max(st["gen_tokens"] - 1, 0)
                g[tag + "_s"] += st["decode_s"]
                g[tag + "_all_s"] += st["prefill_s"] + st["decode_s"]
            g["drafted"] += on["spec"]["drafted"]
            g["accepted"] += on["spec"]["accepted"]
            d = {"model": model, "kind": kind, "i": i, "ours_off": off, "ours_ngram": on}
            if llama:
                llama.stdin.write(json.dumps(prompt) + "\n")
                llama.stdin.flush()
                lr = json.loads(llama.stdout.readline())
                for tag, key in (("l_off", "off"), ("l_on", "pld")):
                    g[tag + "_t"] += max(lr[key]["tokens"] - 1, 0)
                    g[tag + "_s"] += lr[key]["decode_s"]
                d["llamacpp"] = {k: {"tokens": v["tokens"], "decode_s": v["decode_s"]} for k, v in lr.items()}
            detail.append(d)
            print(f"{pathlib.Path(model).name} {kind:8s} #{i:2d}: ours {off['decode_tok_s']:.1f} -> "
                  f"{on['decode_tok_s']:.1f} tok/s ({on['spec']['accepted']}/{on['spec']['drafted']} accepted)"
                  + (f"; llama.cpp {d['llamacpp']['off']['tokens'] / max(d['llamacpp']['off']['decode_s'], 1e-9):.1f} -> "
                     f"{d['llamacpp']['pld']['tokens'] / max(d['llamacpp']['pld']['decode_s'], 1e-9):.1f}" if llama else ""),
                  file=sys.stderr, flush=True)
        if llama:
            llama.stdin.close()
            llama.wait()
        for kind, g in agg.items():
            r = lambda t, s: t / s if s > 0 else 0.0
            ours = r(g["on_t"], g["on_s"]) / max(r(g["off_t"], g["off_s"]), 1e-9)
            lc = r(g["l_on_t"], g["l_on_s"]) / max(r(g["l_off_t"], g["l_off_s"]), 1e-9) if llama else None
            whole = g["off_all_s"] / max(g["on_all_s"], 1e-9)  # same tokens on both sides (outputs identical)
            rows.append((pathlib.Path(model).name, kind, g["n"], r(g["off_t"], g["off_s"]), r(g["on_t"], g["on_s"]), ours, whole,
                         g["accepted"] / max(g["drafted"], 1), r(g["l_off_t"], g["l_off_s"]) if llama else None,
                         r(g["l_on_t"], g["l_on_s"]) if llama else None, lc))
    print(f"| model | workload | prompts | ours off tok/s | ours {'draft' if a.draft_model else 'ngram'} tok/s | ours speedup | ours with prompt | accepted | "
          "llama.cpp off tok/s | llama.cpp PLD tok/s | llama.cpp speedup |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m, kind, n, o0, o1, sp, whole, acc, l0, l1, lsp in rows:
        lcs = (f"{l0:.1f} | {l1:.1f} | {lsp:.2f}x" if lsp is not None else "- | - | -")
        print(f"| {m} | {kind} | {n} | {o0:.1f} | {o1:.1f} | {sp:.2f}x | {whole:.2f}x | {acc * 100:.0f}% | {lcs} |")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(detail, indent=1))


if __name__ == "__main__":
    main()
