"""Each architecture descriptor against an independent float64 numpy forward
written from the Hugging Face modeling code's semantics, on tiny random HF
checkpoints: llama, mistral (sliding window on every layer), qwen2 (QKV bias),
qwen3 (QK-norm), gemma3 (embedding scale, (1+w) norms, sandwich norms, GeGLU,
local/global layers with two RoPE bases, query_pre_attn_scalar, soft-capping)."""
import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("DEEPINFER_BIN", str(REPO / "build" / "deepinfer"))

V, D, H, HKV, HD, FF = 160, 64, 4, 2, 16, 96


def write_safetensors(path, tensors):
    hdr, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        hdr[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)  # as safetensors pads it: the f32 data 4-byte aligned where the file is mapped
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_model(d, arch, n_layer, rng, **extra):
    cfg = {"model_type": arch, "hidden_size": D, "intermediate_size": FF, "num_hidden_layers": n_layer,
           "num_attention_heads": H, "num_key_value_heads": HKV, "head_dim": HD, "vocab_size": V,
           "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "tie_word_embeddings": arch == "gemma3_text", "bos_token_id": 1, "eos_token_id": 2}
    cfg.update(extra)
    w = {"model.embed_tokens.weight": rng.normal(0, 0.5, (V, D)),
         "model.norm.weight": rng.normal(1 if arch != "gemma3_text" else 0, 0.1, D)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rng.normal(0, 0.2, (V, D))
    for i in range(n_layer):
        p = f"model.layers.{i}."
        nrm = lambda: rng.normal(1 if arch != "gemma3_text" else 0, 0.1, D)
        w[p + "input_layernorm.weight"] = nrm()
        w[p + "post_attention_layernorm.weight"] = nrm()
        w[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.15, (H * HD, D))
        w[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.15, (HKV * HD, D))
        w[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.15, (HKV * HD, D))
        w[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.15, (D, H * HD))
        w[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.15, (FF, D))
        w[p + "mlp.up_proj.weight"] = rng.normal(0, 0.15, (FF, D))
        w[p + "mlp.down_proj.weight"] = rng.normal(0, 0.15, (D, FF))
        if arch == "qwen2":
            for n, k in (("q", H), ("k", HKV), ("v", HKV)):
                w[p + f"self_attn.{n}_proj.bias"] = rng.normal(0, 0.3, k * HD)
        if arch in ("qwen3", "gemma3_text"):
            w[p + "self_attn.q_norm.weight"] = rng.normal(1 if arch == "qwen3" else 0, 0.1, HD)
            w[p + "self_attn.k_norm.weight"] = rng.normal(1 if arch == "qwen3" else 0, 0.1, HD)
        if arch == "gemma3_text":
            w[p + "pre_feedforward_layernorm.weight"] = nrm()
            w[p + "post_feedforward_layernorm.weight"] = nrm()
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    write_safetensors(d / "model.safetensors", w)
    return cfg, {k: np.asarray(v, np.float64) for k, v in w.items()}


def rms(x, w, eps, gemma):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * (1 + w) if gemma else y * w


def rope(x, pos, base):  # rotate-half, x [T, heads, hd]
    inv = 1.0 / base ** (np.arange(0, HD, 2) / HD)
    ang = np.outer(pos, inv)
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    rot = np.concatenate([-x[..., HD // 2:], x[..., :HD // 2]], -1)
    return x * cos + rot * sin


def reference(cfg, w, ids):
    arch = cfg["model_type"]
    gemma = arch == "gemma3_text"
    T = len(ids)
    eps = cfg["rms_norm_eps"]
    x = w["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * np.sqrt(D)
    pos = np.arange(T)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if gemma:
            local = (i + 1) % 6 != 0
            window = cfg["sliding_window"] if local else None
            base = cfg["rope_local_base_freq"] if local else cfg["rope_theta"]
        else:
            window = cfg.get("sliding_window")
            base = cfg["rope_theta"]
        h = rms(x, w[p + "input_layernorm.weight"], eps, gemma)
        q = h @ w[p + "self_attn.q_proj.weight"].T
        k = h @ w[p + "self_attn.k_proj.weight"].T
        v = h @ w[p + "self_attn.v_proj.weight"].T
        if arch == "qwen2":
            q += w[p + "self_attn.q_proj.bias"]; k += w[p + "self_attn.k_proj.bias"]; v += w[p + "self_attn.v_proj.bias"]
        q, k, v = q.reshape(T, H, HD), k.reshape(T, HKV, HD), v.reshape(T, HKV, HD)
        if arch in ("qwen3", "gemma3_text"):
            q = rms(q, w[p + "self_attn.q_norm.weight"], eps, gemma)
            k = rms(k, w[p + "self_attn.k_norm.weight"], eps, gemma)
        q, k = rope(q, pos, base), rope(k, pos, base)
        scale = cfg.get("query_pre_attn_scalar", HD) ** -0.5
        out = np.zeros((T, H, HD))
        for hh in range(H):
            kv = hh // (H // HKV)
            s = q[:, hh] @ k[:, kv].T * scale
            if cfg.get("attn_logit_softcapping"):
                c = cfg["attn_logit_softcapping"]
                s = c * np.tanh(s / c)
            mask = pos[None, :] > pos[:, None]
            if window:
                mask |= pos[None, :] <= pos[:, None] - window
            s[mask] = -np.inf
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
        o = out.reshape(T, H * HD) @ w[p + "self_attn.o_proj.weight"].T
        if gemma:
            o = rms(o, w[p + "post_attention_layernorm.weight"], eps, True)
            x = x + o
            h = rms(x, w[p + "pre_feedforward_layernorm.weight"], eps, True)
        else:
            x = x + o
            h = rms(x, w[p + "post_attention_layernorm.weight"], eps, False)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        if gemma:
            a = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
        else:
            a = g / (1 + np.exp(-g))
        m = (a * u) @ w[p + "mlp.down_proj.weight"].T
        if gemma:
            m = rms(m, w[p + "post_feedforward_layernorm.weight"], eps, True)
        x = x + m
    x = rms(x, w["model.norm.weight"], eps, gemma)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    logits = x @ head.T
    if cfg.get("final_logit_softcapping"):
        c = cfg["final_logit_softcapping"]
        logits = c * np.tanh(logits / c)
    return logits


ARCHS = {
    "llama": ("llama", 3, {}),
    "mistral": ("mistral", 3, {"sliding_window": 7}),
    "qwen2": ("qwen2", 3, {}),
    "qwen3": ("qwen3", 3, {}),
    "gemma3": ("gemma3_text", 7, {"sliding_window": 6, "rope_local_base_freq": 10000.0, "rope_theta": 1e6,
                                  "query_pre_attn_scalar": 24, "final_logit_softcapping": 30.0,
                                  "attn_logit_softcapping": 50.0}),
}


@pytest.mark.parametrize("name", list(ARCHS))
def test_arch_matches_numpy(name, tmp_path):
    arch, n_layer, extra = ARCHS[name]
    rng = np.random.default_rng(7)
    cfg, w = make_model(tmp_path / name, arch, n_layer, rng, **extra)
    ids = [int(i) for i in rng.integers(3, V, 21)]
    ref = reference(cfg, w, ids)
    dump = tmp_path / "l.f32"
    p = subprocess.run([BIN, "run", "-m", str(tmp_path / name), "--ids", ",".join(map(str, ids)), "-n", "1",
                        "--temp", "0", "--kv-type", "f32", "--print-ids", "--dump-logits", str(dump)],
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    got = np.fromfile(dump, "<f4").reshape(-1, V)[: len(ids)]
    d = np.abs(got - ref).max()
    print(f"{name}: max |diff| vs numpy float64 = {d:.2e} (logit range {ref.min():.1f}..{ref.max():.1f})")
    assert d < 1e-3 * max(1.0, np.abs(ref).max()), f"{name}: max diff {d}"
