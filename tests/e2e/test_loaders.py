"""Model loaders end to end: HF safetensors in F16/BF16/sharded forms give the
same logits as the F32 original, GGUF split files load as one model, and
broken files fail at load with a message naming the file and the tensor or key
(never a crash)."""
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("DEEPINFER_BIN", str(REPO / "build" / "deepinfer"))
SHARED = Path(os.environ.get("DI_SHARED_DATA", REPO.parent / "shared" / "data"))
STORIES = SHARED / "models" / "stories260K"
IDS = "1,403,407,261,378,300,290,411,260,501,301,420"  # BOS + "Once upon a time" + arbitrary ids


def run(*args, check=True):
    p = subprocess.run([BIN, *args], capture_output=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{args}: exit {p.returncode}: {p.stderr.decode()}")
    return p


def logits(model, tmp_path, kv="f32"):
    out = tmp_path / "logits.f32"
    run("run", "-m", str(model), "--ids", IDS, "-n", "4", "--temp", "0", "--kv-type", kv, "--print-ids",
        "--dump-logits", str(out))
    return np.fromfile(out, dtype="<f4").reshape(-1, 512)


# ---- safetensors writing (the format is simple enough to write directly) ----

def read_safetensors(path):
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(data[b:e], dtype="<f4").reshape(v["shape"])
    return out


def to_bf16_bytes(a):
    u = a.astype("<f4").view("<u4")
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    return r.tobytes()


def write_safetensors(path, tensors):
    hdr, blobs, off = {}, [], 0
    for name, (dtype, shape, blob) in tensors.items():
        hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(hdr).encode()
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def hf_variant(tmp_path, name, dtype, shards=1):
    d = tmp_path / name
    d.mkdir()
    shutil.copy(STORIES / "hf" / "config.json", d / "config.json")
    ts = read_safetensors(STORIES / "hf" / "model.safetensors")
    conv = {}
    for k, a in ts.items():
        if dtype == "F16":
            conv[k] = ("F16", a.shape, a.astype("<f2").tobytes())
        elif dtype == "BF16":
            conv[k] = ("BF16", a.shape, to_bf16_bytes(a))
        else:
            conv[k] = ("F32", a.shape, a.astype("<f4").tobytes())
    if shards == 1:
        write_safetensors(d / "model.safetensors", conv)
    else:
        names = sorted(conv)
        wm = {}
        for i in range(shards):
            part = {k: conv[k] for k in names[i::shards]}
            fn = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(d / fn, part)
            wm.update({k: fn for k in part})
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    return d


def test_hf_dtypes_and_shards(tmp_path):
    ref = logits(STORIES / "stories260K.gguf", tmp_path)
    f32 = logits(hf_variant(tmp_path, "f32x3", "F32", shards=3), tmp_path)
    assert np.abs(f32 - ref).max() < 1e-4, "sharded F32 safetensors differ from GGUF"
    for dt, tol in (("F16", 0.05), ("BF16", 0.3)):
        got = logits(hf_variant(tmp_path, dt, dt), tmp_path)
        d = np.abs(got - ref).max()
        print(f"{dt}: max |diff| vs F32 = {d:.4f}")
        assert d < tol, f"{dt} safetensors logits differ by {d}"
        assert (got[:10].argmax(-1) == ref[:10].argmax(-1)).mean() >= 0.8


# ---- GGUF split files and corrupt GGUFs, written with gguf-py ----

def load_reader():
    import gguf
    return gguf.GGUFReader(str(STORIES / "stories260K.gguf"))


def write_gguf(path, kvs, tensors, gguf_mod=None):
    import gguf
    w = gguf.GGUFWriter(str(path), arch=None) if False else gguf.GGUFWriter(str(path), "llama")
    for k, (vt, v) in kvs.items():
        if k in ("general.architecture",):
            continue
        w.add_key_value(k, v, vt)
    for name, arr in tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def reader_contents(arch=None, drop_tensor=None, reshape=None):
    import gguf
    r = load_reader()
    kvs = {}
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            sub = f.types[1]
            if sub == gguf.GGUFValueType.STRING:
                v = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
            else:
                v = [f.parts[i][0].item() for i in f.data]
        elif vt == gguf.GGUFValueType.STRING:
            v = bytes(f.parts[f.data[0]]).decode()
        else:
            v = f.parts[f.data[0]][0].item()
        kvs[f.name] = (vt, v)
    tensors = []
    for t in r.tensors:
        if t.name == drop_tensor:
            continue
        a = np.array(t.data, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])
        if reshape and t.name == reshape:
            a = a[:, :-1].copy()
        tensors.append((t.name, a))
    return kvs, tensors


