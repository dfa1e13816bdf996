#!/usr/bin/env python3
"""Deterministic generator for the tiny DeepSeek-V4 test models (numpy only).

Writes a Hugging Face directory (config.json + model.safetensors, F32) with
DeepSeek's own tensor names (layers.N.attn.wq_a.weight, ...: what the released
checkpoints use and what transformers' conversion mapping reads), so CI can
rebuild the checkpoint without torch; tests/golden/make_goldens_deepseek_v4.py
runs transformers on the same directory and commits only the logits.

Weights are at unit scale (linear: z / sqrt(fan_in); embeddings, sinks,
position biases: z; norms 1 + 0.1 z; biases 0.5 z) so that routing, sinks,
compression gates and rope move the logits far above float noise.

Usage: gen_tiny.py --out DIR [--config NAME,NAME|all]  (default tiny,flashratio,tiny-bf16)
"""
import argparse
import json
import math
import os
import struct

import numpy as np

CONFIGS = {
    # every layer type, hash + routed MoE, hc_mult 4, window 16, rates 4 and 16, top-k 4
    "tiny": dict(
        seed=380001,
        vocab_size=128, hidden_size=64, num_attention_heads=4, head_dim=32, q_lora_rank=32,
        partial_rotary_factor=0.25, o_groups=2, o_lora_rank=16, n_routed_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=32, index_n_heads=16, index_head_dim=16,
        index_topk=4, sliding_window=16, compress_rates={"compressed_sparse_attention": 4,
                                                         "heavily_compressed_attention": 16},
        hc_mult=4, hc_sinkhorn_iters=20, swiglu_limit=2.0, routed_scaling_factor=1.5,
        layer_types=["sliding_attention", "compressed_sparse_attention",
                     "heavily_compressed_attention", "compressed_sparse_attention"],
        mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"],
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                      "beta_fast": 32, "beta_slow": 1},
        max_position_embeddings=4096,
    ),
    # V4-Flash's real ratios: window 128, rates 4 and 128
    "flashratio": dict(
        seed=380002,
        vocab_size=128, hidden_size=64, num_attention_heads=4, head_dim=32, q_lora_rank=32,
        partial_rotary_factor=0.25, o_groups=2, o_lora_rank=16, n_routed_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=32, index_n_heads=16, index_head_dim=16,
        index_topk=8, sliding_window=128, compress_rates={"compressed_sparse_attention": 4,
                                                          "heavily_compressed_attention": 128},
        hc_mult=4, hc_sinkhorn_iters=20, swiglu_limit=2.0, routed_scaling_factor=1.5,
        layer_types=["compressed_sparse_attention", "heavily_compressed_attention",
                     "sliding_attention"],
        mlp_layer_types=["hash_moe", "moe", "moe"],
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_scaling={"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 256,
                      "beta_fast": 32, "beta_slow": 1},
        max_position_embeddings=8192,
    ),
}
# the serving-engine test's model: tiny's structure with DeepSeek-V3's 129280-token
# vocabulary, so a real tokenizer drives it (tests/e2e/test_deepseek_v4_engine.py)
CONFIGS["engine"] = dict(CONFIGS["tiny"], seed=380003, vocab_size=129280)
# tiny's weights rounded to BF16 (round to nearest even; tid2eid stays I64)
CONFIGS["tiny-bf16"] = dict(CONFIGS["tiny"], bf16=True)
# tiny (the same main weights: its tensors come first from the same seed) with a
# multi-token-prediction block under DeepSeek's mtp.0.* names: sliding-window
# attention, routed MoE, its own hyper head and norm (make_goldens_deepseek_v4_mtp.py)
CONFIGS["tiny-mtp"] = dict(CONFIGS["tiny"], mtp=True)
# bad input for the loader: the config counts an MTP layer but the weights are gone (loads
# without a module, as transformers-saved checkpoints are), or one of them is (an error)
CONFIGS["tiny-mtp-absent"] = dict(CONFIGS["tiny"], mtp="absent")
CONFIGS["tiny-mtp-partial"] = dict(CONFIGS["tiny"], mtp="partial")
# the engine model with an MTP block (tests/e2e/test_spec_mtp_deepseek_v4.py)
CONFIGS["engine-mtp"] = dict(CONFIGS["engine"], mtp=True)


