"""GGUF tokenizers (stories260K, SmolLM2, Gemma 3) against PyPI `tokenizers`:
the GGUF vocabulary must encode and decode the whole corpus exactly as the
model's Hugging Face tokenizer does."""
import json
from pathlib import Path

import pytest

from tok_common import SHARED, compare_with_reference, corpus, decode_many, encode_many, expected

tokenizers = pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")

MODELS = Path.home() / ".cache" / "deepinfer" / "models"
STORIES = SHARED / "models" / "stories260K"


def test_stories260k_gguf_matches_hf():
    ref = tokenizers.Tokenizer.from_file(str(STORIES / "hf" / "tokenizer.json"))
    bad = compare_with_reference(STORIES / "stories260K.gguf", ref, corpus())
    assert not bad, f"{len(bad)} mismatches, first: " + "\n".join(bad[:10])


def _gguf_strings(r, key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def _smollm2_reference(path):
    """SmolLM2's tokenizer.json, rebuilt from the GGUF metadata: byte-level BPE,
    pre-tokenizer Sequence[Digits(individual), ByteLevel(regex)], CONTROL tokens
    as special added tokens (the layout of HuggingFaceTB/SmolLM2 tokenizer.json)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = gguf.GGUFReader(str(path))
    toks = _gguf_strings(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in _gguf_strings(r, "tokenizer.ggml.merges")]
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    vocab = {t: i for i, t in enumerate(toks)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    specials = [(i, t) for i, t in enumerate(toks) if types[i] == 3]
    # ids of CONTROL tokens must be kept: add them in id order
    for i, t in specials:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False)])
        assert tok.token_to_id(t) == i, (t, i, tok.token_to_id(t))
    return tok


def test_smollm2_gguf_matches_hf():
    path = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.skip("SmolLM2 GGUF not fetched (scripts/fetch-models)")
    ref = _smollm2_reference(path)
    bad = compare_with_reference(path, ref, corpus())
    assert not bad, f"{len(bad)} mismatches, first: " + "\n".join(bad[:10])


def test_gemma3_gguf_matches_expected():
    """The Gemma 3 270M GGUF vocabulary must reproduce the HF Gemma 3 ids in
    expected/gemma3.jsonl (same pieces and special flags; the GGUF lacks only
    <image_soft_token>, so lines using it are left out)."""
    path = MODELS / "gemma-3-270m-q4_k_m.gguf"
    if not path.exists():
        pytest.skip("Gemma 3 GGUF not fetched (scripts/fetch-models)")
    rows = [r for r in expected("gemma3") if "<image_soft_token>" not in r["text"]]
    texts = [r["text"] for r in rows]
    bad = []
    for key, add, parse in [
        ("ids_parse_special", False, True),
        ("ids_parse_special_add_special", True, True),
        ("ids_no_parse_special", False, False),
        ("ids_no_parse_special_add_special", True, False),
    ]:
        got = encode_many(path, texts, add=add, parse=parse)
        bad += [f"{key} {r['text']!r:.80}: want {r[key][:12]} got {g[:12]}" for r, g in zip(rows, got) if g != r[key]]
    for key, ids_key, skip in [("decode", "ids_parse_special", False), ("decode_skip_special", "ids_parse_special", True)]:
        got = decode_many(path, [r[ids_key] for r in rows], skip=skip)
        bad += [f"{key} {r['text']!r:.80}" for r, g in zip(rows, got) if g != r[key]]
    assert len(rows) > 780
    assert not bad, f"{len(bad)} mismatches, first: " + "\n".join(bad[:10])


def test_stories260k_gguf_matches_llama2c_run_c():
    """Prompt ids of llama2.c's run.c (refs/greedy_llama2c.json) from the GGUF
    vocabulary with BOS; and the greedy continuations decode without error."""
    refs = json.load(open(STORIES / "refs" / "greedy_llama2c.json"))["runs"]
    path = STORIES / "stories260K.gguf"
    got = encode_many(path, [r["prompt"] for r in refs], add=True, parse=False)
    assert got == [r["prompt_ids"] for r in refs]
    texts = decode_many(path, [r["prompt_ids"] + r["generated_ids"] for r in refs], skip=True)
    assert all(t.startswith(r["prompt"]) for t, r in zip(texts, refs))
