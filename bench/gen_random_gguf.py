#!/usr/bin/env python3
"""Write random-weight llama-architecture GGUF files of realistic shapes, for benchmarks.

The weights are random (N(0, 0.02); norm weights 1.0), so the text is noise, but the shapes,
the dtypes and the bytes read per token are those of real models, and llama.cpp loads the
files unchanged, so speed can be compared side by side on 1B-class models.

Shapes (all: llama arch, RMSNorm eps 1e-5, rope base 10000 NORM layout, SwiGLU, context 4096,
vocab 32000, a minimal SentencePiece-style vocabulary that llama.cpp accepts):

  110m  dim 768,  12 layers, 12 heads / 12 KV heads (head dim 64), FFN 2048, tied output
        (no output.weight: the output projection reads token_embd) — the llama2.c stories110M
        shape; 109.5 M parameters.
  1.1b  TinyLlama-1.1B: dim 2048, 22 layers, 32 heads / 4 KV heads (head dim 64), FFN 5632,
        separate output.weight; 1.100 B parameters.
  v2-lite  DeepSeek-V2-Lite (arch deepseek2, the tensor layout llama.cpp's converter writes:
        attn_kv_b split into attn_k_b / attn_v_b, routed experts stacked in 3-D tensors): dim
        2048, 27 layers, 16 heads, MLA with kv_lora_rank 512 (no q_lora), qk_nope 128 + qk_rope
        64, v_head 128, layer 0 dense (FFN 10944), layers 1-26 MoE with 64 routed experts (6
        active, softmax gating, FFN 1408) and 2 shared, YaRN factor 40 over 4096, vocab 102400;
        15.7 B parameters, 2.4 B active per token. Only Q8_0 and the llama.cpp mixes (from the
        Q8_0 file: an F16 one would be 31 GB).

--type F16|Q8_0|Q4_0|F32 applies to every 2-D weight (token_embd, output and all layer
matrices); norm weights stay F32. Quantization uses gguf-py's numpy reference quantizers
(gguf.quants), which reproduce ggml's quantize_row_*_ref bit for bit.
--type Q4_K_M / Q5_K_M / Q5_1 have no numpy quantizer here: the F16 file is written first (or reused) and
converted with llama.cpp's own quantizer through llama-cpp-python (`llama_model_quantize`, the
peer the benchmarks compare against), run by --llamacpp-python (default /tmp/refvenv/bin/python
or $LLAMACPP_PYTHON). That gives the real mixes (Q4_K or Q5_K with Q6_K for some tensors).

--codes (v2-lite, --type Q4_K_M) skips both: it writes the mix llama.cpp's quantizer gives
this shape (q4_k_m_type: Q4_K; Q6_K for output and for ffn_down in llama.cpp's "more bits"
layers; Q5_0 / Q8_0 where a row is not a multiple of 256) directly as random codes: uniform
quants and scales, with each block's d (and dmin) set so the weights have std ~0.02. The bytes
read per token are those of the llama.cpp file; the values are not (no float source). The full
27-layer file takes minutes this way instead of about an hour (the Q8_0 source plus llama.cpp
quantizing 15.7 B weights on 2 threads).

--layers N keeps a shape's per-layer tensors but writes only its first N layers (v2-lite: layer 0
dense, the rest MoE), for measurements that are per-layer properties (the batched-decode ratio)
without the full file: `--shape v2-lite --layers 6` is 3.9 GB at Q8_0 instead of 16.7 GB.

Output: ~/.cache/deepinfer/bench/llama-<shape>-<type>.gguf, or <stem>-L<N>-<type>.gguf with
--layers (override with --out or $DI_BENCH_DIR). Deterministic for a given --seed. Needs: numpy, gguf (tests/requirements.txt).

  .venv/bin/python bench/gen_random_gguf.py --shape 110m --type Q4_0
  .venv/bin/python bench/gen_random_gguf.py --shape 1.1b --type Q8_0 --out /tmp/x.gguf
  .venv/bin/python bench/gen_random_gguf.py --all          # 110m and 1.1b in F16, Q8_0, Q4_0
  .venv/bin/python bench/gen_random_gguf.py --shape v2-lite --type Q4_K_M --codes
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
except ImportError:  # pragma: no cover
    sys.exit("gen_random_gguf.py needs the PyPI package 'gguf' (pip install gguf numpy)")

SHAPES = {
    "110m": dict(name="random llama 110M (stories110M shape)", dim=768, n_layers=12, n_heads=12,
                 n_kv_heads=12, ffn=2048, vocab=32000, tied=True),
    "1.1b": dict(name="random llama 1.1B (TinyLlama shape)", dim=2048, n_layers=22, n_heads=32,
                 n_kv_heads=4, ffn=5632, vocab=32000, tied=False),
    "v2-lite": dict(name="random DeepSeek-V2-Lite shape", arch="deepseek2", dim=2048, n_layers=27, n_heads=16,
                    n_kv_heads=1, ffn=10944, vocab=102400, tied=False, kv_lora=512, nope=128, rope=64, vhead=128,
                    n_exp=64, n_exp_used=6, n_shexp=2, ffn_exp=1408, first_dense=1, ctx=163840, quant_src="Q8_0"),
}
TYPES = {"F32": QT.F32, "F16": QT.F16, "Q8_0": QT.Q8_0, "Q4_0": QT.Q4_0}
FILE_TYPE = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
             "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}
CTX = 4096
STD = 0.02


def default_out_dir():
    return Path(os.environ.get("DI_BENCH_DIR") or (Path.home() / ".cache" / "deepinfer" / "bench"))


def tensor_list(s):
    """(name, numpy shape [rows, cols] or [n], is_matrix) in llama.cpp's usual file order."""
    if s.get("arch") == "deepseek2":
        return tensor_list_deepseek2(s)
    d, f, hd = s["dim"], s["ffn"], s["dim"] // s["n_heads"]
    kv = s["n_kv_heads"] * hd
    out = [("token_embd.weight", (s["vocab"], d), True)]
    for i in range(s["n_layers"]):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (d,), False),
            (p + "attn_q.weight", (d, d), True),
            (p + "attn_k.weight", (kv, d), True),
            (p + "attn_v.weight", (kv, d), True),
            (p + "attn_output.weight", (d, d), True),
            (p + "ffn_norm.weight", (d,), False),
            (p + "ffn_gate.weight", (f, d), True),
            (p + "ffn_up.weight", (f, d), True),
            (p + "ffn_down.weight", (d, f), True),
        ]
    out.append(("output_norm.weight", (d,), False))
    if not s["tied"]:
        out.append(("output.weight", (s["vocab"], d), True))
    return out


