#!/usr/bin/env python3
"""Write a random-weight DeepSeek-V4 GGUF of V4-Flash-like shapes, scaled to a small machine, in
llama.cpp's layout (general.architecture deepseek4; tests/golden/deepseek_v4/to_gguf.py writes
the keys, pinned to a real conversion), for side-by-side speed runs (bench/dsv4_vs_llamacpp.py).

Per layer the structure is V4-Flash's: head_dim 512 with a 64-dim rope part, one latent KV head,
sliding window 128, CSA (rate 4, Lightning Indexer with 128-dim keys, top-k 512) and HCA (rate
128) layers alternating, 4 hyper-connection streams, hash-routed first layer(s), 6 routed experts
of the layer's set plus one shared expert, sqrtsoftplus routing, grouped output projection. The
width, the expert count, the head count and the layer count are scaled down so the file is a few
hundred MB (V4-Flash is 284B parameters):

  flash-mini  hidden 2048, 32 heads x 512, q_lora 768, o_groups 4 x o_lora 512, 4 layers
              (CSA, HCA, CSA, HCA; layer 0 hash-routed), 16 experts (6 active) x 1024 + 1 shared,
              indexer 32 heads x 128, vocabulary 32768.

  tiny-f32    tests/golden/deepseek_v4/gen_tiny.py's flashratio model (window 128, rates 4 and 128)
              with head_dim 128 (rope 64) and 128-dim indexer keys, F32 matrices and MXFP4 experts
              (to_gguf.py): small enough to compare every logit with llama.cpp (its graph asserts
              on flashratio's head_dim 32). Unit-scale weights, not random codes.

Types as in llama.cpp's conversion of the FP8/FP4 release: routed experts MXFP4, the other
matrices Q8_0 (the converter writes FP8 sources as Q8_0), hyper-connection maps, position
biases, norms and sinks F32. Weights are random codes with per-tensor scales ~ 1/sqrt(fan_in)
(no numpy quantizer needed), so the text is noise but the bytes read per token are real.

--mtp adds a multi-token-prediction block as llama.cpp's converter numbers it (block_count + 1,
nextn_predict_layers 1: blk.N.nextn.eh_proj Q8_0 as the converter forces it, nextn norms, and a
sliding-window routed-MoE block of the layers' types), for `--spec mtp` runs: random, so its
drafts are almost never accepted, and what a run measures is the drafter's cost.

Output: ~/.cache/deepinfer/bench/dsv4-<shape>[-mtp].gguf (or --out; $DI_BENCH_DIR). Needs numpy, gguf.

  .venv/bin/python bench/gen_random_gguf_dsv4.py --shape flash-mini
"""
import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "golden" / "deepseek_v4"))
import gen_tiny  # noqa: E402
import to_gguf  # noqa: E402
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402

