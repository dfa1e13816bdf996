#!/usr/bin/env python3
"""Distance-to-the-truth goldens for the real test models: for eight texts, the reference
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
    ("dialogue", "\"You are late again,\" said Mara, without looking up from the ledger.\n"
                 "\"The tram broke down at the bridge,\" Tomas answered. \"We all had to walk.\"\n"
                 "\"All of you? The whole tram?\"\n\"Forty people in the rain. You should have seen the "
                 "conductor. He kept apologising as if he had broken the axle himself.\"\n"
                 "Mara closed the book and finally looked at him. His coat was soaked through, and there was "
                 "mud on his boots up to the ankles. \"Sit by the stove,\" she said. \"I will make tea. And "
                 "tomorrow, take the early tram, the one at six. It has never broken down in the eight years "
                 "I have taken it.\"\n\"Eight years,\" he said, pulling off his boots. \"Have you really worked "
                 "here for eight years?\"\n\"Nine in March. Old Henrik hired me the week the river froze. He "
                 "said anyone who came to an interview across the ice deserved the job.\"\n"
                 "Tomas laughed, and for a while neither of them said anything. The kettle began to sing. "
                 "Outside, the rain turned to sleet, and the lamps along the quay came on one by one."),
    ("manual", "## Installing the service\n\n1. Download the archive for your platform and check its "
               "checksum against the value published on the release page.\n2. Unpack it into `/opt/relay` "
               "and create a dedicated user: `useradd --system --home /opt/relay relay`.\n3. Copy "
               "`relay.example.toml` to `/etc/relay/relay.toml` and set `listen_address`, `data_dir` and "
               "`max_connections`. The defaults listen on port 8443 and keep 64 connections.\n4. Install the "
               "unit file, then run `systemctl daemon-reload` and `systemctl enable --now relay`.\n\n"
               "## Troubleshooting\n\nIf the service exits immediately, run `journalctl -u relay -n 50`. "
               "The most common causes are a data directory the service user cannot write to, a port that "
               "is already in use, and a certificate whose private key does not match. When clients "
               "connect but time out, check the firewall first: the relay needs inbound TCP on its listen "
               "port and outbound UDP for health checks. Memory use grows with the number of open "
               "connections, roughly 40 KB each, so a server with 10,000 clients needs about 400 MB "
               "beyond the base process."),
    ("history", "The city's first public library opened in 1871 in two rooms above a bakery on Market "
                "Street. Its founders, a schoolteacher and a retired sea captain, had collected about eight "
                "hundred books by subscription, most of them sermons, travel accounts and almanacs. Readers "
                "paid a penny a week, and the rooms were open only on Saturday afternoons. Within ten years "
                "the collection had outgrown the bakery, and the town council, after a long and bitter "
                "debate about taxes, agreed to fund a building of its own. The new library, finished in "
                "1886, was built of local granite with a reading room lit by tall windows on three sides. "
                "During the war years it served as a recruitment office and later as a hospital for soldiers "
                "recovering from influenza, and the books were stored in crates in the basement. When it "
                "reopened in 1920, the librarians found that damp had ruined nearly a third of the "
                "collection. The loss prompted the first public appeal for donations, which brought in more "
                "than four thousand volumes in a single year."),
    ("c_code", "#include <stdio.h>\n#include <stdlib.h>\n\n/* Returns the number of words in s: runs of "
               "characters separated by spaces, tabs or newlines. */\nstatic int count_words(const char *s) "
               "{\n    int n = 0, in_word = 0;\n    for (; *s; s++) {\n        if (*s == ' ' || *s == '\\t' "
               "|| *s == '\\n') {\n            in_word = 0;\n        } else if (!in_word) {\n            "
               "in_word = 1;\n            n++;\n        }\n    }\n    return n;\n}\n\nint main(int argc, char "
               "**argv) {\n    char line[4096];\n    long total = 0, lines = 0;\n    FILE *f = argc > 1 ? "
               "fopen(argv[1], \"r\") : stdin;\n    if (!f) {\n        perror(argv[1]);\n        return 1;\n"
               "    }\n    while (fgets(line, sizeof line, f)) {\n        total += count_words(line);\n"
               "        lines++;\n    }\n    printf(\"%ld lines, %ld words\\n\", lines, total);\n    if (f != "
               "stdin) fclose(f);\n    return 0;\n}\n"),
    ("math", "To find the sum of the first n odd numbers, write them out: 1, 3, 5, and so on up to 2n - 1. "
             "Pair the first with the last, the second with the second to last, and continue inward. Each "
             "pair adds up to 2n, and there are n / 2 pairs, so the sum is n squared. For example, the first "
             "five odd numbers are 1, 3, 5, 7 and 9, and their sum is 25, which is five squared. A second "
             "argument uses induction. The claim holds for n = 1, since the first odd number is 1. Suppose "
             "it holds for some n, so that the first n odd numbers add up to n squared. The next odd number "
             "is 2n + 1, and n squared plus 2n + 1 equals (n + 1) squared, so the claim holds for n + 1 as "
             "well. A third argument is geometric: arrange dots in a square, and notice that each new odd "
             "number of dots adds an L-shaped border that turns a square of side n into a square of side "
             "n + 1. The same idea shows that the sum of the first n even numbers is n times (n + 1)."),
]


def log_softmax64(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def kl_rows(ref_ids, ref_lp, logits):
    """Per row: sum_topk p (log p - log q) + the tail bucket's term; logits: [n, V]."""
    lq = log_softmax64(logits)
    out = np.empty(len(ref_ids))
    for i in range(len(ref_ids)):
        p = np.exp(ref_lp[i].astype(np.float64))
        q = np.exp(lq[i, ref_ids[i]])
        kl = float(np.sum(p * (ref_lp[i].astype(np.float64) - lq[i, ref_ids[i]])))
        pt, qt = max(1.0 - p.sum(), 1e-300), max(1.0 - q.sum(), 1e-300)
        out[i] = kl + pt * np.log(pt / qt)
    return out


