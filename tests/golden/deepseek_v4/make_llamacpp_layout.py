#!/usr/bin/env python3
"""Dump a DeepSeek-V4 GGUF's layout (keys with types and values, tensors with types and shapes)
as JSON, to pin tests/golden/deepseek_v4/to_gguf.py to what llama.cpp's converter writes.

The committed llamacpp_layout_flashratio.json came from a real conversion, run outside the
project (the converter needs torch; never a CI dependency):
  1. gen_tiny.py --out D --config flashratio
  2. DeepSeek's release form of it: config.json plus compress_ratios (0 sliding, 4, 128 per
     layer), num_hash_layers and qk_rope_head_dim; each routed expert's wN.weight as FP4 codes
     (U8 [rows, cols/2], element 2i low nibble) and wN.scale (U8 E8M0 [rows, cols/32])
  3. llama.cpp's convert_hf_to_gguf.py on it (--outtype f32), with DeepseekV4Model.set_vocab
     replaced by to_gguf.stub_vocab (the tiny model has no tokenizer)
  4. make_llamacpp_layout.py converted.gguf > llamacpp_layout_flashratio.json
Values that name the run (general.name, size_label), the chat template and the vocabulary's
entries are left out.

  make_llamacpp_layout.py FILE.gguf
"""
import json
import sys

import gguf

SKIP = {"general.name", "general.size_label", "GGUF.version", "GGUF.tensor_count", "GGUF.kv_count",
        "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
        "tokenizer.chat_template"}


def layout(path):
    r = gguf.GGUFReader(path)
    keys = {}
    for k, f in r.fields.items():
        if k in SKIP:
            continue
        v = f.contents()
        keys[k] = {"type": [t.name for t in f.types], "value": v}
    tensors = {t.name: {"type": t.tensor_type.name, "shape": [int(x) for x in t.shape]} for t in r.tensors}
    return {"keys": keys, "tensors": tensors}


if __name__ == "__main__":
    json.dump(layout(sys.argv[1]), sys.stdout, indent=1, sort_keys=True)
    print()
