"""Helpers for the tokenizer end-to-end tests: run `deepinfer tokenize/detokenize
--jsonl` over many strings at once and compare with a reference (PyPI
`tokenizers`), unpacking the shared .xz data into ~/.cache/deepinfer/tokenizers."""
import json
import lzma
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("DI_SHARED_DATA", REPO.parent / "shared" / "data"))
TOKDATA = SHARED / "tokenizers"
CACHE = Path.home() / ".cache" / "deepinfer" / "tokenizers"
NAMES = ["deepseek-v3", "llama3", "qwen3", "gemma3", "gpt-oss", "mistral7b"]


def binary():
    b = os.environ.get("DEEPINFER_BIN") or str(REPO / "build" / "deepinfer")
    return b


def tokenizer_dir(name):
    """The decompressed tokenizer folder (tokenizer.json + configs) in the cache."""
    d = CACHE / name
    tj = d / "tokenizer.json"
    if not tj.exists():
        d.mkdir(parents=True, exist_ok=True)
        src = TOKDATA / name
        for f in src.iterdir():
            if f.suffix in (".json", ".jinja"):
                shutil.copy(f, d / f.name)
        tmp = d / "tokenizer.json.tmp"
        with lzma.open(src / "tokenizer.json.xz", "rb") as fi, open(tmp, "wb") as fo:
            shutil.copyfileobj(fi, fo)
        tmp.rename(tj)
    return d


def corpus():
    with open(TOKDATA / "corpus.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def expected(name):
    with lzma.open(TOKDATA / "expected" / f"{name}.jsonl.xz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def run(args, data, timeout=300):
    p = subprocess.run([binary()] + args, input=data, capture_output=True, timeout=timeout)
    return p


def encode_many(path, texts, add=False, parse=False, timeout=300):
    args = ["tokenize", "--tokenizer", str(path), "--jsonl"]
    if add:
        args.append("--add-special")
    if parse:
        args.append("--parse-special")
    data = "".join(json.dumps(t) + "\n" for t in texts).encode()
    p = run(args, data, timeout)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    out = [json.loads(l) for l in p.stdout.decode().split("\n") if l]
    assert len(out) == len(texts)
    return out


def decode_many(path, id_lists, skip=False, timeout=300):
    args = ["detokenize", "--tokenizer", str(path), "--jsonl"]
    if skip:
        args.append("--skip-special")
    data = "".join(json.dumps(ids) + "\n" for ids in id_lists).encode()
    p = run(args, data, timeout)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    out = [json.loads(l) for l in p.stdout.decode().split("\n") if l]
    assert len(out) == len(id_lists)
    return out


def compare_with_reference(path, ref, texts, modes=((False, True), (True, True), (False, False), (True, False))):
    """ref: a tokenizers.Tokenizer. Returns a list of mismatch descriptions."""
    bad = []
    for add, parse in modes:
        ref.encode_special_tokens = not parse
        want = [ref.encode(t, add_special_tokens=add).ids for t in texts]
        got = encode_many(path, texts, add=add, parse=parse)
        for t, w, g in zip(texts, want, got):
            if w != g:
                bad.append(f"encode add={add} parse={parse} {t!r:.80}: want {w[:12]} got {g[:12]}")
        if parse:
            for skip in (False, True):
                dw = [ref.decode(ids, skip_special_tokens=skip) for ids in want]
                dg = decode_many(path, want, skip=skip)
                for t, w, g in zip(texts, dw, dg):
                    if w != g:
                        bad.append(f"decode add={add} skip={skip} {t!r:.80}: want {w!r:.60} got {g!r:.60}")
    ref.encode_special_tokens = False
    return bad
