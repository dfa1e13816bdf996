#!/usr/bin/env python3
"""Writes GGUF files of the tiny DeepSeek-V3 model (deepseek-v3-tiny's gen_weights.py
output) with the metadata keys and tensor layout llama.cpp's convert_hf_to_gguf.py
writes for `deepseek2` (kv_b_proj split into attn_k_b, transposed per head, and
attn_v_b; routed experts stacked into 3-D tensors), using the gguf package only.

  make_gguf.py MODEL_DIR OUT_DIR   -> OUT_DIR/v3-f32.gguf, OUT_DIR/v3-q8_0.gguf, OUT_DIR/v3-q8_0-kvb.gguf
  make_gguf.py MODEL_DIR OUT_DIR FILE  -> OUT_DIR/FILE, F32 only
(q8_0: every 2-D/3-D matrix except the embedding in Q8_0 where its rows are whole
blocks: attn_v_b is, attn_k_b's rows of qk_nope_head_dim 16 stay F32; q8_0-kvb: the
same with kv_b_proj unsplit, one Q8_0 attn_kv_b as older converters wrote it). A model with an MTP module
(add_mtp.py) gets it as block num_hidden_layers with nextn_predict_layers. The files carry
no vocabulary: tests load them with the model loader, not the tokenizer."""
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf


def load_safetensors(path):
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        assert t["dtype"] == "F32", t["dtype"]
        out[name] = np.frombuffer(raw[base + a:base + b], dtype=np.float32).reshape(t["shape"])
    return out


