"""The real quantized models (SmolLM2 Q4_1, Gemma 3 270M Q4_K_M) against an
independent float64 numpy forward over weights dequantized by gguf-py. With
DI_CPU_EXACT=1 (f32 activations) DeepInfer must agree to float rounding: this
separates the math (exact) from 8-bit activation quantization (a design choice
that moves logits by ~1 on these models, as it does in llama.cpp)."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("DEEPINFER_BIN", str(REPO / "build" / "deepinfer"))
MODELS = Path(os.environ.get("DI_MODELS_DIR", Path.home() / ".cache" / "deepinfer" / "models"))


class Weights:
    def __init__(self, path):
        self.r = gguf.GGUFReader(str(path))
        self.t = {t.name: t for t in self.r.tensors}
        self.arch = self.kv("general.architecture")

    def kv(self, key, default=None):
        f = self.r.fields.get(key)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(v).decode()
        return v[0].item()

    def hp(self, key, default=None):
        return self.kv(f"{self.arch}.{key}", default)

    def __call__(self, name, dtype=np.float64):
        t = self.t.get(name)
        if t is None:
            return None
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        return np.asarray(a, dtype=dtype).reshape([int(x) for x in reversed(t.shape)] if len(t.shape) > 1 else -1)


def forward(w, ids):
    gemma = w.arch == "gemma3"
    D = w.hp("embedding_length"); L = w.hp("block_count"); H = w.hp("attention.head_count")
    HKV = w.hp("attention.head_count_kv", H); eps = w.hp("attention.layer_norm_rms_epsilon")
    hd = w.hp("attention.key_length", D // H); base = w.hp("rope.freq_base", 10000.0)
    window = w.hp("attention.sliding_window", 0) if gemma else 0
    emb = w("token_embd.weight", np.float32)
    T = len(ids)
    x = emb[ids].astype(np.float64)
    if gemma:
        x *= np.sqrt(D)
    pos = np.arange(T)

    def rms(v, g):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * g

    def rope(v, b):  # v [T, heads, hd]
        inv = 1.0 / b ** (np.arange(0, hd, 2) / hd)
        ang = np.outer(pos, inv)[:, None, :]
        c, s = np.cos(ang), np.sin(ang)
        if gemma:  # NeoX: pairs (i, i + hd/2)
            a, bb = v[..., : hd // 2], v[..., hd // 2:]
            return np.concatenate([a * c - bb * s, a * s + bb * c], -1)
        a, bb = v[..., 0::2], v[..., 1::2]  # GGUF llama: interleaved pairs
        out = np.empty_like(v)
        out[..., 0::2], out[..., 1::2] = a * c - bb * s, a * s + bb * c
        return out

    for il in range(L):
        p = f"blk.{il}."
        local = gemma and (il + 1) % 6 != 0
        h = rms(x, w(p + "attn_norm.weight"))
        q = (h @ w(p + "attn_q.weight").T).reshape(T, H, hd)
        k = (h @ w(p + "attn_k.weight").T).reshape(T, HKV, hd)
        v = (h @ w(p + "attn_v.weight").T).reshape(T, HKV, hd)
        if gemma:
            q, k = rms(q, w(p + "attn_q_norm.weight")), rms(k, w(p + "attn_k_norm.weight"))
        b = 10000.0 if local else base
        q, k = rope(q, b), rope(k, b)
        out = np.zeros((T, H, hd))
        for hh in range(H):
            g = hh // (H // HKV)
            s = q[:, hh] @ k[:, g].T / np.sqrt(hd)
            mask = pos[None, :] > pos[:, None]
            if local:
                mask |= pos[None, :] <= pos[:, None] - window
            s[mask] = -np.inf
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, g]
        o = out.reshape(T, H * hd) @ w(p + "attn_output.weight").T
        if gemma:
            o = rms(o, w(p + "post_attention_norm.weight"))
        x = x + o
        h = rms(x, w(p + "ffn_norm.weight"))
        gt, up = h @ w(p + "ffn_gate.weight").T, h @ w(p + "ffn_up.weight").T
        if gemma:
            a = 0.5 * gt * (1 + np.tanh(np.sqrt(2 / np.pi) * (gt + 0.044715 * gt ** 3)))
        else:
            a = gt / (1 + np.exp(-gt))
        m = (a * up) @ w(p + "ffn_down.weight").T
        if gemma:
            m = rms(m, w(p + "post_ffw_norm.weight"))
        x = x + m
    x = rms(x[-1:], w("output_norm.weight"))
    out = w("output.weight", np.float32)
    head = emb if out is None else out
    return (x @ head.T.astype(np.float64))[0]


CASES = [("SmolLM2-135M-Instruct.Q4_1.gguf", "llamacpp_smollm2.json"),
         ("gemma-3-270m-q4_k_m.gguf", "llamacpp_gemma3_270m.json")]


@pytest.mark.parametrize("model,golden", CASES, ids=["smollm2", "gemma3"])
def test_exact_math_vs_float64(model, golden, tmp_path):
    path = MODELS / model
    if not path.exists():
        pytest.skip(f"{path} missing: run scripts/fetch-models")
    gpath = REPO / "tests" / "golden" / golden
    ids = json.loads(gpath.read_text())["cases"][0]["prompt_ids"] if gpath.exists() else [2, 818, 5279, 529]
    ref = forward(Weights(path), ids)
    results = {}
    for mode, env in (("exact", {"DI_CPU_EXACT": "1"}), ("default", {})):
        dump = tmp_path / f"{mode}.f32"
        p = subprocess.run([BIN, "run", "-m", str(path), "--ids", ",".join(map(str, ids)), "-n", "1", "--temp", "0",
                            "--kv-type", "f32", "--print-ids", "--dump-logits", str(dump)],
                           capture_output=True, timeout=600, env={**os.environ, **env})
        assert p.returncode == 0, p.stderr.decode()
        got = np.fromfile(dump, "<f4").reshape(-1, len(ref))[len(ids) - 1]
        results[mode] = (float(np.abs(got - ref).max()), int(got.argmax()))
    print(f"{model}: vs float64: exact max |diff| {results['exact'][0]:.2e}, "
          f"8-bit activations max |diff| {results['default'][0]:.3f}; logit range {ref.min():.1f}..{ref.max():.1f}")
    assert results["exact"][0] < 2e-3 * max(1.0, float(np.abs(ref).max())), results
    assert results["exact"][1] == int(ref.argmax())
    assert results["default"][1] == int(ref.argmax())
