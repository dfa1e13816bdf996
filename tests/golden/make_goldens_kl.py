#!/usr/bin/env python3
"""Distance-to-the-truth goldens for the real test models: for three texts, the reference
distribution at EVERY position is transformers' own forward in float64 on the GGUF's weights
(gguf-py dequantizes them; the quantized weights are the model under test, so this is the exact
answer for this file), and llama.cpp's mean KL to the same reference on the same file and ids.
tests/e2e/test_kl_truth.py checks DeepInfer's default path against it.

Stored per model (tests/golden/kl_<name>.npz + .json): the token ids of each text (made with
transformers' tokenizer from the GGUF, so the test needs no tokenizer), and per position the
reference's TOPK most likely ids with their log-probabilities (log-softmax over the whole
vocabulary, float64 rounded to float32). KL is then computed over those TOPK ids plus one bucket
for the rest of the vocabulary: a lower bound of the full KL (log-sum inequality), the same
measure for every engine compared; the rest's mass is recorded (`tail_mass_mean`, `_max`: the
max is at the first positions, where the model knows little).

Not a test dependency (needs torch + transformers + gguf, and llama-cpp-python for the peer's
figure: its `Llama(..., logits_all=True)` run on the same ids); run it outside CI:

    /work/refvenv/bin/python tests/golden/make_goldens_kl.py [--llama-lib DIR] [--peer-only]

--llama-lib: a directory holding libllama.so built from llama-cpp-python's vendored llama.cpp
(exported as LLAMA_CPP_LIB_PATH); without it the llama.cpp figure is left out.
"""
import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from golden_common import check_model  # noqa: E402