SHAPES = {
    "flash-mini": dict(
        vocab_size=32768, hidden_size=2048, num_attention_heads=32, head_dim=512, q_lora_rank=768,
        partial_rotary_factor=0.125, o_groups=4, o_lora_rank=512, n_routed_experts=16, num_experts_per_tok=6,
        moe_intermediate_size=1024, index_n_heads=32, index_head_dim=128, index_topk=512, sliding_window=128,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        hc_mult=4, hc_sinkhorn_iters=20, swiglu_limit=10.0, routed_scaling_factor=1.5,
        layer_types=["compressed_sparse_attention", "heavily_compressed_attention"] * 2,
        mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_scaling={"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                      "beta_fast": 32, "beta_slow": 1},
        max_position_embeddings=1048576, seed=1),
}
TINY_F32 = dict(gen_tiny.CONFIGS["flashratio"], head_dim=128, partial_rotary_factor=0.5, index_head_dim=128)


def q8_0(rng, rows, cols):
    """Random Q8_0 blocks: q uniform in [-127, 127], d so the values have std ~ 1/sqrt(cols)."""
    nb = cols // 32
    out = np.empty((rows, nb, 34), np.uint8)
    d = np.float16(1.0 / (73.3 * math.sqrt(cols)))
    out[:, :, :2] = np.frombuffer(d.tobytes(), np.uint8)
    out[:, :, 2:] = rng.integers(-127, 128, (rows, nb, 32), dtype=np.int8).view(np.uint8)
    return out.reshape(rows, nb * 34)


def mxfp4(rng, n, rows, cols):
    """Random MXFP4 blocks: codes uniform, one E8M0 scale per tensor with value std ~ 1/sqrt(cols)."""
    nb = cols // 32
    out = np.empty((n, rows, nb, 17), np.uint8)
    out[..., 0] = 128 + round(math.log2(1.0 / (5.85 * math.sqrt(cols))))
    out[..., 1:] = rng.integers(0, 256, (n, rows, nb, 16), dtype=np.uint8)
    return out.reshape(n, rows, nb * 17)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="flash-mini", choices=sorted(SHAPES) + ["tiny-f32"])
    ap.add_argument("--out")
    ap.add_argument("--max-pos", type=int, help="tiny-f32: max_position_embeddings (the context a run may use; "
                    "default the config's 8192)")
    ap.add_argument("--mtp", action="store_true", help="add an MTP block (blk.N.nextn.*)")
    a = ap.parse_args()
    bench_dir = Path(os.environ.get("DI_BENCH_DIR") or Path.home() / ".cache" / "deepinfer" / "bench")
    out = Path(a.out) if a.out else bench_dir / f"dsv4-{a.shape}{'-mtp' if a.mtp else ''}.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    if a.shape == "tiny-f32":
        c = dict(TINY_F32, max_position_embeddings=a.max_pos) if a.max_pos else TINY_F32
        to_gguf.write(out, gen_tiny.config_json(c), dict(gen_tiny.generate(c)), name="tiny-f32")
        print(out)
        return
    c = dict(SHAPES[a.shape], mtp=a.mtp)
    cfg = gen_tiny.config_json(c)
    L = len(c["layer_types"])
    rng = np.random.default_rng(c["seed"])
    specs = gen_tiny.tensor_specs(c)
    E = c["n_routed_experts"]
    w = gguf.GGUFWriter(str(out) + ".tmp", to_gguf.ARCH)
    to_gguf.write_metadata(w, cfg, f"random DeepSeek-V4 {a.shape}", int(a.mtp))
    n_hash = to_gguf.n_hash_layers(cfg)
    for il in range(n_hash):
        t = np.stack([rng.permutation(E)[: c["num_experts_per_tok"]] for _ in range(c["vocab_size"])]).astype(np.int32)
        w.add_tensor(f"blk.{il}.ffn_gate_tid2eid.weight", t)
    for il in range(L + int(a.mtp)):
        F, D = c["moe_intermediate_size"], c["hidden_size"]
        for key, (rows, cols) in (("w1", (F, D)), ("w2", (D, F)), ("w3", (F, D))):
            w.add_tensor(f"blk.{il}.{to_gguf.EXPERTS[key]}", mxfp4(rng, E, rows, cols), raw_dtype=QT.MXFP4)
    for name, shape, kind in specs:
        if ".ffn.experts." in name or kind == "tid2eid":
            continue
        if name in to_gguf.ROOT:
            gname = to_gguf.ROOT[name]
        elif name.startswith("mtp.0."):  # the block as layer L; e_proj and h_proj become one eh_proj
            rest = name[len("mtp.0."):]
            if rest.startswith(("h_proj", "hc_head")):
                continue
            if rest.startswith("e_proj"):
                D = c["hidden_size"]
                w.add_tensor(f"blk.{L}.nextn.eh_proj.weight", q8_0(rng, D, 2 * D), raw_dtype=QT.Q8_0)
                continue
            nextn = {"enorm.weight": "enorm", "hnorm.weight": "hnorm", "norm.weight": "shared_head_norm"}
            gname = f"blk.{L}.nextn.{nextn[rest]}.weight" if rest in nextn else f"blk.{L}.{to_gguf.LAYER[rest]}"
        else:
            _, il, rest = name.split(".", 2)
            if rest == "ffn.gate.bias" and int(il) < n_hash:
                continue
            gname = f"blk.{il}.{to_gguf.LAYER[rest]}"
        if kind in ("linear", "embed") and "hc_" not in name:
            w.add_tensor(gname, q8_0(rng, *shape), raw_dtype=QT.Q8_0)
            continue
        z = rng.standard_normal(size=shape).astype(np.float32)
        if kind == "linear": v = z / math.sqrt(shape[1])
        elif kind == "norm": v = np.ones(shape, np.float32)
        elif kind == "embed": v = z
        elif kind == "bias": v = 0.1 * z
        else: v = 0.1 * z  # sinks, position biases
        w.add_tensor(gname, v.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(str(out) + ".tmp", out)
    print(out, f"{out.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
