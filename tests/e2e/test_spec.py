"""Speculative decoding on real models never changes the output.

For 30 prompts on stories260K, SmolLM2-135M and Gemma 3 270M: greedy and seeded sampled
completions (temperature 0.8, top-p 0.95, repetition penalty 1.3) through `deepinfer batch`
with `--spec ngram --spec-mode always` are identical (token ids and logprobs) to `--spec off`,
one request at a time, 16 at once with every other request opting out (`"speculative": false`),
and under KV pressure that forces preemption; `run --dump-logits` files are byte-identical with
and without speculation; `run --stats` ends stderr with the JSON contract; bad --spec input is a
clear start-up error. Few tokens per prompt, so this stays a CI-sized test: CI runs every check
on stories260K and the batch-of-16 comparison on SmolLM2 and Gemma 3; DI_SPEC_FULL=1 adds the
one-at-a-time and preemption runs on the real models (minutes on a busy 2-core host).

Binary: $DEEPINFER_BIN (default build/deepinfer)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DEEPINFER_BIN", ROOT / "build" / "deepinfer"))
MODELS = Path(os.environ.get("DI_MODELS_DIR") or Path.home() / ".cache" / "deepinfer" / "models")
STORIES = ROOT.parent / "shared" / "data" / "models" / "stories260K" / "stories260K.gguf"
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = MODELS / "gemma-3-270m-q4_k_m.gguf"
ALL = [pytest.param(STORIES, id="stories260K"), pytest.param(SMOL, id="smollm2"), pytest.param(GEMMA, id="gemma3")]

SEEDS = [
    "Lily had a red ball. Lily had a red ball and a blue",
    "def add(a, b):\n    return a + b\n\ndef add3(a, b, c):\n    return a + b",
    "one two three four five, one two three four",
    "The cat sat on the mat. The dog sat on the log. The cat sat on the",
    "Name: Ada Lovelace\nEmail: ada@example.org\nName: Alan Turing\nEmail: alan@",
    "for (int i = 0; i < n; i++) sum += a[i];\nfor (int i = 0; i < n; i++)",
]
GEN = 12
FULL = os.environ.get("DI_SPEC_FULL") == "1"


def need(model):
    if not BIN.exists():
        pytest.skip(f"{BIN} not built (set DEEPINFER_BIN)")
    if not model.exists():
        pytest.skip(f"{model} missing (scripts/fetch-models)")


def prompts(n=30):
    return [SEEDS[i % len(SEEDS)] + (" " + str(i // len(SEEDS)) if i >= len(SEEDS) else "") for i in range(n)]


def batch(tmp_path, model, bodies, *args, tag, choices=False):
    """{custom_id: (token ids, logprobs, finish reason)} of the first choice, or a list of every choice's."""
    inp, outp = tmp_path / f"{tag}.in.jsonl", tmp_path / f"{tag}.out.jsonl"
    inp.write_text("".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": b})
                           + "\n" for i, b in enumerate(bodies)))
    threads = "1" if model == STORIES else "2"  # a tiny model loses more to a busy core's handoffs than it gains
    r = subprocess.run([str(BIN), "batch", "-m", str(model), "-i", str(inp), "-o", str(outp), "--threads", threads, "-q",
                        *map(str, args)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    out = {}
    for ln in outp.read_text().splitlines():
        res = json.loads(ln)
        assert res["error"] is None, res["error"]
        got = [(c["token_ids"], c["logprobs"]["token_logprobs"], c["finish_reason"])
               for c in sorted(res["response"]["body"]["choices"], key=lambda c: c["index"])]
        out[res["custom_id"]] = got if choices else got[0]
    return out


def mtp_drafted_steps(out):
    """Tokens that --spec mtp --spec-mode always verifications yield for batch(..., choices=True)'s completions:
    every decode step but the last (max_tokens); a sibling of an n > 1 request drafts in its first step too
    (the module runs for it at the fork) unless the fork position ends a KV block (not so for these prompts)."""
    return sum(max(len(c[0]) - 2, 0) for v in out.values() for c in v)


def bodies(sampled, mix=False):
    out = []
    for i, p in enumerate(prompts()):
        b = {"prompt": p, "max_tokens": GEN, "return_token_ids": True, "logprobs": 0}
        if sampled:
            b.update(temperature=0.8, top_p=0.95, repetition_penalty=1.3, seed=100 + i)
        else:
            b.update(temperature=0)
        if mix and i % 2:
            b["speculative"] = False
        out.append(b)
    return out


SPEC = ("--spec", "ngram", "--spec-mode", "always", "--spec-k-max", "6")


@pytest.mark.parametrize("model", ALL)
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_identical_to_off(tmp_path, model, sampled):
    need(model)
    ref = batch(tmp_path, model, bodies(sampled), "--spec", "off", "--concurrency", 16, tag="off")
    assert sum(len(v[0]) for v in ref.values()) > len(ref)  # something was generated
    if model == STORIES or FULL:
        alone = batch(tmp_path, model, bodies(sampled), *SPEC, "--concurrency", 1, tag="alone")
        assert alone == ref
    mixed = batch(tmp_path, model, bodies(sampled, mix=True), *SPEC, "--concurrency", 16, tag="mixed")
    assert mixed == ref


@pytest.mark.parametrize("model", [pytest.param(STORIES, id="stories260K")] +
                         ([pytest.param(SMOL, id="smollm2")] if FULL else []))
def test_identical_under_preemption(tmp_path, model):
    need(model)
    ref = batch(tmp_path, model, bodies(True), "--spec", "off", "--concurrency", 1, tag="off")
    # a pool of a few blocks per sequence for 16 sequences: preemption by recompute
    got = batch(tmp_path, model, bodies(True), *SPEC, "--concurrency", 16, "--block-size", 4,
                "--kv-mem", "96K" if model == STORIES else "2M", tag="tight")
    assert got == ref


def run(model, *args, check=True):
    r = subprocess.run([str(BIN), "run", "-m", str(model), "--threads", "2", *map(str, args)], capture_output=True,
                       text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("model", ALL)
def test_logit_dumps_and_stats(tmp_path, model):
    need(model)
    p = SEEDS[3]
    a = run(model, "-p", p, "-n", 16, "--temp", 0, "--print-ids", "--dump-logits", tmp_path / "off.bin", "--stats")
    b = run(model, "-p", p, "-n", 16, "--temp", 0, "--print-ids", "--dump-logits", tmp_path / "on.bin", "--stats",
            "--spec", "ngram", "--spec-mode", "always")
    assert a.stdout == b.stdout
    assert (tmp_path / "off.bin").read_bytes() == (tmp_path / "on.bin").read_bytes()
    for r, kind in ((a, "off"), (b, "ngram")):
        st = json.loads(r.stderr.strip().splitlines()[-1])
        assert list(st) == ["prompt_tokens", "gen_tokens", "prefill_s", "decode_s", "decode_tok_s", "spec", "tp"]
        assert list(st["spec"]) == ["kind", "drafted", "accepted", "verify_steps"]
        tp = st["tp"]
        assert {k: tp[k] for k in ("ranks", "exchanges", "exchange_bytes", "exchange_s")} == {
            "ranks": 1, "exchanges": 0, "exchange_bytes": 0, "exchange_s": 0}
        # one rank holds every weight (the split is test_tp.py's)
        assert tp["weights_bytes"] == [tp["weights_total"]] and tp["weights_total"] > 0 and tp["rss_bytes"][0] > 0 and tp["kv_bytes"][0] > 0
        assert st["spec"]["kind"] == kind and st["gen_tokens"] == len(json.loads(r.stdout.splitlines()[-1]))
        assert st["prompt_tokens"] > 0 and st["decode_s"] >= 0
    st = json.loads(b.stderr.strip().splitlines()[-1])["spec"]
    assert st["drafted"] >= st["accepted"] and st["verify_steps"] > 0


def test_bad_input():
    need(STORIES)
    for args, words in (((("--spec-k-max", "0")), ["--spec-k-max", "1..32"]),
                        ((("--spec-k-max", "33")), ["--spec-k-max", "1..32"]),
                        ((("--spec", "fast")), ["--spec", "off, ngram"]),
                        ((("--spec", "mtp")), ["mtp", "MTP"]),
                        ((("--spec", "draft")), ["draft"]),
                        ((("--spec-mode", "sometimes")), ["--spec-mode"])):
        r = run(STORIES, "--ids", "1,2,3", "-n", 2, *args, check=False)
        assert r.returncode == 2, r.stderr
        for w in words:
            assert w in r.stderr, (args, r.stderr)