def to_bf16(a):
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def layer_specs(c, p, lt, mt):
    """One decoder block's tensors under prefix p (layers.N. or mtp.0.)."""
    D, H, hd, QL = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    N, E, F, K = c["hc_mult"], c["n_routed_experts"], c["moe_intermediate_size"], c["num_experts_per_tok"]
    V = c["vocab_size"]
    g, r, ih, ihd = c["o_groups"], c["o_lora_rank"], c["index_n_heads"], c["index_head_dim"]
    mix = (2 + N) * N
    s = []
    s += [(p + "hc_attn_fn", (mix, N * D), "linear"), (p + "hc_attn_base", (mix,), "bias"),
          (p + "hc_attn_scale", (3,), "norm"), (p + "attn_norm.weight", (D,), "norm"),
          (p + "attn.wq_a.weight", (QL, D), "linear"), (p + "attn.q_norm.weight", (QL,), "norm"),
          (p + "attn.wq_b.weight", (H * hd, QL), "linear"), (p + "attn.wkv.weight", (hd, D), "linear"),
          (p + "attn.kv_norm.weight", (hd,), "norm"),
          (p + "attn.wo_a.weight", (g * r, H * hd // g), "linear"), (p + "attn.wo_b.weight", (D, g * r), "linear"),
          (p + "attn.attn_sink", (H,), "unit")]
    if lt != "sliding_attention":
        rate = c["compress_rates"][lt]
        w = 2 * hd if lt == "compressed_sparse_attention" else hd
        s += [(p + "attn.compressor.wkv.weight", (w, D), "linear"),
              (p + "attn.compressor.wgate.weight", (w, D), "linear"),
              (p + "attn.compressor.ape", (rate, w), "unit"),
              (p + "attn.compressor.norm.weight", (hd,), "norm")]
    if lt == "compressed_sparse_attention":
        rate = c["compress_rates"][lt]
        s += [(p + "attn.indexer.compressor.wkv.weight", (2 * ihd, D), "linear"),
              (p + "attn.indexer.compressor.wgate.weight", (2 * ihd, D), "linear"),
              (p + "attn.indexer.compressor.ape", (rate, 2 * ihd), "unit"),
              (p + "attn.indexer.compressor.norm.weight", (ihd,), "norm"),
              (p + "attn.indexer.wq_b.weight", (ih * ihd, QL), "linear"),
              (p + "attn.indexer.weights_proj.weight", (ih, D), "linear")]
    s += [(p + "hc_ffn_fn", (mix, N * D), "linear"), (p + "hc_ffn_base", (mix,), "bias"),
          (p + "hc_ffn_scale", (3,), "norm"), (p + "ffn_norm.weight", (D,), "norm"),
          (p + "ffn.gate.weight", (E, D), "linear")]
    s += [(p + "ffn.gate.tid2eid", (V, K), "tid2eid")] if mt == "hash_moe" else [(p + "ffn.gate.bias", (E,), "bias")]
    for e in range(E):
        s += [(p + f"ffn.experts.{e}.w1.weight", (F, D), "linear"), (p + f"ffn.experts.{e}.w2.weight", (D, F), "linear"),
              (p + f"ffn.experts.{e}.w3.weight", (F, D), "linear")]
    s += [(p + "ffn.shared_experts.w1.weight", (F, D), "linear"), (p + "ffn.shared_experts.w2.weight", (D, F), "linear"),
          (p + "ffn.shared_experts.w3.weight", (F, D), "linear")]
    return s


def tensor_specs(c):
    """(name, shape, kind) in file order; kind: embed linear norm bias unit scale tid2eid."""
    V, D, N = c["vocab_size"], c["hidden_size"], c["hc_mult"]
    s = [("embed.weight", (V, D), "embed")]
    for i, (lt, mt) in enumerate(zip(c["layer_types"], c["mlp_layer_types"])):
        s += layer_specs(c, f"layers.{i}.", lt, mt)
    s += [("norm.weight", (D,), "norm"), ("hc_head_fn", (N, N * D), "linear"), ("hc_head_base", (N,), "bias"),
          ("hc_head_scale", (1,), "norm"), ("head.weight", (V, D), "linear")]
    if c.get("mtp") in (True, "partial"):
        s += [("mtp.0.e_proj.weight", (D, D), "linear")]
        s += [("mtp.0.h_proj.weight", (D, D), "linear")] if c["mtp"] is True else []
        s += [
              ("mtp.0.enorm.weight", (D,), "norm"), ("mtp.0.hnorm.weight", (D,), "norm"),
              ("mtp.0.norm.weight", (D,), "norm"), ("mtp.0.hc_head_fn", (N, N * D), "linear"),
              ("mtp.0.hc_head_base", (N,), "bias"), ("mtp.0.hc_head_scale", (1,), "norm")]
        s += layer_specs(c, "mtp.0.", "sliding_attention", "moe")
    return s


def generate(c):
    rng = np.random.Generator(np.random.PCG64(c["seed"]))
    out = []
    for name, shape, kind in tensor_specs(c):
        if kind == "tid2eid":
            # distinct experts per token, as a hash table would give
            E = c["n_routed_experts"]
            a = np.stack([rng.permutation(E)[: shape[1]] for _ in range(shape[0])]).astype(np.int64)
            out.append((name, a))
            continue
        z = rng.standard_normal(size=shape)
        if kind == "linear": w = z / math.sqrt(shape[1])
        elif kind == "norm": w = 1.0 + 0.1 * z
        elif kind == "bias": w = 0.5 * z
        else: w = z
        out.append((name, w.astype(np.float32)))
    return out


def write_safetensors(path, tensors):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, a in tensors:
        n = a.nbytes
        dt = {np.dtype(np.int64): "I64", np.dtype(np.uint16): "BF16"}.get(a.dtype, "F32")
        header[name] = {"dtype": dt, "shape": list(a.shape),
                        "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, a in tensors:
            f.write(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())


def config_json(c):
    keys = ["vocab_size", "hidden_size", "num_attention_heads", "head_dim", "q_lora_rank", "partial_rotary_factor",
            "o_groups", "o_lora_rank", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
            "index_n_heads", "index_head_dim", "index_topk", "sliding_window", "compress_rates", "hc_mult",
            "hc_sinkhorn_iters", "swiglu_limit", "routed_scaling_factor", "layer_types", "mlp_layer_types",
            "rope_theta", "compress_rope_theta", "rope_scaling", "max_position_embeddings"]
    j = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
         "torch_dtype": "bfloat16" if c.get("bf16") else "float32",
         "num_hidden_layers": len(c["layer_types"]), "num_key_value_heads": 1, "n_shared_experts": 1,
         "scoring_func": "sqrtsoftplus", "norm_topk_prob": True, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
         "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1,
         "num_nextn_predict_layers": 1 if c.get("mtp") else 0}
    j.update({k: c[k] for k in keys})
    return j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default="tiny,flashratio,tiny-bf16", help="comma-separated names, or all")
    a = ap.parse_args()
    for name, c in CONFIGS.items():
        if a.config != "all" and name not in a.config.split(","): continue
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        ts = generate(c)
        if c.get("bf16"): ts = [(n, to_bf16(a) if a.dtype == np.float32 else a) for n, a in ts]
        write_safetensors(os.path.join(d, "model.safetensors.tmp"), ts)
        os.replace(os.path.join(d, "model.safetensors.tmp"), os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config_json(c), f, indent=1)
        print(d)


if __name__ == "__main__":
    main()
