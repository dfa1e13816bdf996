"""The serving engine on the tiny DeepSeek-V3 (MLA's latent KV rows, MoE):
greedy outputs identical at concurrency 1 and 8, with chunked prefill,
preemption in a small pool, and prefix-cache hits (test_batch's checks).

The model is regenerated with ../shared/data/models/deepseek-v3-tiny/make/gen_weights.py
(numpy) into the cache (as tests/unit/test_deepseek.c does) and gets DeepSeek-V3's
tokenizer from ../shared/data/tokenizers/deepseek-v3 (the same 129280-token vocabulary)."""
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_batch import check_determinism, greedy_lines, ids_by_id, need, prompts, run_batch

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
GEN = DATA / "models" / "deepseek-v3-tiny" / "make" / "gen_weights.py"
TOK = DATA / "tokenizers" / "deepseek-v3"
CACHE = Path(os.environ.get("DI_TEST_CACHE") or Path.home() / ".cache" / "deepinfer" / "gen") / "deepseek-v3-tiny"


@pytest.fixture(scope="module")
def v3():
    if not GEN.exists() or not TOK.exists():
        pytest.skip("../shared/data/models/deepseek-v3-tiny or tokenizers/deepseek-v3 missing")
    if not (CACHE / "v2lite-bf16" / "model.safetensors").exists():
        tmp = CACHE.with_name(CACHE.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(GEN), "--out", str(tmp), "--bf16", "--check"], check=True,
                       stdout=subprocess.DEVNULL)
        shutil.rmtree(CACHE, ignore_errors=True)
        tmp.rename(CACHE)
    d = CACHE / "v3-tok"
    if not (d / "tokenizer.json").exists():
        tmp = CACHE / f"v3-tok.tmp{os.getpid()}"
        tmp.mkdir(exist_ok=True)
        for f in ("config.json", "model.safetensors"):
            (tmp / f).symlink_to(CACHE / "v3" / f)
        (tmp / "tokenizer.json").write_bytes(lzma.decompress((TOK / "tokenizer.json.xz").read_bytes()))
        shutil.copy(TOK / "tokenizer_config.json", tmp / "tokenizer_config.json")
        shutil.rmtree(d, ignore_errors=True)
        tmp.rename(d)
    return d


def test_determinism_deepseek_v3(tmp_path, v3):
    need(v3)
    check_determinism(tmp_path, v3, 8, 12)


def test_prefix_cache_deepseek_v3(tmp_path, v3):
    need(v3)
    shared = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
              "with her friends. One day, she saw a big red ball under a tree. ")
    lines = greedy_lines(prompts(8, seed=3, shared=shared), 10)
    off, _ = run_batch(tmp_path, v3, lines, "--concurrency", 1, "--no-prefix-cache", tag="off")
    on, st = run_batch(tmp_path, v3, lines, "--concurrency", 1, tag="on")
    assert ids_by_id(on) == ids_by_id(off)
    hits = [r["response"]["body"]["usage"]["prompt_cache_hit_tokens"] for r in on]
    assert hits[0] == 0 and all(h >= 16 for h in hits[1:]), hits
    assert st["prefix_hit_tokens"] == sum(hits)
    # concurrency 8 with chunked prefill, cache on: the same outputs
    on8, _ = run_batch(tmp_path, v3, lines, "--concurrency", 8, "--max-batch-tokens", 16, tag="on8")
    assert ids_by_id(on8) == ids_by_id(off)


def test_info_counts_active_parameters(v3):
    """`info`'s active count is what one token reads: everything but the routed
    experts it does not choose and the other tokens' embedding rows (the
    classifier is its own matrix here), from the checkpoint's own header."""
    import json
    import math
    import re
    import struct
    cfg = json.loads((v3 / "config.json").read_text())
    with open(v3 / "model.safetensors", "rb") as f:
        head = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    numel = {k: int(math.prod(v["shape"])) for k, v in head.items() if k != "__metadata__"}
    total = sum(numel.values())
    moe_layers = cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]
    unchosen = cfg["n_routed_experts"] - cfg["num_experts_per_tok"]
    inactive = (moe_layers * unchosen * 3 * cfg["moe_intermediate_size"] * cfg["hidden_size"]
                + (cfg["vocab_size"] - 1) * cfg["hidden_size"])
    p = subprocess.run([os.environ.get("DEEPINFER_BIN", str(ROOT / "build" / "deepinfer")), "info", "-m", str(v3)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    m = re.search(r"parameters:\s+([\d.]+) M \(([\d.]+) M active per token\)", p.stdout)
    assert m, p.stdout
    assert abs(float(m.group(1)) - total / 1e6) < 0.06, (m.group(1), total)
    assert abs(float(m.group(2)) - (total - inactive) / 1e6) < 0.06, (m.group(2), total - inactive)