def write(model_dir, out, quant, split_kvb=True):
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    w = load_safetensors(Path(model_dir) / "model.safetensors")
    H, nope, vd, kvl = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    rope = cfg["qk_rope_head_dim"]
    g = gguf.GGUFWriter(str(out), "deepseek2")
    a = "deepseek2"
    nextn = cfg.get("num_nextn_predict_layers", 0)  # MTP layers follow the main ones (add_mtp.py)
    g.add_uint32(f"{a}.block_count", cfg["num_hidden_layers"] + nextn)
    if nextn:
        g.add_uint32(f"{a}.nextn_predict_layers", nextn)
    g.add_uint32(f"{a}.context_length", cfg["max_position_embeddings"])
    g.add_uint32(f"{a}.embedding_length", cfg["hidden_size"])
    g.add_uint32(f"{a}.feed_forward_length", cfg["intermediate_size"])
    g.add_uint32(f"{a}.attention.head_count", H)
    g.add_uint32(f"{a}.attention.head_count_kv", 1)
    g.add_float32(f"{a}.rope.freq_base", cfg["rope_theta"])
    g.add_float32(f"{a}.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    rs = cfg.get("rope_scaling")
    if rs:
        g.add_string(f"{a}.rope.scaling.type", "yarn")
        g.add_float32(f"{a}.rope.scaling.factor", rs["factor"])
        g.add_uint32(f"{a}.rope.scaling.original_context_length", rs["original_max_position_embeddings"])
        g.add_float32(f"{a}.rope.scaling.yarn_beta_fast", rs["beta_fast"])
        g.add_float32(f"{a}.rope.scaling.yarn_beta_slow", rs["beta_slow"])
        g.add_float32(f"{a}.rope.scaling.yarn_log_multiplier", 0.1 * rs["mscale_all_dim"])
    g.add_uint32(f"{a}.expert_count", cfg["n_routed_experts"])
    g.add_uint32(f"{a}.expert_used_count", cfg["num_experts_per_tok"])
    g.add_uint32(f"{a}.expert_group_count", cfg["n_group"])
    g.add_uint32(f"{a}.expert_group_used_count", cfg["topk_group"])
    g.add_uint32(f"{a}.expert_gating_func", 2 if cfg["scoring_func"] == "sigmoid" else 1)
    g.add_uint32(f"{a}.attention.key_length", kvl + rope)
    g.add_uint32(f"{a}.attention.value_length", kvl)
    g.add_uint32(f"{a}.leading_dense_block_count", cfg["first_k_dense_replace"])
    g.add_uint32(f"{a}.vocab_size", cfg["vocab_size"])
    if cfg.get("q_lora_rank"):
        g.add_uint32(f"{a}.attention.q_lora_rank", cfg["q_lora_rank"])
    g.add_uint32(f"{a}.attention.kv_lora_rank", kvl)
    g.add_uint32(f"{a}.attention.key_length_mla", nope + rope)
    g.add_uint32(f"{a}.attention.value_length_mla", vd)
    g.add_uint32(f"{a}.expert_feed_forward_length", cfg["moe_intermediate_size"])
    g.add_uint32(f"{a}.expert_shared_count", cfg["n_shared_experts"])
    g.add_float32(f"{a}.expert_weights_scale", cfg["routed_scaling_factor"])
    g.add_bool(f"{a}.expert_weights_norm", bool(cfg["norm_topk_prob"]))
    g.add_uint32(f"{a}.rope.dimension_count", rope)

    def put(name, t, q=False):
        t = np.ascontiguousarray(t, dtype=np.float32)
        if q and quant and t.ndim >= 2 and t.shape[-1] % 32 == 0:
            data = gguf.quants.quantize(t, gguf.GGMLQuantizationType.Q8_0)
            g.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            g.add_tensor(name, t)

    put("token_embd.weight", w["model.embed_tokens.weight"])
    put("output_norm.weight", w["model.norm.weight"])
    put("output.weight", w["lm_head.weight"], True)
    names = {"q_a_proj": "attn_q_a", "q_a_layernorm": "attn_q_a_norm", "q_b_proj": "attn_q_b", "q_proj": "attn_q",
             "kv_a_proj_with_mqa": "attn_kv_a_mqa", "kv_a_layernorm": "attn_kv_a_norm", "o_proj": "attn_output"}
    for i in range(cfg["num_hidden_layers"] + nextn):
        p = f"model.layers.{i}."
        if i >= cfg["num_hidden_layers"]:  # llama.cpp's names for the MTP module's own tensors
            for hf, gg in (("enorm", "enorm"), ("hnorm", "hnorm"), ("eh_proj", "eh_proj"),
                           ("shared_head.norm", "shared_head_norm"), ("shared_head.head", "shared_head_head")):
                put(f"blk.{i}.nextn.{gg}.weight", w[p + hf + ".weight"], hf.endswith("proj") or hf.endswith("head"))
        put(f"blk.{i}.attn_norm.weight", w[p + "input_layernorm.weight"])
        put(f"blk.{i}.ffn_norm.weight", w[p + "post_attention_layernorm.weight"])
        for hf, gg in names.items():
            if p + f"self_attn.{hf}.weight" in w:
                put(f"blk.{i}.{gg}.weight", w[p + f"self_attn.{hf}.weight"], True)
        if not split_kvb:
            put(f"blk.{i}.attn_kv_b.weight", w[p + "self_attn.kv_b_proj.weight"], True)
        else:
            kvb = w[p + "self_attn.kv_b_proj.weight"].reshape(H, nope + vd, kvl)
            put(f"blk.{i}.attn_k_b.weight", kvb[:, :nope, :].transpose(0, 2, 1), True)  # [H][kvl][nope]
            put(f"blk.{i}.attn_v_b.weight", kvb[:, nope:, :], True)                    # [H][vd][kvl]
        if p + "mlp.gate.weight" in w:
            put(f"blk.{i}.ffn_gate_inp.weight", w[p + "mlp.gate.weight"])
            if p + "mlp.gate.e_score_correction_bias" in w:
                put(f"blk.{i}.exp_probs_b.bias", w[p + "mlp.gate.e_score_correction_bias"])
            for hf, gg in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
                stack = np.stack([w[p + f"mlp.experts.{e}.{hf}.weight"] for e in range(cfg["n_routed_experts"])])
                put(f"blk.{i}.ffn_{gg}_exps.weight", stack, True)
                put(f"blk.{i}.ffn_{gg}_shexp.weight", w[p + f"mlp.shared_experts.{hf}.weight"], True)
        else:
            for hf, gg in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
                put(f"blk.{i}.ffn_{gg}.weight", w[p + f"mlp.{hf}.weight"], True)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


if __name__ == "__main__":
    model_dir, out_dir = sys.argv[1], Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    forms = ((False, True, "v3-f32.gguf"), (True, True, "v3-q8_0.gguf"), (True, False, "v3-q8_0-kvb.gguf"))
    if len(sys.argv) > 3:  # one F32 file of that name (any deepseek_v2/v3 directory)
        forms = ((False, True, sys.argv[3]),)
    for quant, split, name in forms:
        tmp = out_dir / (name + ".tmp")
        write(model_dir, tmp, quant, split)
        tmp.rename(out_dir / name)
