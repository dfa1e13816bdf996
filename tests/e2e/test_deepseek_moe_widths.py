"""MoE layers whose widths are not multiples of 8, 16 or 256 (DeepSeek-V2 layout, GGUF, F32).

Small batches run the routed and shared experts as one task cut in 256-column chunks of the
jobs laid end to end (src/graph/ffn_moe.c), so a chunk starts and ends inside a job, here at
columns that are not multiples of a kernel's 8-column group; batches above 64 tokens run each
expert on its own. Row invariance promises the same bits either way: the prompt's logits from
one 80-token prefill (per-expert path), from 16-token chunks and from one token at a time
(grouped path) must be identical, on two threads (which thread takes which chunk varies).

The model: bench/gen_random_gguf.py's v2-lite writer with a tiny shape of its own: hidden 72,
expert FFN 36 (shared 72), dense FFN 88, 8 routed experts (3 active)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("DEEPINFER_BIN", str(REPO / "build" / "deepinfer"))
sys.path.insert(0, str(REPO / "bench"))
import gen_random_gguf as gen  # noqa: E402

VOCAB = 512
SHAPE = dict(gen.SHAPES["v2-lite"], name="tiny deepseek2, odd widths", dim=72, n_layers=3, n_heads=4, ffn=88,
             vocab=VOCAB, kv_lora=32, nope=16, rope=8, vhead=16, n_exp=8, n_exp_used=3, n_shexp=2, ffn_exp=36,
             ctx=4096)
N_PROMPT = 80


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    gen.SHAPES["odd-moe"] = SHAPE
    try:
        return gen.generate("odd-moe", "F32", tmp_path_factory.mktemp("moe") / "odd.gguf", quiet=True)
    finally:
        del gen.SHAPES["odd-moe"]


def logits(model, tmp, batch_tokens):
    f = tmp / f"b{batch_tokens}.f32"
    ids = ",".join(str(int(x)) for x in np.random.default_rng(5).integers(3, VOCAB, N_PROMPT))
    p = subprocess.run([BIN, "run", "-m", str(model), "--ids", ids, "-n", "1", "--temp", "0", "--threads", "2",
                        "--max-batch-tokens", str(batch_tokens), "--dump-logits", str(f)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return np.fromfile(f, np.float32).reshape(-1, VOCAB)[:N_PROMPT]


def test_moe_odd_widths_row_invariant(model, tmp_path):
    assert SHAPE["ffn_exp"] % 8 and SHAPE["dim"] % 16 and (SHAPE["n_shexp"] * SHAPE["ffn_exp"]) % 16
    full = logits(model, tmp_path, 512)  # 80 tokens in one step: each expert on its own
    assert np.isfinite(full).all() and full.std() > 0
    assert not np.array_equal(full[0], full[1])
    for bt in (16, 1):  # grouped: the 256-column chunks cut expert jobs at columns 4, 40, ...
        got = logits(model, tmp_path, bt)
        diff = np.flatnonzero((got.view(np.uint32) != full.view(np.uint32)).any(axis=1))
        assert diff.size == 0, f"--max-batch-tokens {bt}: positions {diff[:8].tolist()} differ from one prefill"
