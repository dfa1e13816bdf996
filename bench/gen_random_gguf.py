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

--type F16|Q8_0|Q4_0|F32 applies to every 2-D weight (token_embd, output and all layer
matrices); norm weights stay F32. Quantization uses gguf-py's numpy reference quantizers
(gguf.quants), which reproduce ggml's quantize_row_*_ref bit for bit.
--type Q4_K_M / Q5_K_M / Q5_1 have no numpy quantizer here: the F16 file is written first (or reused) and
converted with llama.cpp's own quantizer through llama-cpp-python (`llama_model_quantize`, the
peer the benchmarks compare against), run by --llamacpp-python (default /tmp/refvenv/bin/python
or $LLAMACPP_PYTHON). That gives the real mixes (Q4_K or Q5_K with Q6_K for some tensors).

Output: ~/.cache/deepinfer/bench/llama-<shape>-<type>.gguf (override with --out or
$DI_BENCH_DIR). Deterministic for a given --seed. Needs: numpy, gguf (tests/requirements.txt).

  .venv/bin/python bench/gen_random_gguf.py --shape 110m --type Q4_0
  .venv/bin/python bench/gen_random_gguf.py --shape 1.1b --type Q8_0 --out /tmp/x.gguf
  .venv/bin/python bench/gen_random_gguf.py --all          # 110m and 1.1b in F16, Q8_0, Q4_0
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


def make_tensor(rng, shape, is_matrix, qtype):
    if not is_matrix:
        return np.ones(shape, dtype=np.float32), QT.F32
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


def generate(shape_name, type_name, out_path, seed=1234, quiet=False):
    s = SHAPES[shape_name]
    qtype = TYPES[type_name]
    d, hd = s["dim"], s["dim"] // s["n_heads"]
    tensors = tensor_list(s)
    n_params = sum(int(np.prod(sh)) for _, sh, _ in tensors)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".part")

    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(f"{s['name']} {type_name}")
    w.add_context_length(CTX)
    w.add_embedding_length(d)
    w.add_block_count(s["n_layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["n_heads"])
    w.add_head_count_kv(s["n_kv_heads"])
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(s["vocab"])
    w.add_file_type(FILE_TYPE[type_name])
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
    w.add_string("deepinfer.random_weights", f"seed={seed} std={STD} generator=bench/gen_random_gguf.py")

    # tensor infos first (sizes are known without generating), then stream the data
    for name, sh, is_matrix in tensors:
        tt = qtype if is_matrix else QT.F32
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
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p)
sys.exit(1 if rc != 0 else 0)
"""


LLAMACPP_TYPES = ["Q4_K_M", "Q5_K_M", "Q5_1"]


def quantize_with_llamacpp(src, out_path, py, ftype):
    """F16 GGUF -> ftype (Q4_K_M, Q5_K_M, Q5_1) with llama.cpp's quantizer (see the module docstring)."""
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=list(SHAPES), help="model shape")
    ap.add_argument("--type", choices=list(TYPES) + LLAMACPP_TYPES, default="F16", help="weight type of 2-D tensors")
    ap.add_argument("--llamacpp-python", default=os.environ.get("LLAMACPP_PYTHON", "/tmp/refvenv/bin/python"),
                    help="python with llama-cpp-python, for --type Q4_K_M / Q5_K_M / Q5_1")
    ap.add_argument("--out", help="output file (default: $DI_BENCH_DIR or ~/.cache/deepinfer/bench/llama-SHAPE-TYPE.gguf)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--all", action="store_true", help="write every shape in F16, Q8_0 and Q4_0")
    ap.add_argument("--force", action="store_true", help="overwrite existing files")
    ap.add_argument("--print-path", action="store_true", help="only print the default output path")
    a = ap.parse_args()
    jobs = []
    if a.all:
        jobs = [(sh, t) for sh in SHAPES for t in ("F16", "Q8_0", "Q4_0")]
    elif a.shape:
        jobs = [(a.shape, a.type)]
    else:
        ap.error("give --shape (and --type) or --all")
    for sh, t in jobs:
        out = Path(a.out) if (a.out and not a.all) else default_out_dir() / f"llama-{sh}-{t.lower()}.gguf"
        if a.print_path:
            print(out)
            continue
        if out.exists() and not a.force:
            print(f"[gen] {out} exists (use --force to rewrite)")
            continue
        if t in LLAMACPP_TYPES:
            f16 = default_out_dir() / f"llama-{sh}-f16.gguf"
            if not f16.exists():
                generate(sh, "F16", f16, seed=a.seed)
            quantize_with_llamacpp(f16, out, a.llamacpp_python, t)
        else:
            generate(sh, t, out, seed=a.seed)


if __name__ == "__main__":
    main()
