#!/usr/bin/env python3
"""Regenerate the Hugging Face transformers reference goldens for SmolLM2-135M-Instruct and
Gemma 3 270M, run on the SAME GGUF files as the llama.cpp goldens (sha256 checked here).

transformers reads the GGUF with `gguf_file=` (gguf-py dequantizes every tensor to float32) and
runs its own PyTorch implementation of the architecture (LlamaForCausalLM for SmolLM2,
Gemma3ForCausalLM for Gemma 3) in float32 on the CPU. It is not a test dependency: the goldens
are committed, and this script needs a scratch venv outside the repository:

    python3 -m venv /tmp/tfvenv
    /tmp/tfvenv/bin/pip install torch transformers accelerate gguf numpy
    scripts/fetch-models --only smollm2 --only gemma3-270m
    HF_HUB_OFFLINE=1 /tmp/tfvenv/bin/python tests/golden/make_goldens_transformers.py   # writes tests/golden/*

The prompts (names, texts AND token ids) are taken from the llama.cpp goldens
(llamacpp_*.json), so both references see exactly the same ids and no comparison depends on a
tokenizer. Settings: float32 weights and activations, attn_implementation="eager",
torch.use_deterministic_algorithms(True), a fixed number of torch threads (--threads, recorded),
the prompt as one forward pass, then 63 single-token steps with transformers' KV cache
(DynamicCache). Greedy = argmax of the float32 logits (lowest id on ties). 64 tokens are
always generated: EOS does not stop the generation. As a check of the cache path, the whole
sequence (prompt + 63 generated ids) is also run once without a cache, and the max |diff| of the
last row against the cached step is recorded (`nocache_check`).

Output (format in tests/golden/README.md):
    tests/golden/transformers_smollm2.json   + transformers_smollm2.prompt_logits.f32
    tests/golden/transformers_gemma3_270m.json
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_common import check_model, stats  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

try:
    from importlib.metadata import version as pkg_version
except ImportError:  # pragma: no cover
    pkg_version = None

HERE = Path(__file__).resolve().parent
MODELS_DIR = Path(os.environ.get("DI_MODELS_DIR") or (Path.home() / ".cache" / "deepinfer" / "models"))
N_PREDICT = 64
TOPK = 64
# Full float32 rows of the last prompt position are stored for the first FULL_ROWS SmolLM2
# cases only (196,608 bytes each); Gemma's 262,144-entry rows (1 MiB each) are not stored.
FULL_ROWS = 5

MODELS = {
    "smollm2": dict(
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        prompts_from="llamacpp_smollm2.json",
        out="transformers_smollm2",
        full_rows=FULL_ROWS,
    ),
    "gemma3-270m": dict(
        file="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        prompts_from="llamacpp_gemma3_270m.json",
        out="transformers_gemma3_270m",
        full_rows=0,
    ),
}

CONFIG_KEYS = ("model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size",
               "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
               "rms_norm_eps", "rope_theta", "rope_local_base_freq", "rope_parameters", "rope_scaling",
               "max_position_embeddings", "sliding_window", "layer_types", "query_pre_attn_scalar",
               "attn_logit_softcapping", "final_logit_softcapping", "hidden_act", "hidden_activation",
               "tie_word_embeddings", "attention_bias", "bos_token_id", "eos_token_id")


def versions():
    out = {}
    for name in ("torch", "transformers", "gguf", "numpy", "accelerate", "safetensors", "tokenizers"):
        try:
            out[name] = pkg_version(name)
        except Exception:  # noqa: BLE001
            out[name] = None
    return out


def jsonable(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        return repr(v)


@torch.no_grad()
def last_row(model, ids, cache=None):
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), past_key_values=cache, use_cache=cache is not None)
    return out.logits[0, -1].to(torch.float32).numpy().copy(), out


@torch.no_grad()
def run_model(key, threads):
    m = MODELS[key]
    path = MODELS_DIR / m["file"]
    check_model(path, m["sha256"], key)
    src = json.loads((HERE / m["prompts_from"]).read_text())
    assert src["model"]["sha256"] == m["sha256"]

    t0 = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(str(MODELS_DIR), gguf_file=m["file"], dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    print(f"[{key}] loaded {type(model).__name__} in {time.monotonic() - t0:.1f} s")
    cfg = model.config.to_dict()
    config = {k: jsonable(cfg[k]) for k in CONFIG_KEYS if k in cfg}
    V = model.config.vocab_size
    assert V == src["model"]["n_vocab"], (V, src["model"]["n_vocab"])
    eog = set(src["model"]["eog"])

    cases, rows = [], []
    for c in src["cases"]:
        ids = [int(t) for t in c["prompt_ids"]]
        t1 = time.monotonic()
        cache = transformers.DynamicCache(config=model.config)
        row, _ = last_row(model, ids, cache)
        prompt_row = row
        gen, margins, runner_up, logprobs = [], [], [], []
        for i in range(N_PREDICT):
            s, order = stats(row)
            tok = int(np.argmax(row))  # lowest id among ties
            assert tok == s["argmax"]
            gen.append(tok)
            margins.append(float(row[order[0]]) - float(row[order[1]]))
            runner_up.append(int(order[1]))
            logprobs.append(float(row[tok]) - s["logsumexp"])
            if i == N_PREDICT - 1:
                break
            row, _ = last_row(model, [tok], cache)
        # Cache check: the whole sequence at once, no cache, must give (nearly) the same last row.
        full, _ = last_row(model, ids + gen[:-1], None)
        nocache_diff = float(np.abs(full - row).max())
        nocache_argmax_same = int(np.argmax(full)) == gen[-1]
        dt = time.monotonic() - t1
        ps, porder = stats(prompt_row)
        eos_index = next((i for i, t in enumerate(gen) if t in eog), None)
        mn = int(np.argmin(margins))
        case = {
            "name": c["name"],
            "text": c["text"],
            "parse_special": c.get("parse_special", False),
            "prompt_ids": ids,
            "greedy_ids": gen,
            "eos_index": eos_index,
            "greedy_margins": [round(x, 7) for x in margins],
            "runner_up_ids": runner_up,
            "greedy_logprobs": [round(x, 7) for x in logprobs],
            "min_margin": float(margins[mn]),
            "min_margin_step": mn,
            "prompt_logits": {"position": len(ids) - 1, "stats": ps,
                              "top": [[int(i), float(prompt_row[i])] for i in porder[:TOPK]]},
            "nocache_check": {"max_abs_diff_last_row": nocache_diff, "argmax_same": nocache_argmax_same},
            "same_greedy_as_llamacpp_for": next((k for k, (a, b) in enumerate(zip(gen, c["greedy_ids"]))
                                                 if a != b), N_PREDICT),
        }
        if len(rows) < m["full_rows"]:
            case["prompt_logits"]["row"] = len(rows)
            rows.append(prompt_row)
        cases.append(case)
        print(f"[{key}] {c['name']}: {len(ids)} prompt tokens, {dt:.1f} s, min margin {margins[mn]:.5f} "
              f"(step {mn}), no-cache diff {nocache_diff:.2e}, same as llama.cpp for "
              f"{case['same_greedy_as_llamacpp_for']} tokens", flush=True)

    out = {
        "format": "deepinfer-golden-transformers/1",
        "model": {"fetch_name": key, "file": m["file"], "sha256": m["sha256"], "n_vocab": V,
                  "bos": src["model"]["bos"], "eos": src["model"]["eos"], "eog": sorted(eog)},
        "reference": {
            "implementation": f"Hugging Face transformers {type(model).__name__} from the GGUF "
                              "(from_pretrained(models_dir, gguf_file=...)), float32, CPU",
            "versions": versions(),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "torch_config": torch.__config__.show().strip().splitlines()[:3],
            "settings": {
                "dtype": "float32",
                "attn_implementation": "eager",
                "use_deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                "num_threads": torch.get_num_threads(),
                "device": "cpu",
                "cache": "DynamicCache; prompt = one forward pass, then one token per step",
                "greedy": "argmax of float32 logits, lowest id on ties; EOS does not stop",
            },
            "config": config,
            "prompts_from": m["prompts_from"],
        },
        "n_predict": N_PREDICT,
        "top_k_stored": TOPK,
        "prompt_logits_file": (m["out"] + ".prompt_logits.f32") if rows else None,
        "cases": cases,
    }
    (HERE / (m["out"] + ".json")).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    if rows:
        np.stack(rows).astype("<f4").tofile(HERE / (m["out"] + ".prompt_logits.f32"))
    print(f"[{key}] wrote {m['out']}.json" + (f" and {m['out']}.prompt_logits.f32" if rows else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=list(MODELS), action="append")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    for key in a.only or list(MODELS):
        run_model(key, a.threads)


if __name__ == "__main__":
    main()