def tensor_list_deepseek2(s):
    """deepseek2 tensors as llama.cpp's convert_hf_to_gguf.py names and shapes them (numpy order:
    attn_k_b is [heads][kv_lora][nope], attn_v_b [heads][v_head][kv_lora]); the router stays F32."""
    d, H, kvl, nope, rope, vh = s["dim"], s["n_heads"], s["kv_lora"], s["nope"], s["rope"], s["vhead"]
    E, fe, fs = s["n_exp"], s["ffn_exp"], s["n_shexp"] * s["ffn_exp"]
    out = [("token_embd.weight", (s["vocab"], d), True)]
    for i in range(s["n_layers"]):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (d,), False),
            (p + "attn_q.weight", (H * (nope + rope), d), True),
            (p + "attn_kv_a_mqa.weight", (kvl + rope, d), True),
            (p + "attn_kv_a_norm.weight", (kvl,), False),
            (p + "attn_k_b.weight", (H, kvl, nope), True),
            (p + "attn_v_b.weight", (H, vh, kvl), True),
            (p + "attn_output.weight", (d, H * vh), True),
            (p + "ffn_norm.weight", (d,), False),
        ]
        if i < s["first_dense"]:
            out += [(p + "ffn_gate.weight", (s["ffn"], d), True), (p + "ffn_up.weight", (s["ffn"], d), True),
                    (p + "ffn_down.weight", (d, s["ffn"]), True)]
        else:
            out += [(p + "ffn_gate_inp.weight", (E, d), "f32"),
                    (p + "ffn_gate_exps.weight", (E, fe, d), True), (p + "ffn_up_exps.weight", (E, fe, d), True),
                    (p + "ffn_down_exps.weight", (E, d, fe), True),
                    (p + "ffn_gate_shexp.weight", (fs, d), True), (p + "ffn_up_shexp.weight", (fs, d), True),
                    (p + "ffn_down_shexp.weight", (d, fs), True)]
    out.append(("output_norm.weight", (d,), False))
    out.append(("output.weight", (s["vocab"], d), True))
    return out


