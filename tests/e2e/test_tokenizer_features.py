"""Pipeline pieces the six reference tokenizers do not use, checked against
PyPI `tokenizers` on synthetic tokenizer.json files: added-token lstrip /
rstrip / single_word / normalized, Metaspace (pre-tokenizer and decoder,
each prepend scheme), Digits, Punctuation, Whitespace, WhitespaceSplit,
Lowercase/NFKC/Strip normalizers, Split behaviours and invert."""
import json
import random

import pytest

from tok_common import decode_many, encode_many

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: E402

TEXTS = [
    "", " ", "hello world", "  hello   world  ", "Hello, World! It's 2024.", "word sword words word_x x-word",
    "a<tag>b <tag> c  <tag>  d", "<sp>x<sp> <sp>", "ÉCOLE ﬁ ① ２３", "tab\tnew\nline\r\n end", "12345 678",
    "mixed中文 и кириллица", "!!??..", "a  b   c", "<TAG>", "x <tag>\n\ny",
]


def _random_texts(n=300, seed=3):
    rng = random.Random(seed)
    alpha = ["a", "b", "ab", " ", "  ", "\n", "\t", "<tag>", "<sp>", "word", "W", "1", "23", "!", ",", "é", "中", "ﬁ", "_"]
    return ["".join(rng.choice(alpha) for _ in range(rng.randint(0, 10))) for _ in range(n)]


def _vocab_from_chars():
    chars = sorted(set("".join(TEXTS + _random_texts())))
    extra = ["▁", "▁a", "▁w", "wo", "wor", "word", "▁word", "ab", "▁ab", "he", "hel", "hell", "hello", "▁hello", "<unk>"]
    vocab = {}
    for t in ["<unk>"] + chars + [c.lower() for c in chars] + extra + ["▁" + c for c in chars]:
        vocab.setdefault(t, len(vocab))
    merges = [("w", "o"), ("wo", "r"), ("wor", "d"), ("▁", "word"), ("▁", "a"), ("a", "b"), ("▁", "ab"),
              ("h", "e"), ("he", "l"), ("hel", "l"), ("hell", "o"), ("▁", "hello"), ("▁", "w")]
    return vocab, merges


def _check(tmp_path, tok, name):
    path = tmp_path / f"{name}.json"
    tok.save(str(path))
    texts = TEXTS + _random_texts()
    bad = []
    for parse in (True, False):
        tok.encode_special_tokens = not parse
        want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
        got = encode_many(path, texts, add=True, parse=parse)
        bad += [f"{name} parse={parse} {t!r}: want {w} got {g}" for t, w, g in zip(texts, want, got) if w != g]
        if parse:
            for skip in (False, True):
                dw = tok.decode_batch(want, skip_special_tokens=skip)
                dg = decode_many(path, want, skip=skip)
                bad += [f"{name} decode skip={skip} {t!r}: want {w!r} got {g!r}" for t, w, g in zip(texts, dw, dg) if w != g]
    tok.encode_special_tokens = False
    assert not bad, f"{len(bad)} mismatches:\n" + "\n".join(bad[:12])


def _added(tok):
    tok.add_tokens([AddedToken("<tag>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("word", single_word=True, normalized=True),
                    AddedToken("<sp>", special=True, lstrip=True, normalized=False),
                    AddedToken("<TAG>", special=True, rstrip=True, normalized=True)])


@pytest.mark.parametrize("scheme", ["always", "first", "never"])
def test_metaspace_and_added_flags(tmp_path, scheme):
    vocab, merges = _vocab_from_chars()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(left=False, right=True)])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme)
    _added(tok)
    _check(tmp_path, tok, f"metaspace_{scheme}")


@pytest.mark.parametrize("pre", ["digits", "digits_individual", "punct", "whitespace", "wssplit", "split_variants", "bert"])
def test_pretokenizers(tmp_path, pre):
    vocab, merges = _vocab_from_chars()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    p = {
        "digits": pre_tokenizers.Digits(individual_digits=False),
        "digits_individual": pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=True)]),
        "punct": pre_tokenizers.Punctuation(behavior="contiguous"),
        "whitespace": pre_tokenizers.Whitespace(),
        "wssplit": pre_tokenizers.WhitespaceSplit(),
        "bert": pre_tokenizers.BertPreTokenizer(),
        "split_variants": pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(r"\d+"), behavior="merged_with_next"),
            pre_tokenizers.Split(" ", behavior="merged_with_previous"),
            pre_tokenizers.Split(Regex("[!,.]"), behavior="removed", invert=False),
            pre_tokenizers.Split(Regex("[a-z]+"), behavior="isolated", invert=True),
        ]),
    }[pre]
    tok.pre_tokenizer = p
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    _added(tok)
    _check(tmp_path, tok, pre)
