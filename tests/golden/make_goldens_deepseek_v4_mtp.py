#!/usr/bin/env python3
"""Golden for DeepSeek-V4's multi-token-prediction block (run with /work/refvenv/bin/python).

transformers' deepseek_v4 loads no mtp.* weights, so the reference is assembled from its own
building blocks: deepseek_v4/gen_tiny.py's "tiny-mtp" checkpoint (tiny's main weights plus
mtp.0.* under DeepSeek's names) is rewritten as a transformers checkpoint with one more layer
(the MTP block as layers.N, sliding_attention + moe; the root norm and hyper head replaced by
the block's own), so transformers builds the block, its hyper head and norm from the same
weights. The block's input follows DeepSeek's MTP (and llama.cpp's deepseek4 graph_mtp): for
the pair at position p, the main model's hc_mult streams at p (before its hyper head), each
hnorm-ed and through h_proj, plus e_proj(enorm(embedding of token p + 1)) added to every
stream; then the block (sliding-window attention over the pairs 0..p), the block's hyper head,
its norm and the main head give the logits for token p + 2.

Writes deepseek_v4/tiny-mtp.json (tokens, n) and tiny-mtp.logits.f32 (float32
[n - 1][vocab]: the module's logits at every pair position 0..n-2).
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "deepseek_v4")
CACHE = os.path.expanduser("~/.cache/deepinfer/gen/deepseek-v4-mtp")
N_TOK = 96  # the window (16) overflows several times


def main():
    subprocess.check_call([sys.executable, os.path.join(OUT, "gen_tiny.py"), "--out", CACHE, "--config", "tiny-mtp"])
    src = os.path.join(CACHE, "tiny-mtp")
    cfg = json.load(open(os.path.join(src, "config.json")))
    w = load_file(os.path.join(src, "model.safetensors"))
    n = cfg["num_hidden_layers"]
    # the main model alone (transformers ignores mtp.*)
    main_dir = os.path.join(CACHE, "main")
    os.makedirs(main_dir, exist_ok=True)
    save_file({k: v for k, v in w.items() if not k.startswith("mtp.")}, os.path.join(main_dir, "model.safetensors"))
    json.dump(dict(cfg, num_nextn_predict_layers=0), open(os.path.join(main_dir, "config.json"), "w"))
    # the MTP block as layer n of a model whose final norm and hyper head are the block's
    blk_dir = os.path.join(CACHE, "block")
    os.makedirs(blk_dir, exist_ok=True)
    bw = {k: v for k, v in w.items() if not k.startswith("mtp.")}
    for k, v in w.items():
        if not k.startswith("mtp.0."): continue
        s = k[len("mtp.0."):]
        if s in ("hc_head_fn", "hc_head_base", "hc_head_scale"): bw[s] = v
        elif s == "norm.weight": bw["norm.weight"] = v
        elif s.split(".")[0] in ("e_proj", "h_proj", "enorm", "hnorm"): continue
        else: bw[f"layers.{n}.{s}"] = v
    save_file(bw, os.path.join(blk_dir, "model.safetensors"))
    json.dump(dict(cfg, num_nextn_predict_layers=0, num_hidden_layers=n + 1,
                   layer_types=cfg["layer_types"] + ["sliding_attention"],
                   mlp_layer_types=cfg["mlp_layer_types"] + ["moe"]), open(os.path.join(blk_dir, "config.json"), "w"))

    def load(d):
        m, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        assert not bad, bad
        return m.eval()

    main_m, blk_m = load(main_dir), load(blk_dir)
    V, D, eps = cfg["vocab_size"], cfg["hidden_size"], cfg["rms_norm_eps"]
    rng = np.random.Generator(np.random.PCG64(3801))
    ids = rng.integers(2, V, size=N_TOK).tolist()
    t = torch.tensor([ids])
    streams = {}
    main_m.model.hc_head.register_forward_pre_hook(lambda mod, args: streams.__setitem__("h", args[0].detach().clone()))

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    T = lambda k: torch.from_numpy(w["mtp.0." + k])
    with torch.no_grad():
        main_m(input_ids=t, use_cache=False)
        h = streams["h"][:, :-1]  # [1, n-1, hc, D]: pairs at positions 0..n-2
        e = main_m.model.embed_tokens(t[:, 1:])  # tokens 1..n-1
        x = (rms(e, T("enorm.weight")) @ T("e_proj.weight").T).unsqueeze(2) + rms(h, T("hnorm.weight")) @ T("h_proj.weight").T
        layers = blk_m.model.layers
        blk_m.model.layers = torch.nn.ModuleList([layers[n]])

        def swap(mod, args, kwargs):
            return (x,) + tuple(args[1:]), kwargs

        hook = layers[n].register_forward_pre_hook(swap, with_kwargs=True)
        logits = blk_m(input_ids=t[:, 1:], use_cache=False).logits[0]
        hook.remove()
    assert logits.shape == (N_TOK - 1, V)
    logits.numpy().astype("<f4").tofile(os.path.join(OUT, "tiny-mtp.logits.f32"))
    with open(os.path.join(OUT, "tiny-mtp.json"), "w") as f:
        json.dump({"source": "transformers deepseek_v4 " + __import__("transformers").__version__ +
                   " blocks, float32 (make_goldens_deepseek_v4_mtp.py)", "tokens": ids, "vocab": V}, f)
    print("tiny-mtp: logit std", logits.std().item(), "pairs", N_TOK - 1,
          "main top-1 agreement", (logits.argmax(-1) == main_m(input_ids=t).logits[0, 1:].argmax(-1)).float().mean().item())


if __name__ == "__main__":
    main()
