"""The serving engine on a tiny DeepSeek-V4 (sliding / CSA / HCA layers, hyper-connections,
hash + routed MoE; window 16, rates 4 and 16): greedy outputs identical at concurrency 1
and 8, with chunked prefill that cuts compression windows, preemption in a small pool, and
prefix-cache hits (test_batch's checks), and with the cache off.

The model is tests/golden/deepseek_v4/gen_tiny.py's "engine" config (numpy) with
DeepSeek-V3's tokenizer from ../shared/data/tokenizers/deepseek-v3 (its 129280-token
vocabulary); its forward is checked against transformers by tests/unit/test_deepseek_v4.c."""
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_batch import check_determinism, greedy_lines, ids_by_id, need, prompts, run_batch

ROOT = Path(__file__).resolve().parents[2]
TOK = ROOT.parent / "shared" / "data" / "tokenizers" / "deepseek-v3"
GEN = ROOT / "tests" / "golden" / "deepseek_v4" / "gen_tiny.py"
CACHE = Path(os.environ.get("DI_TEST_CACHE") or Path.home() / ".cache" / "deepinfer" / "gen") / "deepseek-v4-engine-g1"


def tiny_model(config, cache):
    """gen_tiny.py's CONFIG as a model directory with DeepSeek-V3's tokenizer, made once into
    the cache (built in a temporary folder, renamed when complete)."""
    if not TOK.exists():
        pytest.skip("../shared/data/tokenizers/deepseek-v3 missing")
    if not (cache / "tokenizer.json").exists():
        tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(GEN), "--out", str(tmp), "--config", config], check=True,
                       stdout=subprocess.DEVNULL)
        for f in ("config.json", "model.safetensors"):
            (tmp / config / f).rename(tmp / f)
        (tmp / config).rmdir()
        (tmp / "tokenizer.json").write_bytes(lzma.decompress((TOK / "tokenizer.json.xz").read_bytes()))
        shutil.copy(TOK / "tokenizer_config.json", tmp / "tokenizer_config.json")
        shutil.rmtree(cache, ignore_errors=True)
        tmp.rename(cache)
    return cache


@pytest.fixture(scope="module")
def v4():
    return tiny_model("engine", CACHE)


def test_determinism_deepseek_v4(tmp_path, v4):
    need(v4)
    check_determinism(tmp_path, v4, 8, 12, probe_pool=True)


def test_prefix_cache_deepseek_v4(tmp_path, v4):
    need(v4)
    shared = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
              "with her friends. One day, she saw a big red ball under a tree. ")
    lines = greedy_lines(prompts(8, seed=3, shared=shared), 10)
    off, _ = run_batch(tmp_path, v4, lines, "--concurrency", 1, "--no-prefix-cache", tag="off")
    on, st = run_batch(tmp_path, v4, lines, "--concurrency", 1, tag="on")
    assert ids_by_id(on) == ids_by_id(off)
    hits = [r["response"]["body"]["usage"]["prompt_cache_hit_tokens"] for r in on]
    assert hits[0] == 0 and all(h >= 16 for h in hits[1:]), hits
    assert st["prefix_hit_tokens"] == sum(hits)
    # concurrency 8 with chunked prefill (7 cuts the rate-4 and rate-16 windows), cache on
    on8, _ = run_batch(tmp_path, v4, lines, "--concurrency", 8, "--max-batch-tokens", 7, tag="on8")
    assert ids_by_id(on8) == ids_by_id(off)
