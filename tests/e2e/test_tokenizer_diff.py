"""Randomized differential test: random Unicode strings (mixed scripts,
whitespace runs, digits, emoji, fragments of special tokens) encoded and
decoded by `deepinfer` and by PyPI `tokenizers` must agree. Bounded time
(one round of 1000 strings per tokenizer, more rounds while
DI_TOK_DIFF_SECONDS lasts); a failure is shrunk to a
minimal reproducer, printed as a ready-to-run command."""
import json
import os
import random
import time

import pytest

from tok_common import NAMES, binary, decode_many, encode_many, tokenizer_dir

tokenizers = pytest.importorskip("tokenizers")

SECONDS = float(os.environ.get("DI_TOK_DIFF_SECONDS", "0"))
SEED = int(os.environ.get("DI_TOK_DIFF_SEED", str(int(time.time()) % 100000)))

ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    "٠١٢٣٤٥٦٧٨٩０１２３",
    " \t\n\r\u00a0\u3000\u2009\u200b\ufeff\u0085\u2028",
    ".,;:!?'\"()[]{}<>|/\\-_=+*&^%$#@`~",
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
    "ひらがなカタカナｱｲｳ",
    "한국어자모ㄱㄴ",
    "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВ",
    "αβγδεζηθικλμνξοπρστυφχψω",
    "مرحبا بالعالم",
    "שלום",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "e\u0301a\u0308o\u0302n\u0303",
    "😀👍🏽👨‍👩‍👧‍👦🇺🇸1️⃣❤️",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢𠀀𠀁",
    "ﬁﬂ﹏＜｜＞▁Ġ",
    "'s'S'll'LL're'VE'd",
]


def _pieces(ref):
    """Added-token texts and their fragments (prefixes, suffixes, doubled)."""
    added = [t.content for t in ref.get_added_tokens_decoder().values()]
    rng = random.Random(7)
    sample = rng.sample(added, min(40, len(added)))
    out = []
    for a in sample:
        out += [a, a[: len(a) // 2], a[len(a) // 2:], a + a, " " + a + " "]
    return out


def _random_string(rng, frags):
    n = rng.randint(0, 12)
    parts = []
    for _ in range(n):
        r = rng.random()
        if r < 0.2 and frags:
            parts.append(rng.choice(frags))
        elif r < 0.3:
            parts.append(rng.choice(" \t\n") * rng.randint(1, 6))
        else:
            alpha = rng.choice(ALPHABETS)
            parts.append("".join(rng.choice(alpha) for _ in range(rng.randint(1, 8))))
    return "".join(parts)


def _failures(path, ref, texts):
    """Indices of texts where any mode disagrees."""
    bad = set()
    for parse in (True, False):
        ref.encode_special_tokens = not parse
        want = [e.ids for e in ref.encode_batch(texts, add_special_tokens=True)]
        got = encode_many(path, texts, add=True, parse=parse)
        bad |= {i for i, (w, g) in enumerate(zip(want, got)) if w != g}
        if parse:
            for skip in (False, True):
                dw = ref.decode_batch(want, skip_special_tokens=skip)
                dg = decode_many(path, want, skip=skip)
                bad |= {i for i, (w, g) in enumerate(zip(dw, dg)) if w != g}
    ref.encode_special_tokens = False
    return bad


def _shrink(path, ref, text, budget=30.0):
    """Greedy delta debugging: drop chunks while the disagreement persists."""
    t0 = time.time()
    chunk = max(1, len(text) // 2)
    while chunk >= 1 and time.time() - t0 < budget:
        cands = [text[:i] + text[i + chunk:] for i in range(0, len(text), chunk)]
        bad = _failures(path, ref, cands) if cands else set()
        if bad:
            text = cands[min(bad)]
            chunk = max(1, min(chunk, len(text) // 2))
        else:
            chunk //= 2
    return text


@pytest.mark.parametrize("name", NAMES)
def test_random_strings_agree(name):
    path = tokenizer_dir(name)
    ref = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
    rng = random.Random(SEED + NAMES.index(name))
    frags = _pieces(ref)
    t0, total = time.time(), 0
    while total == 0 or time.time() - t0 < SECONDS:
        texts = [_random_string(rng, frags) for _ in range(1000)]
        bad = _failures(path, ref, texts)
        total += len(texts)
        if bad:
            text = _shrink(path, ref, texts[min(bad)])
            ref.encode_special_tokens = False
            want = ref.encode(text, add_special_tokens=True).ids
            pytest.fail(
                f"{name}: deepinfer and tokenizers disagree (seed {SEED}); minimal reproducer:\n"
                f"  text = {json.dumps(text)}\n  tokenizers ids = {want}\n"
                f"  printf '%s' {json.dumps(text)} | {binary()} tokenize --tokenizer {path} --add-special --parse-special"
            )
    assert total >= 1000