MODELS_DIR = Path(os.environ.get("DI_MODELS_DIR") or (Path.home() / ".cache" / "deepinfer" / "models"))
TOPK = 256
MODELS = {
    "smollm2": dict(file="SmolLM2-135M-Instruct.Q4_1.gguf",
                    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
    "gemma3_270m": dict(file="gemma-3-270m-q4_k_m.gguf",
                        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
}
TEXTS = [
    ("prose", "The lighthouse keeper had not spoken to anyone in eleven days when the supply boat finally "
              "rounded the northern rocks. He watched it from the gallery, counting the strokes of the oars, "
              "and tried to remember how a conversation begins. The weather had been kind that autumn, but "
              "the loneliness had not. When the boat touched the jetty he found that his hands were shaking, "
              "and he laughed at himself, because the man at the oars was only the grocer's son."),
    ("code", "def merge_intervals(intervals):\n    \"\"\"Merge overlapping [start, end] intervals.\"\"\"\n"
             "    if not intervals:\n        return []\n    intervals = sorted(intervals, key=lambda p: p[0])\n"
             "    merged = [list(intervals[0])]\n    for start, end in intervals[1:]:\n"
             "        last = merged[-1]\n        if start <= last[1]:\n            last[1] = max(last[1], end)\n"
             "        else:\n            merged.append([start, end])\n    return merged\n\n\n"
             "print(merge_intervals([[1, 3], [2, 6], [8, 10], [15, 18]]))\n"),
    ("facts", "Photosynthesis converts light energy into chemical energy stored in glucose. In the light "
              "reactions, which take place in the thylakoid membranes, water is split and oxygen is released, "
              "while ATP and NADPH are produced. The Calvin cycle, in the stroma, then uses that ATP and NADPH "
              "to fix carbon dioxide into three-carbon sugars. Most plants use this C3 pathway; C4 and CAM "
              "plants add steps that concentrate carbon dioxide and limit water loss in hot, dry climates."),
]


def log_softmax64(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def kl_topk(ref_ids, ref_lp, logits):
    """Mean over rows of sum_topk p (log p - log q) + tail bucket; logits: [n, V]."""
    lq = log_softmax64(logits)
    total = 0.0
    for i in range(len(ref_ids)):
        p = np.exp(ref_lp[i].astype(np.float64))
        q = np.exp(lq[i, ref_ids[i]])
        kl = float(np.sum(p * (ref_lp[i].astype(np.float64) - lq[i, ref_ids[i]])))
        pt, qt = max(1.0 - p.sum(), 1e-300), max(1.0 - q.sum(), 1e-300)
        total += kl + pt * np.log(pt / qt)
    return total / len(ref_ids)


def peer_kl(llama_mod, path, texts, top_ids, top_lp):
    """llama.cpp's mean KL and top-1 agreement to the stored reference on the same ids."""
    total, npos, agree = 0.0, 0, 0
    llm = llama_mod.Llama(model_path=str(path), n_ctx=1024, n_threads=2, logits_all=True, verbose=False)
    off = 0
    for t in texts:
        n = t["n"]
        ti, tl = top_ids[off:off + n], top_lp[off:off + n]
        off += n
        llm.reset()
        llm.eval(t["ids"])
        lg = np.array(llm.scores[:n], dtype=np.float64)
        total += kl_topk(ti, tl, lg) * n
        npos += n
        agree += int((lg.argmax(axis=-1) == ti[:, 0]).sum())
    return {"llama_cpp_python": llama_mod.__version__, "mean_kl": total / npos, "top1_agree": agree / npos}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-lib", help="directory with libllama.so (llama-cpp-python's vendored llama.cpp)")
    ap.add_argument("--peer-only", action="store_true",
                    help="keep the stored reference; only (re)measure llama.cpp against it (needs --llama-lib)")
    ap.add_argument("--only", choices=sorted(MODELS))
    args = ap.parse_args()
    llama_mod = None
    if args.llama_lib:
        os.environ["LLAMA_CPP_LIB_PATH"] = args.llama_lib
        import llama_cpp
        llama_mod = llama_cpp
    for key, m in MODELS.items():
        if args.only and key != args.only:
            continue
        path = MODELS_DIR / m["file"]
        check_model(path, m["sha256"], key)
        if args.peer_only:
            meta = json.loads((HERE / f"kl_{key}.json").read_text())
            data = np.load(HERE / f"kl_{key}.npz")
            meta["llama_cpp"] = peer_kl(llama_mod, path, meta["texts"], data["top_ids"], data["top_lp"])
            print(f"[{key}] llama.cpp: {meta['llama_cpp']}")
            (HERE / f"kl_{key}.json").write_text(json.dumps(meta, indent=1) + "\n")
            continue
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
        torch.set_num_threads(2)
        tok = AutoTokenizer.from_pretrained(str(MODELS_DIR), gguf_file=m["file"])
        model = AutoModelForCausalLM.from_pretrained(str(MODELS_DIR), gguf_file=m["file"], dtype=torch.float64,
                                                     quantization_config=GgufConfig(dequantize=True),
                                                     attn_implementation="eager").eval()
        assert all(p.dtype == torch.float64 for p in model.parameters())
        texts, top_ids, top_lp, tails = [], [], [], []
        for name, text in TEXTS:
            ids = tok(text, add_special_tokens=True)["input_ids"]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0].numpy()
            lp = log_softmax64(logits)
            order = np.argsort(-lp, axis=-1, kind="stable")[:, :TOPK]
            tl = np.take_along_axis(lp, order, axis=-1)
            tails.append(1.0 - np.exp(tl).sum(axis=-1))
            texts.append({"name": name, "n": len(ids), "ids": [int(t) for t in ids]})
            top_ids.append(order.astype(np.int32))
            top_lp.append(tl.astype(np.float32))
            print(f"[{key}] {name}: {len(ids)} positions, reference top-1 {int(order[0, 0])}")
        top_ids, top_lp = np.concatenate(top_ids), np.concatenate(top_lp)
        peer = peer_kl(llama_mod, path, texts, top_ids, top_lp) if llama_mod else None
        np.savez_compressed(HERE / f"kl_{key}.npz", top_ids=top_ids, top_lp=top_lp)
        meta = {"model": {"file": m["file"], "sha256": m["sha256"], "n_vocab": int(model.config.vocab_size)},
                "reference": "transformers float64 forward on the GGUF's dequantized weights, eager attention",
                "topk": TOPK, "tail_mass_mean": float(np.concatenate(tails).mean()),
                "tail_mass_max": float(np.concatenate(tails).max()), "texts": texts, "llama_cpp": peer}
        (HERE / f"kl_{key}.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
