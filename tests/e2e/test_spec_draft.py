"""The draft-model drafter (`--spec draft --draft-model PATH`) never changes the output.

A model is a valid draft for itself (the acceptance is then ~100%): with SmolLM2-135M Q4_1 and
stories260K as their own drafts, 30 greedy and 30 seeded sampled completions through `deepinfer
batch` (16 at once, every other request opting out) are identical (ids, logprobs, finish) to
`--spec off`; on stories260K also under KV pressure that preempts. `run --stats` reports the
drafter and its acceptance (also for Gemma 3 as its own draft: sliding-window layer groups). Bad input is a clear start-up error: a draft with another vocabulary
(naming the first differing token), --spec draft without --draft-model and the reverse, and a
--kv-mem whose draft share cannot hold the draft's KV.

Binary: $DEEPINFER_BIN (default build/deepinfer)."""
import json

import pytest

import test_spec as base

STORIES, SMOL = base.STORIES, base.SMOL


def spec_draft(model):
    return ("--spec", "draft", "--draft-model", str(model), "--spec-mode", "always", "--spec-k-max", "6")


@pytest.mark.parametrize("model", [pytest.param(STORIES, id="stories260K"), pytest.param(SMOL, id="smollm2")])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_self_draft_identical_to_off(tmp_path, model, sampled):
    base.need(model)
    ref = base.batch(tmp_path, model, base.bodies(sampled), "--spec", "off", "--concurrency", 16, tag="off")
    assert sum(len(v[0]) for v in ref.values()) > len(ref)
    got = base.batch(tmp_path, model, base.bodies(sampled, mix=True), *spec_draft(model), "--concurrency", 16,
                     tag="draft")
    assert got == ref


def test_self_draft_under_preemption(tmp_path):
    base.need(STORIES)
    ref = base.batch(tmp_path, STORIES, base.bodies(True), "--spec", "off", "--concurrency", 1, tag="off")
    # twice the reference test's pool: the draft's KV takes its share (the same bytes per position)
    got = base.batch(tmp_path, STORIES, base.bodies(True), *spec_draft(STORIES), "--concurrency", 16,
                     "--block-size", 4, "--kv-mem", "192K", "--stats-json", tmp_path / "st.json", tag="tight")
    assert got == ref
    assert json.loads((tmp_path / "st.json").read_text())["preemptions"] > 0


@pytest.mark.parametrize("model", [pytest.param(STORIES, id="stories260K"), pytest.param(SMOL, id="smollm2"),
                                   pytest.param(base.GEMMA, id="gemma3")])
def test_stats_and_acceptance(tmp_path, model):
    base.need(model)
    p = base.SEEDS[3]
    a = base.run(model, "-p", p, "-n", 24, "--temp", 0, "--print-ids", "--dump-logits", tmp_path / "off.bin")
    b = base.run(model, "-p", p, "-n", 24, "--temp", 0, "--print-ids", "--dump-logits", tmp_path / "on.bin", "--stats",
                 *spec_draft(model))
    assert a.stdout == b.stdout
    assert (tmp_path / "off.bin").read_bytes() == (tmp_path / "on.bin").read_bytes()
    st = json.loads(b.stderr.strip().splitlines()[-1])["spec"]
    assert st["kind"] == "draft" and st["verify_steps"] > 0
    # the same weights draft: every draft token is the target's choice, except past the end
    assert st["drafted"] > 0 and st["accepted"] >= 0.9 * st["drafted"], st


def test_bad_input():
    base.need(STORIES)
    base.need(SMOL)
    cases = (
        (("--spec", "draft"), ["--spec draft", "--draft-model"]),
        (("--draft-model", str(STORIES)), ["--draft-model", "--spec draft"]),
        (("--spec", "ngram", "--draft-model", str(STORIES)), ["--draft-model", "--spec draft"]),
        (("--spec", "draft", "--draft-model", str(SMOL)), ["--draft-model", "vocabulary", "token"]),
        (("--spec", "draft", "--draft-model", str(STORIES), "--kv-mem", "4K"), ["--draft-model", "--kv-mem"]),
        (("--spec", "draft", "--draft-model", "/nonexistent/draft.gguf"), ["--draft-model", "/nonexistent/draft.gguf"]),
    )
    for args, words in cases:
        r = base.run(STORIES, "--ids", "1,2,3", "-n", 2, *args, check=False)
        assert r.returncode == 2, (args, r.stderr)
        for w in words:
            assert w in r.stderr, (args, r.stderr)
