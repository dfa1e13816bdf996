"""Issue 34, loaders: non-regular files are refused at once, and every GGUF
hyperparameter and special-token id is range-checked at load with the key
named; a tensor whose type was edited to another is caught by the data
layout."""
import math
import os
import struct
import subprocess
import time

import pytest

from test_loaders import BIN, STORIES, expect_load_error, gguf_ok, reader_contents, write_gguf  # noqa: F401


def _quick_fail(args, needle, limit=10):
    t0 = time.monotonic()
    p = subprocess.run([BIN, *args], capture_output=True, timeout=limit + 20)
    took = time.monotonic() - t0
    assert p.returncode != 0, p.stderr
    assert needle in p.stderr.decode(), p.stderr
    assert took < limit, f"{args} took {took:.1f}s"


@pytest.mark.parametrize("cmd", ["info", "run", "tokenize"])
def test_dev_zero_refused(cmd):
    if not os.path.exists(BIN):
        pytest.skip("deepinfer not built")
    args = {"info": ["info", "-m", "/dev/zero"], "run": ["run", "-m", "/dev/zero", "-p", "hi", "-n", "1"],
            "tokenize": ["tokenize", "--tokenizer", "/dev/zero"]}[cmd]
    _quick_fail(args, "not a regular file")


def test_fifo_refused(tmp_path):
    if not os.path.exists(BIN):
        pytest.skip("deepinfer not built")
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    _quick_fail(["info", "-m", str(fifo)], "not a regular file")
    _quick_fail(["run", "-m", str(fifo), "-p", "hi", "-n", "1"], "not a regular file")
    # a model directory whose config.json is a FIFO
    d = tmp_path / "hf"
    d.mkdir()
    os.mkfifo(d / "config.json")
    _quick_fail(["info", "-m", str(d)], "not a regular file")


def _with_kv(tmp_path, name, key, vt, value):
    kvs, tensors = reader_contents()
    kvs[key] = (vt, value)
    p = tmp_path / name
    write_gguf(p, kvs, tensors)
    return p


def test_hyperparameters_validated(tmp_path, gguf_ok):
    import gguf
    F32, U32 = gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.UINT32
    expect_load_error(_with_kv(tmp_path, "nan.gguf", "llama.rope.freq_base", F32, math.nan), "llama.rope.freq_base")
    expect_load_error(_with_kv(tmp_path, "neg.gguf", "llama.rope.freq_base", F32, -1.0), "llama.rope.freq_base")
    expect_load_error(_with_kv(tmp_path, "ctx0.gguf", "llama.context_length", U32, 0), "llama.context_length")
    expect_load_error(_with_kv(tmp_path, "ctxmax.gguf", "llama.context_length", U32, 2**32 - 1),
                      "llama.context_length")
    expect_load_error(_with_kv(tmp_path, "eps.gguf", "llama.attention.layer_norm_rms_epsilon", F32, math.inf),
                      "layer_norm_rms_epsilon")
    expect_load_error(_with_kv(tmp_path, "kv.gguf", "llama.attention.head_count_kv", U32, 4096), "head_count_kv")


def test_token_ids_validated(tmp_path, gguf_ok):
    import gguf
    U32 = gguf.GGUFValueType.UINT32
    expect_load_error(_with_kv(tmp_path, "bos.gguf", "tokenizer.ggml.bos_token_id", U32, 100000),
                      "tokenizer.ggml.bos_token_id")
    expect_load_error(_with_kv(tmp_path, "eos.gguf", "tokenizer.ggml.eos_token_id", U32, 512),
                      "tokenizer.ggml.eos_token_id")


def test_tensor_type_edited(tmp_path):
    raw = (STORIES / "stories260K.gguf").read_bytes()
    i = raw.index(b"token_embd.weight") + len(b"token_embd.weight")
    nd = struct.unpack_from("<I", raw, i)[0]
    tpos = i + 4 + 8 * nd
    old = struct.unpack_from("<I", raw, tpos)[0]
    new = 1 if old == 0 else 0  # F32 <-> F16: the data no longer matches the declared size
    bad = bytearray(raw)
    struct.pack_into("<I", bad, tpos, new)
    (tmp_path / "type.gguf").write_bytes(bytes(bad))
    expect_load_error(tmp_path / "type.gguf", "token_embd.weight")