def add_deepseek2_keys(w, s):
    """The deepseek2 hyperparameters in the newer converter's spelling (absorbed MQA sizes in
    key_length/value_length, per-head sizes in *_mla), YaRN as in V2-Lite's config."""
    a = "deepseek2"
    w.add_uint32(f"{a}.attention.kv_lora_rank", s["kv_lora"])
    if s["n_layers"] != SHAPES["v2-lite"]["n_layers"]:
        # llama.cpp takes a deepseek2 file as "lite" (no q_lora) only by its 27 layers and
        # otherwise requires this key; 0 = no q_lora for both engines
        w.add_uint32(f"{a}.attention.q_lora_rank", 0)
    w.add_uint32(f"{a}.attention.key_length", s["kv_lora"] + s["rope"])
    w.add_uint32(f"{a}.attention.value_length", s["kv_lora"])
    w.add_uint32(f"{a}.attention.key_length_mla", s["nope"] + s["rope"])
    w.add_uint32(f"{a}.attention.value_length_mla", s["vhead"])
    w.add_uint32(f"{a}.leading_dense_block_count", s["first_dense"])
    w.add_uint32(f"{a}.expert_count", s["n_exp"])
    w.add_uint32(f"{a}.expert_used_count", s["n_exp_used"])
    w.add_uint32(f"{a}.expert_shared_count", s["n_shexp"])
    w.add_uint32(f"{a}.expert_feed_forward_length", s["ffn_exp"])
    w.add_float32(f"{a}.expert_weights_scale", 1.0)
    w.add_bool(f"{a}.expert_weights_norm", False)
    w.add_uint32(f"{a}.expert_gating_func", 1)
    w.add_string(f"{a}.rope.scaling.type", "yarn")
    w.add_float32(f"{a}.rope.scaling.factor", 40.0)
    w.add_uint32(f"{a}.rope.scaling.original_context_length", 4096)
    w.add_float32(f"{a}.rope.scaling.yarn_log_multiplier", 0.0707)


def vocab(n):
    """A minimal llama (SentencePiece) vocabulary: <unk>, <s>, </s>, 256 byte tokens, then
    filler pieces. llama.cpp needs the byte tokens (it looks up <0x0A> for newline)."""
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        toks.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while len(toks) < n:
        # "▁a", "▁b", ..., "a", ..., then "▁t<i>" filler; all unique, all normal
        if i < 26:
            piece = "\u2581" + letters[i]
        elif i < 52:
            piece = letters[i - 26]
        else:
            piece = f"\u2581t{i}"
        toks.append(piece)
        scores.append(-float(i))
        types.append(1)
        i += 1
    return toks, scores, types


def q8_0_blocks(rng, shape):
    """Random Q8_0 data: int8 uniform in [-127, 127] (std 73.3) under the scale that gives
    weights of std STD."""
    nb = shape[-1] // 32
    out = np.empty(shape[:-1] + (nb, 34), dtype=np.uint8)
    out[..., 0:2] = np.frombuffer(np.float16(STD / 73.3).tobytes(), dtype=np.uint8)
    out[..., 2:] = rng.integers(-127, 128, size=shape[:-1] + (nb, 32), dtype=np.int8).view(np.uint8)
    return out.reshape(shape[:-1] + (nb * 34,))


