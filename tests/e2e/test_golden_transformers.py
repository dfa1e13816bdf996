"""SmolLM2-135M-Instruct (Q4_1) and Gemma 3 270M (Q4_K_M) against Hugging Face transformers
(float32, its own PyTorch forward) on the same GGUF files. Goldens in tests/golden/
(transformers_*.json, made by make_goldens_transformers.py; the prompt ids are those of the
llama.cpp goldens, so no tokenizer is involved).

DI_CPU_EXACT=1 (f32 activations, weights dequantized exactly as gguf-py does, which is what
transformers runs on): greedy ids identical for all 64 tokens, the chosen token's logprob at every
step and the last-prompt-position logits within EXACT_TOL of the reference. A divergence is only
accepted at a step where the reference's top-1/top-2 margin is below NEAR_TIE (then the ids must
be identical up to that step and the engine must pick the reference's runner-up there).

Default mode (int8 activations as ggml pairs them with quantized weights): top-1 at the last
prompt position equal (except where the reference margin is below DEFAULT_NEAR_TIE) and the
logits within DEFAULT_TOL; how many prompts stay identical for 64 tokens is printed (run with
-s to see the report), not asserted, because 8-bit activation noise legitimately flips near-ties.

Cost: EXACT mode does f32 dots against rows dequantized on every call, so all prompts of a model
go through ONE `deepinfer batch` run (one dequantization per step for all sequences). By default
EXACT greedy covers EXACT_CASES (5 prompts per model); DI_GOLDEN_ALL=1 runs all 11.
"""
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("DEEPINFER_BIN", str(REPO / "build" / "deepinfer"))
MODELS = Path(os.environ.get("DI_MODELS_DIR") or Path.home() / ".cache" / "deepinfer" / "models")
GOLDEN = REPO / "tests" / "golden"
GOLDENS = {"smollm2": "transformers_smollm2.json", "gemma3-270m": "transformers_gemma3_270m.json"}
ALL = os.environ.get("DI_GOLDEN_ALL", "") not in ("", "0")
# The first five prompts of each golden (not chosen by margin); DI_GOLDEN_ALL=1: every case.
EXACT_CASES = {"smollm2": ["capital", "story", "code", "colors", "science"],
               "gemma3-270m": ["capital", "story", "code", "colors", "science"]}
# Last-position logits are dumped for every prompt position, so very long prompts are left out
# of the logits checks (their first greedy id still checks the top-1).
MAX_DUMP_PROMPT = 64

NEAR_TIE = 1e-3          # EXACT mode: reference margins below this may flip
EXACT_TOL = 1e-3         # EXACT mode: |logit diff| and |logprob diff| bound (observed <= ~1e-4)
# Default mode: int8 activation noise, margins below this may flip. llama.cpp itself, on the same
# GGUF and prompts (tests/golden/llamacpp_*.json), flips top-1 against transformers at a 0.234
# margin (SmolLM2 "colors") with top-64 logits 0.23-0.80 away; any change in float summation order
# (e.g. a new kernel layout) moves which near-ties below that flip.
DEFAULT_NEAR_TIE = 0.25
DEFAULT_TOL = 1.5        # default mode: |logit diff| bound (observed up to ~0.6)


def load(key):
    p = GOLDEN / GOLDENS[key]
    if not p.exists():
        pytest.skip(f"{p} missing: run tests/golden/make_goldens_transformers.py (see tests/golden/README.md)")
    g = json.loads(p.read_text())
    model = MODELS / g["model"]["file"]
    if not model.exists():
        pytest.skip(f"{model} missing: run scripts/fetch-models")
    if not Path(BIN).exists():
        pytest.skip(f"{BIN} not built (set DEEPINFER_BIN)")
    return g, model


def env(exact):
    e = dict(os.environ)
    e.pop("DI_CPU_EXACT", None)
    if exact:
        e["DI_CPU_EXACT"] = "1"
    return e


