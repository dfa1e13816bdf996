#!/usr/bin/env python3
"""A copy of a GGUF model with its quantized tensors stored in another type (F32, F16,
BF16 or Q8_0), for draft-model speculation: the original (low precision) drafts for the copy (higher
precision), a real target/draft pair with the same vocabulary and shapes.

    /work/refvenv/bin/python bench/make_gguf_copy.py IN.gguf OUT.gguf --type f16

Needs the `gguf` and `numpy` packages (not a CI dependency: benchmarks only)."""
import argparse

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter, Keys
from gguf.quants import dequantize, quantize

TYPES = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0}
KEEP = {Q.F32, Q.F16, Q.BF16}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--type", choices=sorted(TYPES), default="f16")
    a = ap.parse_args()
    qt = TYPES[a.type]
    r = GGUFReader(a.src)
    arch = r.fields[Keys.General.ARCHITECTURE].contents()
    w = GGUFWriter(a.dst, arch)
    for f in r.fields.values():
        if f.name == Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        vt = f.types[0]
        w.add_key_value(f.name, f.contents(), vt, sub_type=f.types[-1] if vt == GGUFValueType.ARRAY else None)
    out = []
    for t in r.tensors:
        if t.tensor_type in KEEP:
            out.append((t.name, np.asarray(t.data), t.tensor_type))
            continue
        x = dequantize(np.asarray(t.data), t.tensor_type)  # shape in numpy order (rows, cols)
        if qt in (Q.F16, Q.F32):
            out.append((t.name, x.astype(np.float16 if qt == Q.F16 else np.float32), qt))
        else:
            out.append((t.name, quantize(x.astype(np.float32), qt), qt))
    for name, data, typ in out:
        w.add_tensor(name, data, raw_dtype=typ)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
