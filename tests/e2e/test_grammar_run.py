"""Constrained generation with `deepinfer run` on SmolLM2-135M: outputs under
--json-schema validate with Python jsonschema (sampled, several seeds), --regex
outputs fullmatch Python `re`, --grammar (GBNF) outputs fit the grammar, and
bad grammars are refused with one clear line."""
import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest

from tok_common import binary

MODELS = Path(os.environ.get("DI_MODELS_DIR") or Path.home() / ".cache" / "deepinfer" / "models")
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
     "required": ["name", "age", "tags"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 2, "maxItems": 5},
    {"anyOf": [{"type": "boolean"}, {"type": "string", "pattern": "^[A-Z][a-z]{1,8}$"}]},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                                          "kids": {"type": "array", "maxItems": 2,
                                                                   "items": {"$ref": "#/$defs/node"}}},
                        "required": ["v"], "additionalProperties": False}},
     "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date"},
                                      "id": {"type": "string", "format": "uuid"},
                                      "ok": {"const": True}},
     "required": ["when", "id", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"enum": ["x", "y"]}, "n": {"type": "number", "minimum": 0}},
     "required": ["kind"], "additionalProperties": False},
]


def run(args, timeout=120):
    return subprocess.run([binary(), "run", "-m", str(SMOL), "--threads", "1"] + args,
                          capture_output=True, timeout=timeout)


@pytest.fixture(autouse=True)
def _model():
    if not SMOL.exists():
        pytest.skip(f"{SMOL} not fetched (scripts/fetch-models)")


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_json_schema_outputs_validate(tmp_path, i):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMAS[i]))
    for seed in (1, 2):
        p = run(["-p", "Write a JSON value:", "-n", "300", "--seed", str(seed), "--json-schema", str(path)])
        assert p.returncode == 0, p.stderr.decode()
        out = p.stdout.decode()
        value = json.loads(out)
        jsonschema.validate(value, SCHEMAS[i])


def test_regex_and_gbnf(tmp_path):
    pat = r"(cat|dog)-[0-9]{2,4}( [a-z]+)?"
    for seed in (1, 2, 3):
        p = run(["-p", "A tag:", "-n", "40", "--seed", str(seed), "--regex", pat])
        assert p.returncode == 0, p.stderr.decode()
        assert re.fullmatch(pat, p.stdout.decode().rstrip("\n")), p.stdout
    g = tmp_path / "list.gbnf"
    g.write_text('root ::= "[" item ("," item){0,3} "]"\nitem ::= [0-9] | "x" [a-c]\n')
    p = run(["-p", "A list:", "-n", "40", "--grammar", str(g)])
    assert p.returncode == 0, p.stderr.decode()
    assert re.fullmatch(r"\[([0-9]|x[a-c])(,([0-9]|x[a-c])){0,3}\]", p.stdout.decode().rstrip("\n")), p.stdout


def test_bad_grammars(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "array", "uniqueItems": true}')
    for args, needle in ((["--json-schema", str(bad)], b"uniqueItems"), (["--regex", "a(?=b)"], b"lookahead"),
                         (["--regex", "a", "--json-schema", str(bad)], b"at most one")):
        p = run(["-p", "x", "-n", "4"] + args)
        assert p.returncode == 2, p
        lines = p.stderr.decode().strip().split("\n")
        assert len(lines) == 1 and needle.decode() in lines[0], lines


def test_serving_bench_constrained(tmp_path):
    """`bench --concurrency N --json-schema F` (bench/constrained_overhead.py's measurement):
    every request is constrained; a schema that ends early ends the requests early, one that
    needs more than --gen-len runs them to the full length; conflicting flags are refused."""
    short, long_ = tmp_path / "short.json", tmp_path / "long.json"
    short.write_text(json.dumps({"const": True}))
    long_.write_text(json.dumps({"type": "array", "minItems": 40, "items": {"type": "integer"}}))
    base = [binary(), "bench", "-m", str(SMOL), "--threads", "1", "--concurrency", "2", "--requests", "2",
            "--prompt-len", "8", "--gen-len", "24", "--json"]
    out = {}
    for name, extra in (("off", []), ("short", ["--json-schema", str(short)]), ("long", ["--json-schema", str(long_)])):
        p = subprocess.run(base + extra, capture_output=True, timeout=300)
        assert p.returncode == 0, p.stderr.decode()
        out[name] = json.loads(p.stdout.decode().strip().splitlines()[-1])
    assert out["off"]["constrained"] is False and out["long"]["constrained"] is True
    assert out["off"]["output_tokens"] == out["long"]["output_tokens"] == 48
    assert 2 <= out["short"]["output_tokens"] < 48  # "true" and whitespace around it, then the grammar is done
    # the time inside the constraint: none without one, a part of the step time with one
    assert out["off"]["constraint_seconds"] == 0 and out["off"]["constraint_fraction"] == 0
    assert out["long"]["constraint_seconds"] > 0 and 0 < out["long"]["constraint_fraction"] < 1
    p = subprocess.run(base + ["--json-schema", str(long_), "--regex", "a+"], capture_output=True, timeout=60)
    assert p.returncode == 2 and b"at most one of" in p.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "nonsense"}')
    p = subprocess.run(base + ["--json-schema", str(bad)], capture_output=True, timeout=60)
    assert p.returncode == 2 and p.stderr.decode().startswith("deepinfer bench: --json-schema:"), p.stderr