def run_batch(model, cases, exact, tmp):
    inp, outp = tmp / "in.jsonl", tmp / "out.jsonl"
    with open(inp, "w") as f:
        for c in cases:
            body = {"prompt": c["prompt_ids"], "max_tokens": 64, "temperature": 0, "ignore_eos": True,
                    "return_token_ids": True, "logprobs": 0}
            f.write(json.dumps({"custom_id": c["name"], "method": "POST", "url": "/v1/completions",
                                "body": body}) + "\n")
    r = subprocess.run([BIN, "batch", "-m", str(model), "-i", str(inp), "-o", str(outp), "--threads", "2",
                        "--kv-type", "f32", "--concurrency", str(len(cases)), "-q"],
                       capture_output=True, text=True, timeout=1800, env=env(exact))
    assert r.returncode == 0, r.stderr
    out = {}
    for line in outp.read_text().splitlines():
        res = json.loads(line)
        assert res["error"] is None, res["error"]
        ch = res["response"]["body"]["choices"][0]
        out[res["custom_id"]] = (ch["token_ids"], ch["logprobs"]["token_logprobs"])
    return out


def last_prompt_row(model, c, V, exact, tmp):
    dump = tmp / f"{c['name']}.f32"
    r = subprocess.run([BIN, "run", "-m", str(model), "--ids", ",".join(map(str, c["prompt_ids"])), "-n", "1",
                        "--temp", "0", "--ignore-eos", "--kv-type", "f32", "--threads", "2", "--print-ids",
                        "--dump-logits", str(dump)], capture_output=True, timeout=600, env=env(exact))
    assert r.returncode == 0, r.stderr.decode()
    rows = np.fromfile(dump, dtype="<f4").reshape(-1, V)
    dump.unlink()
    return rows[len(c["prompt_ids"]) - 1]


_cache = {}


def engine(key, exact, tmp_path_factory):
    """Runs the engine once per (model, mode): greedy ids + logprobs of the selected cases, and
    the last-prompt-position logits row of the short ones."""
    if (key, exact) in _cache:
        return _cache[key, exact]
    g, model = load(key)
    cases = g["cases"] if (ALL or not exact) else [c for c in g["cases"] if c["name"] in EXACT_CASES[key]]
    tmp = tmp_path_factory.mktemp(f"tf-{key}-{'exact' if exact else 'int8'}")
    t0 = time.monotonic()
    greedy = run_batch(model, cases, exact, tmp)
    t1 = time.monotonic()
    rows = {c["name"]: last_prompt_row(model, c, g["model"]["n_vocab"], exact, tmp)
            for c in cases if len(c["prompt_ids"]) <= MAX_DUMP_PROMPT}
    print(f"\n[{key} {'EXACT' if exact else 'int8'}] batch of {len(cases)} x 64 tokens {t1 - t0:.1f} s, "
          f"{len(rows)} logits dumps {time.monotonic() - t1:.1f} s")
    _cache[key, exact] = (g, cases, greedy, rows)
    return _cache[key, exact]


def logit_diff(g, c, row):
    """max |diff| over the full reference row where stored, else over the stored top-64."""
    pl = c["prompt_logits"]
    if g.get("prompt_logits_file") and "row" in pl:
        ref = np.fromfile(GOLDEN / g["prompt_logits_file"], dtype="<f4").reshape(-1, len(row))[pl["row"]]
        return float(np.abs(row - ref).max()), "full row"
    top = np.array(pl["top"])
    return float(np.abs(row[top[:, 0].astype(int)] - top[:, 1]).max()), "top-64"


def first_divergence(got, want):
    return next((k for k, (a, b) in enumerate(zip(got, want)) if a != b),
                None if len(got) == len(want) else min(len(got), len(want)))


