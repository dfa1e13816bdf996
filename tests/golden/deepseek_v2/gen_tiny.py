#!/usr/bin/env python3
"""Tiny random-weight DeepSeek-V2 checkpoints (numpy only) for the transformers goldens.

  gen_tiny.py --out DIR [--config a,b|all]   -> DIR/<name>/{config.json, model.safetensors}

The same seed gives the same bytes, so tests regenerate the models and compare with the
committed goldens (tests/golden/deepseek_v2/<name>.json + .logits.f32, written by
tests/golden/make_goldens_deepseek_v2.py from transformers' deepseek_v2). Weights are
unit-scale (linear: N(0,1)/sqrt(fan_in); norms 1 + 0.1 N(0,1)), so activations keep O(1)
size through the layers and every block contributes to the logits. Tensor names are the
checkpoints' own (per-expert mlp.experts.E.*), as DeepSeek ships them.

The configs cover what the shared deepseek-v3-tiny models do not: deepseek_v2 with and
without q_lora_rank, RoPE with and without YaRN, greedy and group-limited routing, and no
normalization of the top-k weights (transformers' deepseek_v2 router does not normalize)."""
import argparse
import json
import math
import os
import struct

import numpy as np

BASE = dict(vocab_size=512, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
            num_attention_heads=4, n_shared_experts=1, n_routed_experts=8, num_experts_per_tok=2,
            first_k_dense_replace=1, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
            rope_theta=10000.0, max_position_embeddings=512, rms_norm_eps=1e-6, norm_topk_prob=False)
CONFIGS = {
    # q_lora path (q_a_proj -> q_a_layernorm -> q_b_proj), plain RoPE, greedy softmax top-k
    "qlora": dict(BASE, seed=20001, q_lora_rank=24, topk_method="greedy", n_group=1, topk_group=1,
                  routed_scaling_factor=1.0),
    # direct q_proj, plain RoPE, group-limited greedy routing with a routed scale
    "noqlora": dict(BASE, seed=20002, q_lora_rank=None, topk_method="group_limited_greedy", n_group=4, topk_group=2,
                    routed_scaling_factor=2.0),
    # YaRN past a 32-token original context, with mscale != mscale_all_dim so that both the
    # cos/sin factor (their ratio) and the softmax scale (mscale_all_dim's) move the logits
    "yarn": dict(BASE, seed=20003, q_lora_rank=24, topk_method="greedy", n_group=1, topk_group=1,
                 routed_scaling_factor=1.0, max_position_embeddings=256,
                 rope_scaling={"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32,
                               "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8}),
    # V2-Lite's YaRN (mscale = mscale_all_dim = 0.707, all a GGUF can say: its yarn_log_multiplier),
    # direct q_proj and group-limited routing; the test also runs its GGUF form
    "yarn707": dict(BASE, seed=20004, q_lora_rank=None, topk_method="group_limited_greedy", n_group=4, topk_group=2,
                    routed_scaling_factor=2.0, max_position_embeddings=256,
                    rope_scaling={"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32,
                                  "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}),
}


def tensor_specs(c):
    """(name, shape, kind) in file order; kind: embed linear norm."""
    V, D, H, F = c["vocab_size"], c["hidden_size"], c["num_attention_heads"], c["intermediate_size"]
    nope, rope, vd, kvl, ql = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"], c["q_lora_rank"]
    E, FE = c["n_routed_experts"], c["moe_intermediate_size"]
    FS = FE * c["n_shared_experts"]
    s = [("model.embed_tokens.weight", (V, D), "embed")]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s += [(p + "input_layernorm.weight", (D,), "norm")]
        if ql:
            s += [(p + "self_attn.q_a_proj.weight", (ql, D), "linear"), (p + "self_attn.q_a_layernorm.weight", (ql,), "norm"),
                  (p + "self_attn.q_b_proj.weight", (H * (nope + rope), ql), "linear")]
        else:
            s += [(p + "self_attn.q_proj.weight", (H * (nope + rope), D), "linear")]
        s += [(p + "self_attn.kv_a_proj_with_mqa.weight", (kvl + rope, D), "linear"),
              (p + "self_attn.kv_a_layernorm.weight", (kvl,), "norm"),
              (p + "self_attn.kv_b_proj.weight", (H * (nope + vd), kvl), "linear"),
              (p + "self_attn.o_proj.weight", (D, H * vd), "linear"),
              (p + "post_attention_layernorm.weight", (D,), "norm")]
        if i < c["first_k_dense_replace"]:
            s += [(p + "mlp.gate_proj.weight", (F, D), "linear"), (p + "mlp.up_proj.weight", (F, D), "linear"),
                  (p + "mlp.down_proj.weight", (D, F), "linear")]
            continue
        s += [(p + "mlp.gate.weight", (E, D), "linear")]
        for e in range(E):
            s += [(p + f"mlp.experts.{e}.gate_proj.weight", (FE, D), "linear"),
                  (p + f"mlp.experts.{e}.up_proj.weight", (FE, D), "linear"),
                  (p + f"mlp.experts.{e}.down_proj.weight", (D, FE), "linear")]
        s += [(p + "mlp.shared_experts.gate_proj.weight", (FS, D), "linear"),
              (p + "mlp.shared_experts.up_proj.weight", (FS, D), "linear"),
              (p + "mlp.shared_experts.down_proj.weight", (D, FS), "linear")]
    s += [("model.norm.weight", (D,), "norm"), ("lm_head.weight", (V, D), "linear")]
    return s


def generate(c):
    rng = np.random.Generator(np.random.PCG64(c["seed"]))
    out = []
    for name, shape, kind in tensor_specs(c):
        z = rng.standard_normal(size=shape)
        if kind == "linear": w = z / math.sqrt(shape[1])
        elif kind == "norm": w = 1.0 + 0.1 * z
        else: w = z
        out.append((name, w.astype(np.float32)))
    return out


def write_safetensors(path, tensors):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, a in tensors:
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, a in tensors:
            f.write(np.ascontiguousarray(a).astype("<f4").tobytes())


def config_json(c):
    j = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "torch_dtype": "float32",
         "num_key_value_heads": c["num_attention_heads"], "hidden_act": "silu", "tie_word_embeddings": False,
         "attention_bias": False, "bos_token_id": 0, "eos_token_id": 1, "moe_layer_freq": 1,
         "scoring_func": "softmax", "aux_loss_alpha": 0.0, "rope_scaling": None}
    j.update({k: v for k, v in c.items() if k != "seed"})
    return j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default="all", help="comma-separated names, or all")
    a = ap.parse_args()
    for name, c in CONFIGS.items():
        if a.config != "all" and name not in a.config.split(","): continue
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        write_safetensors(os.path.join(d, "model.safetensors.tmp"), generate(c))
        os.replace(os.path.join(d, "model.safetensors.tmp"), os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config_json(c), f, indent=1)
        print(d)


if __name__ == "__main__":
    main()
