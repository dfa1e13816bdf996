"""Tiny random Hugging Face checkpoints, made with numpy alone so that CI
rebuilds exactly the weights that make_goldens_configs.py gave transformers.

Weights are at unit scale (embeddings N(0, 1), projections N(0, 1/fan_in),
norms near 1): with the usual 0.02 init every attention score is ~0 and
RoPE, windows and scaling would not move the logits."""
import json
import struct
from pathlib import Path

import numpy as np

V, D, H, HKV, HD, FF = 96, 64, 4, 2, 16, 96


def text_config(cfg):
    return cfg.get("text_config", cfg)


def make_weights(cfg, seed):
    """name -> float32 array for a llama / mistral / qwen2 / qwen3 / gemma3 config
    (either spelling); the order of draws is fixed by the names below."""
    c = text_config(cfg)
    arch = c["model_type"]
    gemma = arch.startswith("gemma3")
    rng = np.random.default_rng(seed)
    d, v, ff = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    h, hkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    tied = c.get("tie_word_embeddings", gemma)

    def lin(rows, cols):
        return rng.normal(0, 1 / np.sqrt(cols), (rows, cols))

    def norm(n):  # gemma stores w - 1
        return rng.normal(0 if gemma else 1, 0.1, n)

    w = {"model.embed_tokens.weight": rng.normal(0, 1, (v, d)), "model.norm.weight": norm(d)}
    if not tied:
        w["lm_head.weight"] = lin(v, d)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        w[p + "self_attn.q_proj.weight"] = lin(h * hd, d)
        w[p + "self_attn.k_proj.weight"] = lin(hkv * hd, d)
        w[p + "self_attn.v_proj.weight"] = lin(hkv * hd, d)
        w[p + "self_attn.o_proj.weight"] = lin(d, h * hd)
        w[p + "mlp.gate_proj.weight"] = lin(ff, d)
        w[p + "mlp.up_proj.weight"] = lin(ff, d)
        w[p + "mlp.down_proj.weight"] = lin(d, ff)
        if arch == "qwen2":
            for n, k in (("q", h), ("k", hkv), ("v", hkv)):
                w[p + f"self_attn.{n}_proj.bias"] = rng.normal(0, 0.5, k * hd)
        if arch == "qwen3" or gemma:
            w[p + "self_attn.q_norm.weight"] = rng.normal(0 if gemma else 1, 0.1, hd)
            w[p + "self_attn.k_norm.weight"] = rng.normal(0 if gemma else 1, 0.1, hd)
        if gemma:
            w[p + "pre_feedforward_layernorm.weight"] = norm(d)
            w[p + "post_feedforward_layernorm.weight"] = norm(d)
    return {k: np.asarray(a, np.float32) for k, a in w.items()}


def write_safetensors(path, tensors):
    hdr, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        hdr[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_checkpoint(d, config_text, seed):
    """A model directory from the exact config.json text and the weight seed."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(config_text)
    write_safetensors(d / "model.safetensors", make_weights(json.loads(config_text), seed))
    return d