@pytest.mark.parametrize("key", list(GOLDENS))
def test_exact_greedy_identical(key, tmp_path_factory):
    g, cases, greedy, _ = engine(key, True, tmp_path_factory)
    worst_lp, report, problems = 0.0, [], []
    for c in cases:
        got, lps = greedy[c["name"]]
        want = c["greedy_ids"]
        assert len(got) == len(want) == 64
        k = first_divergence(got, want)
        upto = 64 if k is None else k
        lp = max((abs(a - b) for a, b in zip(lps[:upto], c["greedy_logprobs"])), default=0.0)
        worst_lp = max(worst_lp, lp)
        if k is None:
            report.append(f"{c['name']}: identical (64), max |logprob diff| {lp:.1e}")
            continue
        m = c["greedy_margins"][k]
        report.append(f"{c['name']}: identical for {k} tokens, then a near-tie (reference margin {m:.2e})")
        if not (m < NEAR_TIE and got[k] == c["runner_up_ids"][k]):
            problems.append(f"{c['name']}: greedy ids differ from transformers at step {k} (reference margin "
                            f"{m:.4f}, runner-up {c['runner_up_ids'][k]}): got {got[k:k + 5]}, want {want[k:k + 5]}")
    print(f"\n[{key} EXACT] " + "; ".join(report) + f"\n[{key} EXACT] max |chosen-token logprob diff| {worst_lp:.2e}")
    assert not problems, "\n".join(problems)
    assert worst_lp < EXACT_TOL, f"chosen-token logprob differs by {worst_lp}"


@pytest.mark.parametrize("key", list(GOLDENS))
def test_exact_last_logits(key, tmp_path_factory):
    g, cases, greedy, rows = engine(key, True, tmp_path_factory)
    assert rows, "no case short enough to dump"
    worst = 0.0
    for c in cases:
        s = c["prompt_logits"]["stats"]
        assert greedy[c["name"]][0][0] == s["argmax"] or s["max"] - s["second"] < NEAR_TIE, c["name"]
        if c["name"] not in rows:
            continue
        d, what = logit_diff(g, c, rows[c["name"]])
        print(f"[{key} EXACT] {c['name']}: max |logit diff| {d:.2e} ({what})")
        worst = max(worst, d)
        assert int(rows[c["name"]].argmax()) == s["argmax"] or s["max"] - s["second"] < NEAR_TIE, c["name"]
    print(f"[{key} EXACT] worst max |logit diff| at the last prompt position: {worst:.2e}")
    assert worst < EXACT_TOL


@pytest.mark.parametrize("key", list(GOLDENS))
def test_default_mode_close(key, tmp_path_factory):
    g, cases, greedy, rows = engine(key, False, tmp_path_factory)
    worst, identical, report, problems = 0.0, 0, [], []
    for c in cases:
        got = greedy[c["name"]][0]
        s = c["prompt_logits"]["stats"]
        margin0 = s["max"] - s["second"]
        if got[0] != s["argmax"] and margin0 >= DEFAULT_NEAR_TIE:
            problems.append(f"{c['name']}: top-1 at the last prompt position {got[0]} != {s['argmax']} "
                            f"(reference margin {margin0:.3f})")
        if c["name"] in rows:
            d, what = logit_diff(g, c, rows[c["name"]])
            worst = max(worst, d)
            if int(rows[c["name"]].argmax()) != s["argmax"] and margin0 >= DEFAULT_NEAR_TIE:
                problems.append(f"{c['name']}: argmax of the dumped row differs (reference margin {margin0:.3f})")
        k = first_divergence(got, c["greedy_ids"])
        if k is None:
            identical += 1
            report.append(f"{c['name']} 64")
        else:
            report.append(f"{c['name']} {k} (ref margin {c['greedy_margins'][k]:.3f})")
    print(f"\n[{key} int8] identical to transformers for 64 tokens: {identical}/{len(cases)}; "
          f"tokens identical per prompt: " + ", ".join(report))
    print(f"[{key} int8] worst max |logit diff| at the last prompt position: {worst:.3f}")
    assert not problems, "\n".join(problems)
    assert worst < DEFAULT_TOL, f"logits differ by {worst}"
