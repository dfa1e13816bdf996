#!/usr/bin/env python3
"""Numpy writer of DeepSeek-V4 GGUF files in llama.cpp's layout (numpy + gguf only).

llama.cpp's converter (conversion/deepseek.py DeepseekV4Model) needs torch and DeepSeek's
FP4 release checkpoints, so CI cannot run it. This writes what it writes: the same
general.architecture ("deepseek4"), keys, key types, tensor names, shapes and types,
checked against one real conversion (llamacpp_layout_flashratio.json, made by
make_llamacpp_layout.py). Routed experts are MXFP4 as in every converted file (the
release stores them in FP4): `experts="MXFP4"` rounds them to it here and
`same_weights()` gives the checkpoint's tensors with the experts as the GGUF holds them,
so the Hugging Face directory and the GGUF carry identical weights.

Used by tests/e2e/test_deepseek_v4_gguf.py and bench/gen_random_gguf_dsv4.py.

  to_gguf.py --hf DIR --out FILE.gguf [--matrices F32|BF16|Q8_0] [--experts MXFP4|Q8_0|F32]
             [--same-weights-dir DIR]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

ARCH = "deepseek4"
ROOT = {"embed.weight": "token_embd.weight", "norm.weight": "output_norm.weight", "head.weight": "output.weight",
        "hc_head_fn": "output_hc_fn.weight", "hc_head_base": "output_hc_base.weight",
        "hc_head_scale": "output_hc_scale.weight"}
LAYER = {
    "hc_attn_fn": "hc_attn_fn.weight", "hc_attn_base": "hc_attn_base.weight", "hc_attn_scale": "hc_attn_scale.weight",
    "hc_ffn_fn": "hc_ffn_fn.weight", "hc_ffn_base": "hc_ffn_base.weight", "hc_ffn_scale": "hc_ffn_scale.weight",
    "attn.attn_sink": "attn_sinks.weight", "attn.wq_a.weight": "attn_q_a.weight", "attn.wq_b.weight": "attn_q_b.weight",
    "attn.q_norm.weight": "attn_q_a_norm.weight", "attn.wkv.weight": "attn_kv.weight",
    "attn.kv_norm.weight": "attn_kv_a_norm.weight", "attn.wo_a.weight": "attn_output_a.weight",
    "attn.wo_b.weight": "attn_output_b.weight", "attn.compressor.ape": "attn_compressor_ape.weight",
    "attn.compressor.wkv.weight": "attn_compressor_kv.weight", "attn.compressor.wgate.weight": "attn_compressor_gate.weight",
    "attn.compressor.norm.weight": "attn_compressor_norm.weight", "attn.indexer.wq_b.weight": "indexer.attn_q_b.weight",
    "attn.indexer.weights_proj.weight": "indexer.proj.weight",
    "attn.indexer.compressor.ape": "indexer_compressor_ape.weight",
    "attn.indexer.compressor.wkv.weight": "indexer_compressor_kv.weight",
    "attn.indexer.compressor.wgate.weight": "indexer_compressor_gate.weight",
    "attn.indexer.compressor.norm.weight": "indexer_compressor_norm.weight",
    "attn_norm.weight": "attn_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
    "ffn.gate.weight": "ffn_gate_inp.weight", "ffn.gate.bias": "exp_probs_b.bias",
    "ffn.gate.tid2eid": "ffn_gate_tid2eid.weight", "ffn.shared_experts.w1.weight": "ffn_gate_shexp.weight",
    "ffn.shared_experts.w2.weight": "ffn_down_shexp.weight", "ffn.shared_experts.w3.weight": "ffn_up_shexp.weight",
}
EXPERTS = {"w1": "ffn_gate_exps.weight", "w2": "ffn_down_exps.weight", "w3": "ffn_up_exps.weight"}
# ggml's kvalues_mxfp4: E2M1 codes as integers, value = kv * 2^(e - 128)
KV = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float32)


def mxfp4_blocks(w):
    """w [..., cols] float -> ggml block_mxfp4 bytes [..., cols / 32 * 17] (scale byte, 16 code bytes:
    byte j = code j | code j + 16 << 4). Round to nearest code; the block scale is the smallest power
    of two with max |w| <= 12 * scale / 2, as DeepSeek's FP4 (E2M1 max 6) rounding does."""
    shp = w.shape
    b = w.astype(np.float32).reshape(-1, 32)
    amax = np.abs(b).max(-1)
    e = np.where(amax > 0, np.ceil(np.log2(np.maximum(amax, 1e-30) / 6.0)), -127).astype(np.int64) + 128
    e = np.clip(e, 1, 254)
    half = np.exp2(e.astype(np.float64) - 128)[:, None]  # value of kv == 1
    x = b / half
    codes = np.abs(x[..., None] - KV[None, None, :8]).argmin(-1)
    codes = np.where((x < 0) & (codes > 0), codes + 8, codes).astype(np.uint8)
    out = np.empty((b.shape[0], 17), np.uint8)
    out[:, 0] = e.astype(np.uint8)
    out[:, 1:] = codes[:, :16] | (codes[:, 16:] << 4)
    return out.reshape(*shp[:-1], shp[-1] // 32 * 17)


def mxfp4_to_q8_0(blocks):
    """The lossless Q8_0 rewrite DeepInfer does at load (src/model/mxfp4.c), here in numpy:
    d = 2^(e - 128) as f16, q = kv[code]."""
    shp = blocks.shape
    b = blocks.reshape(-1, 17)
    codes = np.concatenate([b[:, 1:] & 15, b[:, 1:] >> 4], 1)
    q = KV[codes].astype(np.int8)
    d = np.exp2(b[:, 0].astype(np.float64) - 128).astype(np.float16)
    assert np.all(d.astype(np.float64) == np.exp2(b[:, 0].astype(np.float64) - 128)), "scale outside f16"
    out = np.empty((b.shape[0], 34), np.uint8)
    out[:, :2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(*shp[:-1], shp[-1] // 17 * 34)


def layer_rates(cfg):
    return [{"sliding_attention": 0, **cfg["compress_rates"]}[t] for t in cfg["layer_types"]]


def n_mtp(cfg, tensors=None):
    """MTP blocks written after the main layers (block_count counts them, nextn_predict_layers names
    them, as llama.cpp's converter does): 1 when the checkpoint has mtp.0.* tensors."""
    return 1 if tensors is None or any(k.startswith("mtp.0.") for k in tensors) else 0


def n_hash_layers(cfg):
    mt = cfg["mlp_layer_types"]
    n = sum(1 for t in mt if t == "hash_moe")
    if mt[:n] != ["hash_moe"] * n:
        raise ValueError("llama.cpp's layout needs the hash-routed layers first (hash_layer_count)")
    return n


def stub_vocab(w, n):
    # a minimal BPE vocabulary both loaders accept (llama.cpp wants at least one merge)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(["a", "b", "ab"] + [f"t{i}" for i in range(3, n)])
    w.add_token_types([gguf.TokenType.NORMAL] * n)
    w.add_token_merges(["a b"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)


def write_metadata(w, cfg, name, mtp=0):
    L = cfg["num_hidden_layers"] + mtp
    g = f"{ARCH}."
    rs = cfg.get("rope_scaling") or {}
    w.add_string("general.type", "model")
    w.add_string("general.name", name)
    w.add_uint32(g + "block_count", L)
    w.add_uint32(g + "context_length", cfg["max_position_embeddings"])
    w.add_uint32(g + "embedding_length", cfg["hidden_size"])
    w.add_uint32(g + "attention.head_count", cfg["num_attention_heads"])
    w.add_uint32(g + "attention.head_count_kv", 1)
    if rs.get("type", rs.get("rope_type")) == "yarn":
        w.add_string(g + "rope.scaling.type", "yarn")
        w.add_float32(g + "rope.scaling.factor", rs["factor"])
        w.add_uint32(g + "rope.scaling.original_context_length", rs["original_max_position_embeddings"])
        w.add_float32(g + "rope.scaling.yarn_beta_fast", rs.get("beta_fast", 32))
        w.add_float32(g + "rope.scaling.yarn_beta_slow", rs.get("beta_slow", 1))
    w.add_float32(g + "rope.freq_base", cfg["rope_theta"])
    w.add_float32(g + "attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    w.add_uint32(g + "expert_count", cfg["n_routed_experts"])
    w.add_uint32(g + "expert_used_count", cfg["num_experts_per_tok"])
    w.add_uint32(g + "expert_gating_func", {"sqrtsoftplus": 4, "sigmoid": 2}[cfg["scoring_func"]])
    w.add_uint32(g + "attention.key_length", cfg["head_dim"])
    w.add_uint32(g + "attention.value_length", cfg["head_dim"])
    w.add_uint32("general.file_type", 38)  # MOSTLY_MXFP4_MOE, what the converter always sets
    w.add_uint32(g + "rope.dimension_count", int(cfg["head_dim"] * cfg["partial_rotary_factor"]))
    w.add_uint32(g + "attention.q_lora_rank", cfg["q_lora_rank"])
    w.add_uint32(g + "attention.sliding_window", cfg["sliding_window"])
    w.add_uint32(g + "expert_feed_forward_length", cfg["moe_intermediate_size"])
    w.add_uint32(g + "expert_shared_count", cfg["n_shared_experts"])
    w.add_float32(g + "expert_weights_scale", cfg["routed_scaling_factor"])
    w.add_bool(g + "expert_weights_norm", cfg["norm_topk_prob"])
    w.add_array(g + "swiglu_clamp_exp", [float(cfg["swiglu_limit"])] * L)
    w.add_array(g + "swiglu_clamp_shexp", [float(cfg["swiglu_limit"])] * L)
    w.add_uint32(g + "attention.indexer.head_count", cfg["index_n_heads"])
    w.add_uint32(g + "attention.indexer.key_length", cfg["index_head_dim"])
    w.add_uint32(g + "attention.indexer.top_k", cfg["index_topk"])
    w.add_uint32(g + "attention.output_group_count", cfg["o_groups"])
    w.add_uint32(g + "attention.output_lora_rank", cfg["o_lora_rank"])
    w.add_array(g + "attention.compress_ratios", [int(r) for r in layer_rates(cfg)] + [0] * mtp)
    if mtp:
        w.add_uint32(g + "nextn_predict_layers", mtp)
    w.add_float32(g + "attention.compress_rope_freq_base", cfg["compress_rope_theta"])
    w.add_uint32(g + "hyper_connection.count", cfg["hc_mult"])
    w.add_uint32(g + "hyper_connection.sinkhorn_iterations", cfg["hc_sinkhorn_iters"])
    w.add_float32(g + "hyper_connection.epsilon", cfg["hc_eps"])
    w.add_uint32(g + "hash_layer_count", n_hash_layers(cfg))
    w.add_uint32(g + "embedding_length_out", cfg["hidden_size"] * cfg["hc_mult"])
    w.add_uint32("general.quantization_version", 2)
    stub_vocab(w, cfg["vocab_size"])


def encode(a, qtype):
    """(array to store, raw_dtype or None) for a float matrix in qtype."""
    if qtype == "F32":
        return a.astype(np.float32), None
    if qtype == "F16":
        return a.astype(np.float16), None
    q = {"BF16": QT.BF16, "Q8_0": QT.Q8_0}[qtype]
    return gguf.quants.quantize(a.astype(np.float32), q), q


def gguf_tensors(cfg, tensors, matrices="F32", experts="MXFP4"):
    """Yield (gguf name, array, raw_dtype) in the converter's order (hash tables and experts first,
    as its generate_extra_tensors emits them). tensors: {HF name: np array}.
    Matrices (2-D, not hc_*_fn: the converter keeps F32 sources F32) get `matrices`."""
    L, E = cfg["num_hidden_layers"], cfg["n_routed_experts"]
    n_hash, mtp = n_hash_layers(cfg), n_mtp(cfg, tensors)
    # the MTP block (DeepSeek's mtp.0.*) as layer L: its block under the layers' names, e_proj and
    # h_proj side by side as nextn.eh_proj, its norms as nextn.*; the converter writes its hyper
    # head as the root output_hc_* of a separate --mtp file, so a combined file has none of its own
    if mtp:
        t = tensors
        tensors = {k: v for k, v in t.items() if not k.startswith("mtp.")}
        for k, v in t.items():
            if not k.startswith("mtp.0."): continue
            rest = k[len("mtp.0."):]
            if rest.split(".")[0] in ("e_proj", "h_proj", "enorm", "hnorm", "norm") or rest.startswith("hc_head"): continue
            tensors[f"layers.{L}.{rest}"] = v
        arr, q = encode(np.concatenate([t["mtp.0.e_proj.weight"], t["mtp.0.h_proj.weight"]], 1), matrices)
        yield f"blk.{L}.nextn.eh_proj.weight", arr, q
        for hf, gn in (("enorm", "enorm"), ("hnorm", "hnorm"), ("norm", "shared_head_norm")):
            yield f"blk.{L}.nextn.{gn}.weight", t[f"mtp.0.{hf}.weight"].astype(np.float32), None
    for il in range(n_hash):
        yield f"blk.{il}.ffn_gate_tid2eid.weight", tensors[f"layers.{il}.ffn.gate.tid2eid"].astype(np.int32), None
    for il in range(L + mtp):
        for w, gname in (("w1", EXPERTS["w1"]), ("w2", EXPERTS["w2"]), ("w3", EXPERTS["w3"])):
            st = np.stack([tensors[f"layers.{il}.ffn.experts.{e}.{w}.weight"] for e in range(E)])
            if experts == "MXFP4":
                yield f"blk.{il}.{gname}", mxfp4_blocks(st), QT.MXFP4
            elif experts == "Q8_0_FROM_MXFP4":
                yield f"blk.{il}.{gname}", mxfp4_to_q8_0(mxfp4_blocks(st)), QT.Q8_0
            else:
                a, q = encode(st, experts)
                yield f"blk.{il}.{gname}", a, q
    for hf, a in tensors.items():
        if ".ffn.experts." in hf or hf.endswith("tid2eid"):
            continue
        if hf in ROOT:
            name = ROOT[hf]
        else:
            _, il, rest = hf.split(".", 2)
            if rest == "ffn.gate.bias" and int(il) < n_hash:
                continue  # the converter drops it for hash layers
            name = f"blk.{il}.{LAYER[rest]}"
        if a.ndim == 2 and "hc_" not in hf and "ape" not in hf:
            arr, q = encode(a, matrices)
        else:
            arr, q = a.astype(np.float32), None
        yield name, arr, q


def write(path, cfg, tensors, matrices="F32", experts="MXFP4", name="DeepSeek-V4 test"):
    w = gguf.GGUFWriter(str(path), ARCH)
    write_metadata(w, cfg, name, n_mtp(cfg, tensors))
    for n, a, q in gguf_tensors(cfg, tensors, matrices, experts):
        w.add_tensor(n, a, raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def same_weights(cfg, tensors):
    """The checkpoint's tensors with every routed expert as the MXFP4 GGUF holds it (decoded by
    gguf-py's own MXFP4 dequantizer)."""
    out = {}
    for n, a in tensors.items():
        if ".ffn.experts." in n:
            d = gguf.quants.dequantize(mxfp4_blocks(a), QT.MXFP4)
            out[n] = np.asarray(d, np.float32).reshape(a.shape)
        else:
            out[n] = a
    return out


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        a = np.frombuffer(data[s:e], {"F32": np.float32, "I64": np.int64, "BF16": np.uint16}[v["dtype"]])
        if v["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[k] = a.reshape(v["shape"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True, help="a tiny V4 directory written by gen_tiny.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--matrices", default="F32", choices=["F32", "F16", "BF16", "Q8_0"])
    ap.add_argument("--experts", default="MXFP4", choices=["MXFP4", "Q8_0_FROM_MXFP4", "F32"])
    ap.add_argument("--same-weights-dir", help="also write the HF directory of the GGUF's weights (F32)")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.hf, "config.json")))
    ts = read_safetensors(os.path.join(a.hf, "model.safetensors"))
    write(a.out, cfg, ts, a.matrices, a.experts)
    if a.same_weights_dir:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import gen_tiny
        os.makedirs(a.same_weights_dir, exist_ok=True)
        sw = same_weights(cfg, ts)
        gen_tiny.write_safetensors(os.path.join(a.same_weights_dir, "model.safetensors"), list(sw.items()))
        c = dict(cfg, torch_dtype="float32")
        with open(os.path.join(a.same_weights_dir, "config.json"), "w") as f:
            json.dump(c, f, indent=1)


if __name__ == "__main__":
    main()
