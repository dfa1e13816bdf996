#!/usr/bin/env python3
"""Regenerate the llama.cpp reference goldens for SmolLM2-135M-Instruct and Gemma 3 270M.

Reference: llama.cpp through llama-cpp-python (PyPI), run on the SAME GGUF files that
scripts/fetch-models brings (sha256 checked here). It is not a test dependency: install it in a
scratch venv outside the repository, built from source for a portable x86-64 AVX2 target:

    python3 -m venv /tmp/refvenv
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \\
                -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF" \\
        /tmp/refvenv/bin/pip install llama-cpp-python==0.3.36 numpy
    /tmp/refvenv/bin/python tests/golden/make_goldens.py            # writes tests/golden/*

Settings: KV cache F32 (type_k = type_v = 0), logits for all positions, flash attention off,
n_batch = n_ubatch = 1024 (the whole prompt is one batch), 1 thread (bit-identical to 2), greedy = argmax of the
logits (lowest id on ties; llama.cpp's greedy sampler does the same), 64 generated tokens,
EOS is NOT a stop (generation continues; eos_index records where it first appeared).

Prompts are stored as text AND as token ids from llama.cpp's tokenizer (BOS added only when
the model's GGUF says add_bos_token: Gemma yes, SmolLM2 no), so the engine tests can feed the
ids (`deepinfer run --ids`) and do not depend on our tokenizer.

Output (see tests/golden/README.md for the exact formats):
    tests/golden/llamacpp_smollm2.json      + llamacpp_smollm2.prompt_logits.f32
    tests/golden/llamacpp_gemma3_270m.json
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_common import check_model, stats  # noqa: E402

import llama_cpp
from llama_cpp import Llama

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MODELS_DIR = Path(os.environ.get("DI_MODELS_DIR") or (Path.home() / ".cache" / "deepinfer" / "models"))
N_PREDICT = 64
TOPK = 64

PLAIN_PROMPTS = [
    ("capital", "The capital of France is"),
    ("story", "Once upon a time, there was a little girl named"),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("colors", "The three primary colors are red,"),
    ("science", "Water boils at a temperature of"),
    ("planet", "The largest planet in our solar system is"),
    ("moon", "In 1969, Neil Armstrong became the first person to"),
    ("tea", "To make a cup of tea, first"),
    ("fox", "The quick brown fox jumps over the lazy dog. The quick brown fox"),
    ("pizza", "My favorite food is pizza because"),
]

SMOL_CHAT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
             "<|im_end|>\n<|im_start|>user\nWhat is the tallest mountain in the world?<|im_end|>\n"
             "<|im_start|>assistant\n")

# ~700 tokens, longer than Gemma 3's 512-token sliding window, so local layers must drop keys.
LONG_PARAGRAPH = (
    "The history of the bicycle begins in the early nineteenth century, when inventors in Europe "
    "experimented with two-wheeled machines pushed along by the rider's feet. Pedals attached to "
    "the front wheel came later, followed by the high-wheeler, whose large front wheel made each "
    "turn of the pedals carry the rider further. The safety bicycle, with two wheels of equal size "
    "and a chain driving the rear wheel, made cycling practical for ordinary people, and pneumatic "
    "tyres soon made it comfortable as well. "
)

MODELS = {
    "smollm2": dict(
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        out="llamacpp_smollm2",
        full_prompt_logits=True,
        prompts=PLAIN_PROMPTS + [("chat", SMOL_CHAT, True)],
    ),
    "gemma3-270m": dict(
        file="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        out="llamacpp_gemma3_270m",
        full_prompt_logits=False,
        prompts=PLAIN_PROMPTS + [("long_swa", LONG_PARAGRAPH * 6 + "In summary, the bicycle")],
    ),
}

BUILD_FLAGS = os.environ.get(
    "REF_CMAKE_ARGS",
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
    "-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF")


def topk(row, order, k=TOPK):
    return [[int(i), float(row[i])] for i in order[:k]]


def greedy(row):
    # np.argmax returns the lowest index among ties, as llama.cpp's greedy sampler
    return int(np.argmax(row))


def make_llm(path, n_ctx, threads):
    kw = dict(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=threads,
              n_threads_batch=threads, type_k=0, type_v=0, logits_all=True, seed=0, verbose=False,
              flash_attn=False)
    try:
        return Llama(**kw), kw
    except TypeError:
        kw.pop("flash_attn")
        return Llama(**kw), kw


def run_model(key, threads):
    m = MODELS[key]
    path = MODELS_DIR / m["file"]
    check_model(path, m["sha256"], key)
    llm, kw = make_llm(path, 1024, threads)
    vocab = llm.n_vocab()
    eos = llm.token_eos()
    eog = set()
    for t in range(vocab):
        if llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(llm.model), t) if hasattr(
                llama_cpp, "llama_vocab_is_eog") else t == eos:
            eog.add(t)
    print(f"[{key}] {path.name}: vocab {vocab}, bos {llm.token_bos()}, eos {eos}, eog {sorted(eog)}")

    cases, prompt_rows = [], []
    for entry in m["prompts"]:
        name, text = entry[0], entry[1]
        special = len(entry) > 2 and entry[2]
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
        llm.reset()
        t0 = time.monotonic()
        llm.eval(ids)
        n = len(ids)
        prompt_logits = np.array(llm.scores[n - 1], dtype=np.float32, copy=True)
        # sanity: all-position logits are there (logits_all)
        assert llm.scores.shape[1] == vocab
        gen, margins = [], []
        row = prompt_logits
        for i in range(N_PREDICT):
            s, order = stats(row)
            tok = greedy(row)
            assert tok == s["argmax"]
            gen.append(tok)
            margins.append(float(row[order[0]] - row[order[1]]))
            if i == N_PREDICT - 1:
                break
            llm.eval([tok])
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32, copy=True)
        # logits after the last generated token was fed (position n + 63): one more eval
        llm.eval([gen[-1]])
        final_logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32, copy=True)
        dt = time.monotonic() - t0
        eos_index = next((i for i, t in enumerate(gen) if t in eog), None)
        ps, porder = stats(prompt_logits)
        fs, forder = stats(final_logits)
        text_out = llm.detokenize(gen).decode("utf-8", errors="replace")
        case = {
            "name": name,
            "text": text,
            "parse_special": bool(special),
            "prompt_ids": [int(t) for t in ids],
            "greedy_ids": gen,
            "greedy_text": text_out,
            "eos_index": eos_index,
            "greedy_margins": [round(x, 6) for x in margins],
            "min_margin": float(min(margins)),
            "prompt_logits": {"position": n - 1, "stats": ps, "top": topk(prompt_logits, porder)},
            "final_logits": {"position": n + N_PREDICT - 1,
                             "fed_ids": "prompt_ids + greedy_ids (all 64)",
                             "stats": fs, "top": topk(final_logits, forder)},
        }
        if m["full_prompt_logits"]:
            case["prompt_logits"]["row"] = len(prompt_rows)
            prompt_rows.append(prompt_logits)
        cases.append(case)
        print(f"[{key}] {name}: {n} prompt tokens, {dt:.1f} s, min margin {min(margins):.4f}, "
              f"eos_index {eos_index}: {text_out[:70]!r}")

    out = {
        "format": "deepinfer-golden-llamacpp/1",
        "model": {"fetch_name": key, "file": m["file"], "sha256": m["sha256"], "n_vocab": vocab,
                  "bos": llm.token_bos(), "eos": eos, "eog": sorted(eog)},
        "reference": {
            "implementation": "llama.cpp via llama-cpp-python",
            "llama_cpp_python_version": llama_cpp.__version__,
            "build_cmake_args": BUILD_FLAGS,
            "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "machine": platform.machine(),
            "settings": {k: v for k, v in kw.items() if k != "model_path"},
            "settings_note": "type_k/type_v 0 = GGML_TYPE_F32 KV cache; greedy = argmax; EOS not a stop",
        },
        "n_predict": N_PREDICT,
        "top_k_stored": TOPK,
        "prompt_logits_file": (m["out"] + ".prompt_logits.f32") if m["full_prompt_logits"] else None,
        "cases": cases,
    }
    (HERE / (m["out"] + ".json")).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    if prompt_rows:
        np.stack(prompt_rows).astype("<f4").tofile(HERE / (m["out"] + ".prompt_logits.f32"))
    print(f"[{key}] wrote {m['out']}.json" + (f" and {m['out']}.prompt_logits.f32" if prompt_rows else ""))
    del llm


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=list(MODELS), action="append")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    for key in a.only or list(MODELS):
        run_model(key, a.threads)


if __name__ == "__main__":
    main()
