#!/usr/bin/env python3
"""Goldens for DeepSeek-V4 from transformers' deepseek_v4 (run with /work/refvenv/bin/python).

Builds the tiny checkpoints with deepseek_v4/gen_tiny.py (numpy, DeepSeek's tensor
names) into a cache directory, loads them with transformers (strict: no missing or
unexpected keys), and writes tests/golden/deepseek_v4/<name>.json (token ids, the
positions kept) + <name>.logits.f32 (float32 [n_kept][vocab], full-prefill logits).
It also checks transformers against itself: prefill in chunks through its cache and
prefill-then-decode must agree with the full prefill (so the goldens hold for any
chunking), and records the greedy continuation.
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "deepseek_v4")
CACHE = os.path.expanduser("~/.cache/deepinfer/gen/deepseek-v4")
RUNS = {"tiny": dict(n=160, keep=1), "flashratio": dict(n=640, keep=5), "tiny-bf16": dict(n=160, keep=4)}


def logits_chunked(model, ids, chunks):
    cache = DynamicCache(config=model.config)
    out, p = [], 0
    for c in chunks:
        r = model(input_ids=ids[:, p:p + c], cache=cache, use_cache=True)
        out.append(r.logits[0])
        p += c
    return torch.cat(out)


def main():
    subprocess.check_call([sys.executable, os.path.join(OUT, "gen_tiny.py"), "--out", CACHE])
    torch.manual_seed(0)
    for name, run in RUNS.items():
        d = os.path.join(CACHE, name)
        model, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        assert not bad, bad
        model.eval()
        V = model.config.vocab_size
        rng = np.random.Generator(np.random.PCG64(7 + len(name.replace("-bf16", ""))))
        ids = rng.integers(2, V, size=run["n"]).tolist()
        t = torch.tensor([ids])
        with torch.no_grad():
            full = model(input_ids=t, use_cache=False).logits[0]
            cached = logits_chunked(model, t, [run["n"]])
            chunks = logits_chunked(model, t, [7, 13, 50, run["n"] - 70])
            steps = logits_chunked(model, t, [run["n"] - 20] + [1] * 20)
            for lbl, x in (("cached", cached), ("chunks", chunks), ("decode", steps)):
                err = (x - full).abs().max().item()
                print(f"{name}: transformers {lbl} vs full prefill max |diff| {err:.2e}")
                assert err < 1e-4, (name, lbl, err)
            gen = model.generate(t[:, :run["n"] - 40], max_new_tokens=24, do_sample=False)[0, run["n"] - 40:].tolist()
        keep = list(range(0, run["n"], run["keep"]))
        if run["n"] - 1 not in keep: keep.append(run["n"] - 1)
        full[keep].numpy().astype("<f4").tofile(os.path.join(OUT, f"{name}.logits.f32"))
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump({"source": "transformers deepseek_v4 " + __import__("transformers").__version__ + ", float32",
                       "tokens": ids, "positions": keep, "vocab": V,
                       "greedy_prompt_len": run["n"] - 40, "greedy": gen}, f)
        print(name, "logit std", full.std().item(), "kept", len(keep))


if __name__ == "__main__":
    main()
