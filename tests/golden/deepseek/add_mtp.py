#!/usr/bin/env python3
"""Adds a DeepSeek-V3 multi-token-prediction (MTP) module to a tiny DeepSeek-V3 checkpoint.

    python3 add_mtp.py SRC_DIR DST_DIR

SRC_DIR holds config.json and model.safetensors (F32) as made by
../shared/data/models/deepseek-v3-tiny/make/gen_weights.py (v3). DST_DIR gets the same tensors
plus layer num_hidden_layers' MTP module under the names of DeepSeek-V3's checkpoints
(model.layers.N.{enorm,hnorm,eh_proj,shared_head.norm,shared_head.head} and a full decoder
block: MLA attention and an MoE feed-forward), and config.json with num_nextn_predict_layers = 1.
Random weights by the generator's rules (unit-scale activations): linear [out, in] z/sqrt(in),
RMSNorm 1 + 0.1 z, e_score_correction_bias 0.1 z, from numpy's PCG64 with seed 1618033988, in
the order written below. Only numpy is needed; the output depends only on the RNG stream.
Other files of SRC_DIR (tokenizer) are symlinked."""
import json
import struct
import sys
from pathlib import Path

import numpy as np

SEED = 1618033988


def read_safetensors(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], body[b:e])
    return out


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def mtp_tensors(cfg):
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    nope, rope, vh = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    ql, kvl = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    E, F, V = cfg["n_routed_experts"], cfg["moe_intermediate_size"], cfg["vocab_size"]
    Fs = cfg["n_shared_experts"] * F
    p = f"model.layers.{cfg['num_hidden_layers']}."
    spec = [("enorm.weight", [D], "norm"), ("hnorm.weight", [D], "norm"), ("eh_proj.weight", [D, 2 * D], "lin"),
            ("input_layernorm.weight", [D], "norm"),
            ("self_attn.q_a_proj.weight", [ql, D], "lin"), ("self_attn.q_a_layernorm.weight", [ql], "norm"),
            ("self_attn.q_b_proj.weight", [H * (nope + rope), ql], "lin"),
            ("self_attn.kv_a_proj_with_mqa.weight", [kvl + rope, D], "lin"),
            ("self_attn.kv_a_layernorm.weight", [kvl], "norm"),
            ("self_attn.kv_b_proj.weight", [H * (nope + vh), kvl], "lin"),
            ("self_attn.o_proj.weight", [D, H * vh], "lin"), ("post_attention_layernorm.weight", [D], "norm"),
            ("mlp.gate.weight", [E, D], "lin"), ("mlp.gate.e_score_correction_bias", [E], "bias")]
    for e in range(E):
        spec += [(f"mlp.experts.{e}.gate_proj.weight", [F, D], "lin"), (f"mlp.experts.{e}.up_proj.weight", [F, D], "lin"),
                 (f"mlp.experts.{e}.down_proj.weight", [D, F], "lin")]
    spec += [("mlp.shared_experts.gate_proj.weight", [Fs, D], "lin"), ("mlp.shared_experts.up_proj.weight", [Fs, D], "lin"),
             ("mlp.shared_experts.down_proj.weight", [D, Fs], "lin"),
             ("shared_head.norm.weight", [D], "norm"), ("shared_head.head.weight", [V, D], "lin")]
    rng = np.random.Generator(np.random.PCG64(SEED))
    out = {}
    for name, shape, kind in spec:
        z = rng.standard_normal(size=shape)
        w = z / np.sqrt(shape[1]) if kind == "lin" else (1 + 0.1 * z if kind == "norm" else 0.1 * z)
        out[p + name] = ("F32", shape, w.astype("<f4").tobytes())
    return out


def main():
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    cfg = json.loads((src / "config.json").read_text())
    dst.mkdir(parents=True, exist_ok=True)
    tensors = read_safetensors(src / "model.safetensors")
    tensors.update(mtp_tensors(cfg))
    write_safetensors(dst / "model.safetensors", tensors)
    cfg["num_nextn_predict_layers"] = 1
    (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for f in src.iterdir():
        if f.name not in ("config.json", "model.safetensors") and not (dst / f.name).exists():
            (dst / f.name).symlink_to(f.resolve())


if __name__ == "__main__":
    main()