@pytest.fixture(scope="module")
def gguf_ok():
    pytest.importorskip("gguf")


def test_gguf_roundtrip_and_split(tmp_path, gguf_ok):
    kvs, tensors = reader_contents()
    one = tmp_path / "one.gguf"
    write_gguf(one, kvs, tensors)
    ref = logits(STORIES / "stories260K.gguf", tmp_path)
    assert np.abs(logits(one, tmp_path) - ref).max() == 0
    # split by hand: part 1 keeps the metadata, parts 2..3 carry only split keys
    import gguf
    parts = [tensors[0::3], tensors[1::3], tensors[2::3]]
    for i, ts in enumerate(parts):
        p = tmp_path / f"split-{i + 1:05d}-of-00003.gguf"
        meta = dict(kvs) if i == 0 else {}
        meta["split.no"] = (gguf.GGUFValueType.UINT16, i)
        meta["split.count"] = (gguf.GGUFValueType.UINT16, 3)
        write_gguf(p, meta, ts)
    got = logits(tmp_path / "split-00001-of-00003.gguf", tmp_path)
    assert np.abs(got - ref).max() == 0
    (tmp_path / "split-00003-of-00003.gguf").unlink()
    p = run("info", "-m", str(tmp_path / "split-00001-of-00003.gguf"), check=False)
    assert p.returncode == 2 and b"split-00003-of-00003.gguf" in p.stderr


def expect_load_error(path, *needles):
    p = run("info", "-m", str(path), check=False)
    err = p.stderr.decode()
    assert p.returncode == 2, f"expected exit 2, got {p.returncode}: {err}"
    assert err.count("\n") == 1, f"want one line on stderr: {err!r}"
    for n in needles:
        assert n in err, f"{n!r} not in {err!r}"