def more_bits(i, n):
    """llama.cpp's use_more_bits(i_layer, n_layers): the layers whose ffn_down (and attn_v) a
    _M mix raises to Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_type(name, shape, n_layers):
    """The type llama.cpp's llama_tensor_get_type gives a deepseek2 weight for Q4_K_M (as in a
    file it quantized: deepseek2-v2-lite-L6-q4_k_m.gguf): Q6_K for output.weight and for the
    ffn_down* of more_bits layers (the layer from the name), Q4_K for the rest; a row length
    (numpy's last dim) that is not a multiple of 256 falls back to Q5_0 (for Q4_K) or Q8_0
    (for Q6_K), as attn_k_b (128) and the routed experts' down (1408) do."""
    t = QT.Q4_K
    if name == "output.weight":
        t = QT.Q6_K
    elif ".ffn_down" in name and more_bits(int(name.split(".")[1]), n_layers):
        t = QT.Q6_K
    if shape[-1] % 256:
        t = QT.Q5_0 if t == QT.Q4_K else QT.Q8_0
    return t


def random_codes(rng, shape, qt):
    """Random blocks of a K-quant or Q5_0 (Q8_0: q8_0_blocks): uniform bytes, then each block's
    d (and dmin) so the weights have std ~STD and (Q4_K) mean ~0. Q4_K: w = d*sc*q - dmin*m with
    sc, m uniform 0..63, q 0..15: dmin = 7.5 d zeroes the mean, std = 271 d. Q6_K: scales kept to
    1..16 so d stays a normal fp16, w = d*sc*(q - 32), std = 179 d. Q5_0: w = d*(q - 16), std 9.2 d."""
    if qt == QT.Q8_0:
        return q8_0_blocks(rng, shape)
    bsize, tsize = gguf.GGML_QUANT_SIZES[qt]
    nb = shape[-1] // bsize
    out = rng.integers(0, 256, size=shape[:-1] + (nb, tsize), dtype=np.uint8)
    f16 = lambda v: np.frombuffer(np.float16(v).tobytes(), dtype=np.uint8)
    if qt == QT.Q4_K:
        d = STD / 271
        out[..., 0:2] = f16(d)
        out[..., 2:4] = f16(7.5 * d)
    elif qt == QT.Q6_K:
        out[..., 192:208] = (out[..., 192:208] & 0x0F) + 1
        out[..., 208:210] = f16(STD / 179)
    elif qt == QT.Q5_0:
        out[..., 0:2] = f16(STD / 9.2)
    else:
        raise ValueError(f"no random codes for {qt.name}")
    return out.reshape(shape[:-1] + (nb * tsize,))


def tensor_type(is_matrix, qtype):
    return qtype if is_matrix is True else QT.F32


def make_tensor(rng, shape, is_matrix, qtype):
    if is_matrix == "f32":
        return (rng.standard_normal(size=shape, dtype=np.float32) * np.float32(STD)), QT.F32
    if not is_matrix:
        return np.ones(shape, dtype=np.float32), QT.F32
    if qtype == QT.Q8_0:
        return q8_0_blocks(rng, shape), qtype
    w = rng.standard_normal(size=shape, dtype=np.float32)
    w *= np.float32(STD)
    if qtype == QT.F32:
        return w, QT.F32
    if qtype == QT.F16:
        return w.astype(np.float16), QT.F16
    # quantize in row chunks to bound memory
    rows = shape[0]
    step = max(1, (1 << 22) // shape[1])
    parts = [gguf.quants.quantize(w[r:r + step], qtype) for r in range(0, rows, step)]
    return np.concatenate(parts, axis=0), qtype


def shape_with_layers(shape_name, n_layers=None):
    s = dict(SHAPES[shape_name])
    if n_layers:
        s["n_layers"] = n_layers
    return s


def generate(shape_name, type_name, out_path, seed=1234, quiet=False, n_layers=None):
    """type_name: a TYPES key (every matrix in it), or "Q4_K_M" for random codes of that mix."""
    s = shape_with_layers(shape_name, n_layers)
    codes = type_name == "Q4_K_M"
    qtype = QT.Q4_K if codes else TYPES[type_name]
    d, hd = s["dim"], s["dim"] // s["n_heads"]
    arch = s.get("arch", "llama")
    tensors = tensor_list(s)
    n_params = sum(int(np.prod(sh)) for _, sh, _ in tensors)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".part")

    w = gguf.GGUFWriter(str(tmp), arch)
    w.add_name(f"{s['name']} {type_name}")
    w.add_context_length(s.get("ctx", CTX))
    w.add_embedding_length(d)
    w.add_block_count(s["n_layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["n_heads"])
    w.add_head_count_kv(s["n_kv_heads"])
    w.add_rope_dimension_count(s.get("rope", hd))
    if arch == "deepseek2":
        add_deepseek2_keys(w, s)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(s["vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M if codes else FILE_TYPE[type_name])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    toks, scores, types = vocab(s["vocab"])
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_string("deepinfer.random_weights", f"seed={seed} std={STD} generator=bench/gen_random_gguf.py"
                 + (" codes=Q4_K_M (random codes in llama.cpp's mix, --codes)" if codes else ""))

    # tensor infos first (sizes are known without generating), then stream the data
    for name, sh, is_matrix in tensors:
        tt = q4_k_m_type(name, sh, s["n_layers"]) if codes and is_matrix is True else tensor_type(is_matrix, qtype)
        if tt in (QT.F32, QT.F16):
            dt = np.float32 if tt == QT.F32 else np.float16
            w.add_tensor_info(name, sh, np.dtype(dt), int(np.prod(sh)) * np.dtype(dt).itemsize)
        else:
            bshape = gguf.quant_shape_to_byte_shape(sh, tt)
            w.add_tensor_info(name, bshape, np.dtype(np.uint8), int(np.prod(bshape)), raw_dtype=tt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    t0 = time.monotonic()
    for k, (name, sh, is_matrix) in enumerate(tensors):
        rng = np.random.Generator(np.random.PCG64([seed, k]))
        if codes and is_matrix is True:
            data = random_codes(rng, sh, q4_k_m_type(name, sh, s["n_layers"]))
        else:
            data, _ = make_tensor(rng, sh, is_matrix, qtype)
        w.write_tensor_data(data)
        if not quiet and (k % 9 == 0 or k == len(tensors) - 1):
            tty = sys.stdout.isatty()
            if tty or k % 45 == 0 or k == len(tensors) - 1:
                print(f"{chr(13) if tty else ''}[gen] {out_path.name}: tensor {k + 1}/{len(tensors)} "
                      f"({time.monotonic() - t0:.0f} s)", end="" if tty else "\n", flush=True)
    w.close()
    os.replace(tmp, out_path)
    if not quiet:
        print(f"{chr(10) if sys.stdout.isatty() else ''}[gen] wrote {out_path} ({out_path.stat().st_size / 1e6:.1f} MB, "
              f"{n_params / 1e6:.1f} M params, {time.monotonic() - t0:.0f} s)")
    return out_path


QUANTIZE_SNIPPET = """
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + sys.argv[3])
p.nthread = 2
p.allow_requantize = True  # the v2-lite mixes start from its Q8_0 file
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p)
sys.exit(1 if rc != 0 else 0)
"""


LLAMACPP_TYPES = ["Q4_K_M", "Q5_K_M", "Q5_1"]


def quantize_with_llamacpp(src, out_path, py, ftype):
    """F16 (or v2-lite's Q8_0) GGUF -> ftype (Q4_K_M, Q5_K_M, Q5_1) with llama.cpp's quantizer
    (see the module docstring)."""
    if not Path(py).exists():
        sys.exit(f"--type {ftype} needs llama-cpp-python: {py} not found (set --llamacpp-python or $LLAMACPP_PYTHON)")
    out_path = Path(out_path)
    tmp = out_path.with_name(out_path.name + ".part")
    print(f"[gen] quantizing {Path(src).name} -> {out_path.name} with llama.cpp ({ftype})", flush=True)
    r = subprocess.run([py, "-c", QUANTIZE_SNIPPET, str(src), str(tmp), ftype], capture_output=True, text=True)
    if r.returncode != 0 or not tmp.exists():
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"llama_model_quantize failed for {src}: {tail}")
    os.replace(tmp, out_path)
    print(f"[gen] wrote {out_path} ({out_path.stat().st_size / 1e6:.1f} MB)")
    return out_path


def file_stem(shape, n_layers=None):
    stem = "deepseek2-" + shape if SHAPES[shape].get("arch") == "deepseek2" else "llama-" + shape
    return stem + (f"-L{n_layers}" if n_layers else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=list(SHAPES), help="model shape")
    ap.add_argument("--type", choices=list(TYPES) + LLAMACPP_TYPES, default="F16", help="weight type of 2-D tensors")
    ap.add_argument("--llamacpp-python", default=os.environ.get("LLAMACPP_PYTHON", "/tmp/refvenv/bin/python"),
                    help="python with llama-cpp-python, for --type Q4_K_M / Q5_K_M / Q5_1")
    ap.add_argument("--out", help="output file (default: $DI_BENCH_DIR or ~/.cache/deepinfer/bench/llama-SHAPE-TYPE.gguf)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, help="write only the first N layers of the shape (same per-layer tensors)")
    ap.add_argument("--all", action="store_true", help="write every shape in F16, Q8_0 and Q4_0")
    ap.add_argument("--codes", action="store_true",
                    help="v2-lite Q4_K_M: write llama.cpp's mix as random codes (minutes; no Q8_0 file, no llama.cpp)")
    ap.add_argument("--force", action="store_true", help="overwrite existing files")
    ap.add_argument("--print-path", action="store_true", help="only print the default output path")
    a = ap.parse_args()
    if a.codes and not (a.shape == "v2-lite" and a.type == "Q4_K_M"):
        ap.error("--codes is for --shape v2-lite --type Q4_K_M")
    if a.layers is not None and not (a.shape and 1 <= a.layers <= SHAPES[a.shape]["n_layers"]):
        ap.error("--layers N needs --shape and 1 <= N <= the shape's layer count")
    jobs = []
    if a.all:
        jobs = [(sh, t) for sh in SHAPES if "arch" not in SHAPES[sh] for t in ("F16", "Q8_0", "Q4_0")]
    elif a.shape:
        jobs = [(a.shape, a.type)]
    else:
        ap.error("give --shape (and --type) or --all")
    for sh, t in jobs:
        out = Path(a.out) if (a.out and not a.all) else default_out_dir() / f"{file_stem(sh, a.layers)}-{t.lower()}.gguf"
        if a.print_path:
            print(out)
            continue
        if out.exists() and not a.force:
            print(f"[gen] {out} exists (use --force to rewrite)")
            continue
        if a.codes:
            generate(sh, t, out, seed=a.seed, n_layers=a.layers)
        elif t in LLAMACPP_TYPES:
            src_t = SHAPES[sh].get("quant_src", "F16")
            src = default_out_dir() / f"{file_stem(sh, a.layers)}-{src_t.lower()}.gguf"
            if not src.exists():
                generate(sh, src_t, src, seed=a.seed, n_layers=a.layers)
            quantize_with_llamacpp(src, out, a.llamacpp_python, t)
        else:
            generate(sh, t, out, seed=a.seed, n_layers=a.layers)


if __name__ == "__main__":
    main()
