#!/usr/bin/env python3
"""Goldens for DeepSeek-V2 from transformers' deepseek_v2 (run with /work/refvenv/bin/python).

Builds the tiny checkpoints with deepseek_v2/gen_tiny.py (numpy, DeepSeek's tensor
names) into a cache directory, loads them with transformers (strict: no missing or
unexpected keys), and writes tests/golden/deepseek_v2/<name>.json (token ids, the
positions kept) + <name>.logits.f32 (float32 [n_kept][vocab], full-prefill logits).
It also checks transformers against itself: prefill in chunks through its cache and
prefill-then-decode must agree with the full prefill, so the goldens hold for any
chunking. tests/unit/test_deepseek_v2_hf.c compares the engine with them."""
import json
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "deepseek_v2")
CACHE = os.path.expanduser("~/.cache/deepinfer/gen/deepseek-v2-hf")
N = 96


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
    for k, name in enumerate(("qlora", "noqlora", "yarn", "yarn707")):
        d = os.path.join(CACHE, name)
        model, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        assert not bad, bad
        model.eval()
        V = model.config.vocab_size
        rng = np.random.Generator(np.random.PCG64(31 + k))
        ids = rng.integers(2, V, size=N).tolist()
        t = torch.tensor([ids])
        with torch.no_grad():
            full = model(input_ids=t, use_cache=False).logits[0]
            for lbl, chunks in (("chunks", [7, 13, 50, N - 70]), ("decode", [N - 16] + [1] * 16)):
                err = (logits_chunked(model, t, chunks) - full).abs().max().item()
                print(f"{name}: transformers {lbl} vs full prefill max |diff| {err:.2e}")
                assert err < 1e-4, (name, lbl, err)
        full.numpy().astype("<f4").tofile(os.path.join(OUT, f"{name}.logits.f32"))
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump({"source": "transformers deepseek_v2 " + __import__("transformers").__version__ + ", float32",
                       "tokens": ids, "positions": list(range(N)), "vocab": V}, f)
        print(name, "logit std", full.std().item())


if __name__ == "__main__":
    main()