def test_bad_models(tmp_path, gguf_ok):
    import gguf
    kvs, tensors = reader_contents(drop_tensor="blk.2.ffn_up.weight")
    write_gguf(tmp_path / "missing.gguf", kvs, tensors)
    expect_load_error(tmp_path / "missing.gguf", "missing.gguf", "blk.2.ffn_up.weight")

    kvs, tensors = reader_contents(reshape="blk.1.attn_q.weight")
    write_gguf(tmp_path / "shape.gguf", kvs, tensors)
    expect_load_error(tmp_path / "shape.gguf", "blk.1.attn_q.weight", "shape")

    kvs, tensors = reader_contents()
    kvs["general.architecture"] = (gguf.GGUFValueType.STRING, "llama")
    w = gguf.GGUFWriter(str(tmp_path / "arch.gguf"), "frobnicator")
    w.add_tensor("x", np.zeros(4, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    expect_load_error(tmp_path / "arch.gguf", "arch.gguf", "frobnicator")

    kvs2 = {k: v for k, v in kvs.items() if k != "llama.block_count"}
    write_gguf(tmp_path / "nokey.gguf", kvs2, tensors)
    expect_load_error(tmp_path / "nokey.gguf", "llama.block_count")

    raw = (STORIES / "stories260K.gguf").read_bytes()
    (tmp_path / "trunc.gguf").write_bytes(raw[: len(raw) // 2])
    expect_load_error(tmp_path / "trunc.gguf", "trunc.gguf", "past end of file")
    (tmp_path / "magic.gguf").write_bytes(b"GGUX" + raw[4:])
    expect_load_error(tmp_path / "magic.gguf", "magic")
    # unknown dtype: patch the first tensor info's type field (after its name and dims)
    import re
    i = raw.index(b"token_embd.weight") + len(b"token_embd.weight")
    nd = struct.unpack_from("<I", raw, i)[0]
    tpos = i + 4 + 8 * nd
    bad = bytearray(raw)
    struct.pack_into("<I", bad, tpos, 99)
    (tmp_path / "dtype.gguf").write_bytes(bytes(bad))
    expect_load_error(tmp_path / "dtype.gguf", "token_embd.weight", "dtype")


def test_unknown_tensor_is_refused(tmp_path, gguf_ok):
    """A weight the forward would skip (a variant's extra norm, bias, ...) changes the output:
    refused, naming it. Parts the forward does not run (MTP layers past the stack, rotary
    tables, a vision tower) load."""
    kvs, tensors = reader_contents()
    n = kvs["llama.block_count"][1]
    extra = tensors + [("blk.1.attn_mystery_norm.weight", np.ones(64, np.float32))]
    write_gguf(tmp_path / "extra.gguf", kvs, extra)
    expect_load_error(tmp_path / "extra.gguf", "blk.1.attn_mystery_norm.weight", "not used")
    benign = tensors + [(f"blk.{n}.nextn.enorm.weight", np.ones(64, np.float32))]
    write_gguf(tmp_path / "benign.gguf", kvs, benign)
    assert np.abs(logits(tmp_path / "benign.gguf", tmp_path) - logits(STORIES / "stories260K.gguf", tmp_path)).max() == 0

    d = hf_variant(tmp_path, "hfextra", "F32")
    ts = read_safetensors(d / "model.safetensors")
    conv = {k: ("F32", a.shape, a.astype("<f4").tobytes()) for k, a in ts.items()}
    one = np.ones(4, "<f4").tobytes()
    write_safetensors(d / "model.safetensors", {**conv, "model.layers.0.self_attn.rotary_emb.inv_freq":
                                                ("F32", (4,), one)})
    run("info", "-m", str(d))
    write_safetensors(d / "model.safetensors", {**conv, "model.layers.0.mlp.up_proj.bias": ("F32", (4,), one)})
    expect_load_error(d, "model.layers.0.mlp.up_proj.bias", "not used")


def test_bad_hf(tmp_path):
    d = tmp_path / "hf"
    shutil.copytree(STORIES / "hf", d)
    (d / "config.json").write_text("{ not json")
    expect_load_error(d, "config.json")
    cfg = json.loads((STORIES / "hf" / "config.json").read_text())
    del cfg["num_hidden_layers"]
    (d / "config.json").write_text(json.dumps(cfg))
    expect_load_error(d, "num_hidden_layers")
    shutil.copy(STORIES / "hf" / "config.json", d / "config.json")
    raw = (STORIES / "hf" / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(raw[: len(raw) - 1000])
    expect_load_error(d, "model.safetensors")


def test_prompt_longer_than_context():
    ids = ",".join(["1"] * 40)
    p = run("run", "-m", str(STORIES / "stories260K.gguf"), "--ids", ids, "--ctx", "32", "-n", "4", check=False)
    assert p.returncode == 2
    err = p.stderr.decode()
    assert "40" in err and "32" in err, err


def test_dump_logits_with_a_step_narrower_than_the_prompt(tmp_path):
    """Every position's logits in chunks of at most --max-batch-tokens: the same bytes as one
    wide step (a chunk wider than the step once waited for its rows for ever)."""
    model = STORIES / "stories260K.gguf"
    if not model.exists():
        pytest.skip(f"{model} absent")
    dumps = []
    for mbt in ("512", "7"):
        out = tmp_path / f"logits{mbt}.f32"
        run("run", "-m", str(model), "--ids", IDS, "-n", "3", "--temp", "0", "--max-batch-tokens", mbt,
            "--dump-logits", str(out))
        dumps.append(out.read_bytes())
    assert len(dumps[0]) == (len(IDS.split(",")) + 3) * 512 * 4 and dumps[0] == dumps[1]