def kl_topk(ref_ids, ref_lp, logits):
    return float(kl_rows(ref_ids, ref_lp, logits).mean())


def peer_kl(llama_mod, path, texts, top_ids, top_lp):
    """llama.cpp's mean KL and top-1 agreement to the stored reference on the same ids, and its KL
    at every position (the test compares position by position: paired differences have far less
    spread than two means over a few hundred positions)."""
    rows, npos, agree = [], 0, 0
    llm = llama_mod.Llama(model_path=str(path), n_ctx=2048, n_threads=2, logits_all=True, verbose=False)
    off = 0
    for t in texts:
        n = t["n"]
        ti, tl = top_ids[off:off + n], top_lp[off:off + n]
        off += n
        llm.reset()
        llm.eval(t["ids"])
        lg = np.array(llm.scores[:n], dtype=np.float64)
        rows.append(kl_rows(ti, tl, lg))
        npos += n
        agree += int((lg.argmax(axis=-1) == ti[:, 0]).sum())
    rows = np.concatenate(rows)
    return {"llama_cpp_python": llama_mod.__version__, "mean_kl": float(rows.mean()),
            "top1_agree": agree / npos}, rows.astype(np.float32)


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
            meta["llama_cpp"], peer_rows = peer_kl(llama_mod, path, meta["texts"], data["top_ids"], data["top_lp"])
            np.savez_compressed(HERE / f"kl_{key}.npz", top_ids=data["top_ids"], top_lp=data["top_lp"],
                                peer_kl=peer_rows)
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
        peer, peer_rows = peer_kl(llama_mod, path, texts, top_ids, top_lp) if llama_mod else (None, None)
        extra = {} if peer_rows is None else {"peer_kl": peer_rows}
        np.savez_compressed(HERE / f"kl_{key}.npz", top_ids=top_ids, top_lp=top_lp, **extra)
        meta = {"model": {"file": m["file"], "sha256": m["sha256"], "n_vocab": int(model.config.vocab_size)},
                "reference": "transformers float64 forward on the GGUF's dequantized weights, eager attention",
                "topk": TOPK, "tail_mass_mean": float(np.concatenate(tails).mean()),
                "tail_mass_max": float(np.concatenate(tails).max()), "texts": texts, "llama_cpp": peer}
        (HERE / f"kl_{key}.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
