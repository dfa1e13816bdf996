"""DeepSeek-V4 from llama.cpp's GGUF ("deepseek4") against the Hugging Face directory of the
same weights.

The tiny checkpoints come from tests/golden/deepseek_v4/gen_tiny.py; to_gguf.py writes them in
llama.cpp's layout (its layout is pinned to a real conversion by llamacpp_layout_flashratio.json),
routed experts in MXFP4 as every converted file holds them, and the HF directory of exactly those
weights. The HF path is itself checked against transformers (tests/unit/test_deepseek_v4.c), so
equal logits here tie the GGUF path to transformers too."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("DEEPINFER_BIN", str(REPO / "build" / "deepinfer"))
GOLD = REPO / "tests" / "golden" / "deepseek_v4"
sys.path.insert(0, str(GOLD))
import gen_tiny  # noqa: E402
import make_llamacpp_layout  # noqa: E402
import to_gguf  # noqa: E402

N_PROMPT, N_GEN = 300, 6  # windows overflow, CSA has rows past top-k, HCA several rows (tiny: rate 16)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("v4gguf")
    out = {}
    for name in ("tiny", "flashratio"):
        c = gen_tiny.CONFIGS[name]
        ts = dict(gen_tiny.generate(c))
        cfg = gen_tiny.config_json(c)
        hf = d / f"{name}-hf"
        hf.mkdir()
        gen_tiny.write_safetensors(str(hf / "model.safetensors"), list(to_gguf.same_weights(cfg, ts).items()))
        (hf / "config.json").write_text(json.dumps(cfg))
        out[name] = dict(cfg=cfg, tensors=ts, hf=hf, dir=d)
    return out


def ids(n, seed=7):
    r = np.random.default_rng(seed)
    return ",".join(str(int(x)) for x in r.integers(0, 128, n))


def run(model, tmp, tag, *extra):
    f = tmp / f"{tag}.logits.f32"
    prompt = ids(N_PROMPT)
    if tag == "hf":  # --ids @FILE (a list longer than one argument may be; newlines allowed): the same prompt
        (tmp / "ids.txt").write_text(prompt.replace(",", ",\n"))
        prompt = f"@{tmp / 'ids.txt'}"
    p = subprocess.run([BIN, "run", "-m", str(model), "--ids", prompt, "-n", str(N_GEN), "--temp", "0",
                        "--ignore-eos", "--print-ids", "--dump-logits", str(f), *extra],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1]), np.fromfile(f, np.float32).reshape(-1, 128)


def test_layout_matches_llamacpp_converter(models, tmp_path):
    m = models["flashratio"]
    g = tmp_path / "f.gguf"
    to_gguf.write(g, m["cfg"], m["tensors"])
    want = json.loads((GOLD / "llamacpp_layout_flashratio.json").read_text())
    got = json.loads(json.dumps(make_llamacpp_layout.layout(str(g))))
    assert got["tensors"] == want["tensors"]
    assert got["keys"] == want["keys"]


@pytest.mark.parametrize("name", ["tiny", "flashratio"])
def test_gguf_f32_equals_hf(models, tmp_path, name):
    """F32 matrices + MXFP4 experts (F32 at load): the same logits as the HF directory, every position."""
    m = models[name]
    g = tmp_path / f"{name}.gguf"
    to_gguf.write(g, m["cfg"], m["tensors"])
    gen_g, lg = run(g, tmp_path, "gguf")
    gen_h, lh = run(m["hf"], tmp_path, "hf")
    assert lg.shape == lh.shape == (N_PROMPT + N_GEN, 128)
    assert np.abs(lg - lh).max() <= 1e-4
    assert gen_g == gen_h
    # the weights moved the logits: not a degenerate model
    assert np.abs(lh).max() > 1.0 and len(set(lh.argmax(1).tolist())) > 5


def info(model):
    p = subprocess.run([BIN, "info", "-m", str(model)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def weights_mib(text):
    line = next(l for l in text.splitlines() if l.startswith("memory:"))
    return float(line.split("weights")[1].split("MiB")[0])


def test_mxfp4_native_equals_q8_0_blocks(models, tmp_path):
    """A quantized file (Q8_0 matrices) keeps its MXFP4 experts as stored (x86: native MXFP4 x Q8
    kernels; elsewhere rewritten as Q8_0 at load) and gives bit for bit what a file holding the
    same blocks as Q8_0 gives (exact int8 sums, the same power-of-two scale products), at every
    SIMD level; the blocks decode to the MXFP4 values; `info` shows the smaller weights."""
    m = models["tiny"]
    a, b = tmp_path / "mx.gguf", tmp_path / "q8.gguf"
    to_gguf.write(a, m["cfg"], m["tensors"], matrices="Q8_0", experts="MXFP4")
    to_gguf.write(b, m["cfg"], m["tensors"], matrices="Q8_0", experts="Q8_0_FROM_MXFP4")
    w = m["tensors"]["layers.0.ffn.experts.3.w2.weight"]
    mx = to_gguf.mxfp4_blocks(w)
    assert np.array_equal(gguf.quants.dequantize(to_gguf.mxfp4_to_q8_0(mx), gguf.GGMLQuantizationType.Q8_0),
                          gguf.quants.dequantize(mx, gguf.GGMLQuantizationType.MXFP4))
    gen_a, la = run(a, tmp_path, "mx")
    gen_b, lb = run(b, tmp_path, "q8")
    assert np.array_equal(la, lb)
    assert gen_a == gen_b
    for isa in ("scalar", "avx2"):  # a level the CPU lacks is lowered to what it has: still the same bits
        env = dict(os.environ, DI_CPU_ISA=isa)
        prompt = ",".join(ids(N_PROMPT).split(",")[:40])  # the first 40 positions of the run above
        p = subprocess.run([BIN, "run", "-m", str(a), "--ids", prompt, "-n", "1", "--temp", "0", "--ignore-eos",
                            "--dump-logits", str(tmp_path / f"{isa}.f32")], capture_output=True, text=True,
                           timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        assert np.array_equal(np.fromfile(tmp_path / f"{isa}.f32", np.float32).reshape(-1, 128)[:40], la[:40]), isa
    ia, ib = info(a), info(b)
    if "MXFP4" in ia:  # kept as stored (x86): 17 bytes per 32 expert weights instead of 34
        assert weights_mib(ia) < weights_mib(ib)
    # and close to the float model (8-bit activations, Q8_0 attention)
    _, lh = run(m["hf"], tmp_path, "hf")
    assert np.abs(la - lh).max() < 0.25 * np.abs(lh).max()


def test_bf16_gguf_equals_bf16_hf(models, tmp_path):
    """BF16 matrices (what the converter keeps from a BF16 checkpoint): equal to the HF directory
    holding the same BF16 values."""
    m = models["tiny"]
    ts = {n: (gen_tiny.to_bf16(a).astype(np.uint32) << 16).view(np.float32) if a.dtype == np.float32 else a
          for n, a in m["tensors"].items()}
    g = tmp_path / "bf.gguf"
    to_gguf.write(g, m["cfg"], ts, matrices="BF16")
    sw = to_gguf.same_weights(m["cfg"], ts)
    hf = tmp_path / "bf-hf"
    hf.mkdir()
    # 2-D matrices as BF16 (exact: they were rounded to it), the rest F32, as the GGUF holds them
    gen_tiny.write_safetensors(str(hf / "model.safetensors"),
                               [(n, gen_tiny.to_bf16(a) if a.dtype == np.float32 and a.ndim == 2 and "hc_" not in n
                                 and "ape" not in n and ".ffn.experts." not in n else a) for n, a in sw.items()])
    (hf / "config.json").write_text(json.dumps(dict(m["cfg"], torch_dtype="bfloat16")))
    gen_g, lg = run(g, tmp_path, "gguf")
    gen_h, lh = run(hf, tmp_path, "hf")
    assert np.abs(lg - lh).max() <= 1e-4
    assert gen_g == gen_h


def test_bad_gguf_names_key_and_tensor(models, tmp_path):
    m = models["flashratio"]
    cfg = m["cfg"]
    # a missing compressor tensor is named
    ts = {n: a for n, a in m["tensors"].items() if n != "layers.1.attn.compressor.wgate.weight"}
    g = tmp_path / "missing.gguf"
    to_gguf.write(g, cfg, ts)
    p = subprocess.run([BIN, "run", "-m", str(g), "--ids", "1,2", "-n", "1"], capture_output=True, text=True)
    assert p.returncode != 0 and "blk.1.attn_compressor_gate.weight" in p.stderr
    # compress ratios with two heavy rates are refused naming the key, before any tensor is read
    cfg2 = dict(cfg, compress_rates=dict(cfg["compress_rates"], other=64),
                layer_types=["heavily_compressed_attention", "other", "sliding_attention"])
    g2 = tmp_path / "rates.gguf"
    w = gguf.GGUFWriter(str(g2), to_gguf.ARCH)
    to_gguf.write_metadata(w, cfg2, "bad")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    p = subprocess.run([BIN, "run", "-m", str(g2), "--ids", "1", "-n", "1"], capture_output=True, text=True)
    assert p.returncode != 0 and "deepseek4.attention.compress_ratios" in p.stderr, p.stderr
