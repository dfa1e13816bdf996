"""The tokenize/detokenize CLI contracts: --help on stdout with status 0;
errors are one line on stderr with status 2; safe defaults (no BOS, special
text not parsed)."""
import json

from tok_common import run, tokenizer_dir


def _ok(p):
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout


def _err(p, needle):
    assert p.returncode == 2
    lines = p.stderr.decode().strip().split("\n")
    assert len(lines) == 1 and needle in lines[0], lines
    assert lines[0].startswith("deepinfer ")


def test_help():
    for cmd in ("tokenize", "detokenize"):
        out = _ok(run([cmd, "--help"], b""))
        assert b"--tokenizer" in out


def test_tokenize_modes():
    d = str(tokenizer_dir("llama3"))
    text = "Hi <|eot_id|>".encode()
    plain = json.loads(_ok(run(["tokenize", "--tokenizer", d], text)))
    parsed = json.loads(_ok(run(["tokenize", "--tokenizer", d, "--parse-special"], text)))
    both = json.loads(_ok(run(["tokenize", "--tokenizer", d, "--parse-special", "--add-special"], text)))
    assert 128009 not in plain and parsed[-1] == 128009 and both == [128000] + parsed
    out = _ok(run(["detokenize", "--tokenizer", d], json.dumps(both).encode()))
    assert out == b"<|begin_of_text|>Hi <|eot_id|>"
    out = _ok(run(["detokenize", "--tokenizer", d, "--skip-special"], json.dumps(both).encode()))
    assert out == b"Hi "


def test_errors():
    d = str(tokenizer_dir("qwen3"))
    _err(run(["tokenize"], b"x"), "--tokenizer")
    _err(run(["tokenize", "--tokenizer", d, "--bogus"], b"x"), "--bogus")
    _err(run(["tokenize", "--tokenizer", "/nonexistent/dir"], b"x"), "/nonexistent/dir")
    _err(run(["tokenize", "--tokenizer", d], b"ok \xed\xa0\x80"), "byte offset 3")
    _err(run(["detokenize", "--tokenizer", d], b"{\"a\": 1}"), "JSON array")
    _err(run(["detokenize", "--tokenizer", d], b"[1, \"x\"]"), "element 1")
    _err(run(["detokenize", "--tokenizer", d], b"[1, 99999999]"), "99999999")
