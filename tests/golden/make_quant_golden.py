#!/usr/bin/env python3
"""Regenerate tests/golden/quant/quant_golden.bin: GGUF blocks and gguf-py's
dequantization of them (and, for types gguf-py can quantize, the source floats),
which tests/unit/test_quant_golden.c compares against bit for bit.

Records: synthetic rows of every supported type (random floats quantized by
gguf-py, or random bytes with sane scales for the K-quants) and real rows cut
from the test models (Gemma 3 270M Q4_K_M: Q4_K, Q6_K, Q5_0, Q8_0; SmolLM2-135M
Q4_1).

  .venv/bin/python tests/golden/make_quant_golden.py            # write
  .venv/bin/python tests/golden/make_quant_golden.py --check    # compare only
  .venv/bin/python tests/golden/make_quant_golden.py --check-synthetic
      # compare the synthetic records only (seconds; gguf-py's reader takes
      # a minute or more to parse the models' vocabularies)

Needs numpy and gguf==0.19.0 (tests/requirements.txt) and the models from
scripts/fetch-models (DI_MODELS_DIR, default ~/.cache/deepinfer/models).

Format (little-endian): b"DIQG", u32 version=1, u32 count, then per record:
u32 ggml type, u32 n elements, u32 has_src, u32 name length, name bytes,
[n f32 source], row bytes (n / block * type size), n f32 dequantized.
"""
import os
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, quants
from gguf.constants import GGML_QUANT_SIZES

OUT = Path(__file__).resolve().parent / "quant" / "quant_golden.bin"
MODELS = Path(os.environ.get("DI_MODELS_DIR") or Path.home() / ".cache" / "deepinfer" / "models")
QUANTIZABLE = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
K_QUANTS = [T.Q4_K, T.Q5_K, T.Q6_K]


def source_floats(rng, n):
    """Random floats with the awkward cases a quantizer must get right."""
    x = rng.standard_normal(n).astype(np.float32) * np.float32(0.7)
    x[0:32] = 0  # an all-zero block
    x[32:64] = np.float32(0.25)  # a constant block
    x[64:96] *= np.float32(1e-6)  # tiny values (fp16 subnormal scales)
    x[96:128] = -np.abs(x[96:128])  # all negative: the signed max picks the sign
    x[128:160] = np.round(x[128:160] * 8) / 8  # exact grid values: rounding ties
    x[160:192] *= np.float32(3e4)  # large values near fp16's range
    return x


def k_blocks(rng, qtype, nblocks):
    """Random K-quant blocks whose fp16 scales are finite and of a sane size."""
    size = GGML_QUANT_SIZES[qtype][1]
    raw = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
    d = (rng.random(nblocks) * 0.02 + 0.001).astype(np.float16).view(np.uint8).reshape(nblocks, 2)
    dmin = (rng.random(nblocks) * 0.02).astype(np.float16).view(np.uint8).reshape(nblocks, 2)
    if qtype == T.Q6_K:
        raw[:, 208:210] = d
    else:
        raw[:, 0:2] = d
        raw[:, 2:4] = dmin
    return raw.reshape(-1)


def record(qtype, name, raw, src=None):
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    block, size = GGML_QUANT_SIZES[qtype]
    n = raw.size // size * block
    deq = quants.dequantize(raw.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
    assert deq.size == n
    out = struct.pack("<IIII", int(qtype), n, 0 if src is None else 1, len(name)) + name.encode()
    if src is not None:
        out += np.asarray(src, dtype="<f4").tobytes()
    return out + raw.tobytes() + deq.astype("<f4").tobytes()


def real_rows(path, want):
    """(type, name, raw) for the first rows of the first tensor of each wanted type."""
    r = GGUFReader(str(path))
    out, seen = [], set()
    for t in r.tensors:
        if t.tensor_type in want and t.tensor_type not in seen:
            seen.add(t.tensor_type)
            data = np.asarray(t.data)
            rows = want[t.tensor_type]
            raw = data.reshape(data.shape[0], -1)[:rows].reshape(-1).view(np.uint8)
            out.append((t.tensor_type, f"{path.name}:{t.name}[0:{rows}]", raw))
    missing = set(want) - seen
    if missing:
        sys.exit(f"{path}: no tensor of type {sorted(m.name for m in missing)}")
    return out


def synthetic():
    rng = np.random.default_rng(20261202)
    recs = []
    for qt in QUANTIZABLE:
        x = source_floats(rng, 512)
        raw = quants.quantize(x.reshape(1, -1), qt).reshape(-1).view(np.uint8)
        recs.append(record(qt, f"synthetic {qt.name}", raw, x))
    for qt in K_QUANTS:
        recs.append(record(qt, f"synthetic {qt.name}", k_blocks(rng, qt, 3)))
    return recs


def build():
    recs = synthetic()
    gemma = MODELS / "gemma-3-270m-q4_k_m.gguf"
    smol = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
    for path in (gemma, smol):
        if not path.exists():
            sys.exit(f"{path}: missing; run scripts/fetch-models")
    for qt, name, raw in real_rows(gemma, {T.Q4_K: 1, T.Q6_K: 1, T.Q5_0: 1, T.Q8_0: 1}) + real_rows(
        smol, {T.Q4_1: 1}
    ):
        recs.append(record(qt, name, raw))
    return b"DIQG" + struct.pack("<II", 1, len(recs)) + b"".join(recs)


def main():
    if "--check-synthetic" in sys.argv[1:]:
        syn = b"".join(synthetic())
        same = OUT.exists() and OUT.read_bytes()[12 : 12 + len(syn)] == syn
        print(f"{OUT}: synthetic records {'up to date' if same else 'DIFFER from a fresh build'}")
        return 0 if same else 1
    data = build()
    if "--check" in sys.argv[1:]:
        same = OUT.exists() and OUT.read_bytes() == data
        print(f"{OUT}: {'up to date' if same else 'DIFFERS from a fresh build'}")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(data)
    print(f"wrote {OUT} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
