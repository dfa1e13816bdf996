"""Per-layer-group KV on Gemma 3 270M (15 sliding-window layers of window 512, 3
full-attention layers): through `deepinfer batch` the sliding-window layers keep
O(window) blocks, and greedy outputs of prompts longer than the window are the
single-sequence `deepinfer run` path's (one table for every layer), also with
several sequences at once and with a pool small enough to force preemption.
The prefix cache works across all tables. DI_KV_NO_GROUPS=1 gives the one-table layout in the
engine for the memory comparison."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DEEPINFER_BIN", ROOT / "build" / "deepinfer"))
MODELS = Path(os.environ.get("DI_MODELS_DIR") or Path.home() / ".cache" / "deepinfer" / "models")
GEMMA = MODELS / "gemma-3-270m-q4_k_m.gguf"
GEN = 96


@pytest.fixture(scope="module")
def setup():
    if not BIN.exists():
        pytest.skip(f"{BIN} not built (set DEEPINFER_BIN)")
    if not GEMMA.exists():
        pytest.skip(f"{GEMMA} missing (scripts/fetch-models)")
    golden = json.loads((ROOT / "tests" / "golden" / "llamacpp_gemma3_270m.json").read_text())
    ids = next(c["prompt_ids"] for c in golden["cases"] if c["name"] == "long_swa")  # 594 tokens
    prompts = [ids, ids[:560] + ids[:40]]  # both longer than the 512-token window, different tails
    refs = []
    for p in prompts:
        r = subprocess.run([str(BIN), "run", "-m", str(GEMMA), "--ids", ",".join(map(str, p)), "-n", str(GEN),
                            "--temp", "0", "--ignore-eos", "--threads", "2", "--print-ids"],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        refs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return prompts, refs


def batch(tmp_path, prompts, *args, env=None, gen=GEN):
    inp, outp, stats = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "stats.json"
    with open(inp, "w") as f:
        for i, p in enumerate(prompts):
            body = {"prompt": p, "max_tokens": gen, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
            f.write(json.dumps({"custom_id": str(i), "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
    r = subprocess.run([str(BIN), "batch", "-m", str(GEMMA), "-i", str(inp), "-o", str(outp), "--threads", "2",
                        "-q", "--stats-json", str(stats), *args], capture_output=True, text=True, timeout=900,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    out = {}
    for line in outp.read_text().splitlines():
        res = json.loads(line)
        assert res["error"] is None, res["error"]
        out[int(res["custom_id"])] = res["response"]["body"]["choices"][0]["token_ids"]
    return [out[i] for i in range(len(prompts))], json.loads(stats.read_text())


def test_grouped_outputs(setup, tmp_path):
    prompts, refs = setup
    got, st = batch(tmp_path, prompts, "--concurrency", "2")
    assert got == refs
    assert st["kv_blocks_used"] == 0


def test_grouped_memory(setup, tmp_path):
    """A 1,536-token prompt in 128-token chunks: one table holds 18 layers x 1,544
    positions; grouped, the 15 sliding-window layers hold at most the window plus
    a chunk (512 + 128 + a block), so the pool's high water is about half."""
    prompts, _ = setup
    long = (prompts[0] * 3)[:1536]
    args = ("--concurrency", "1", "--max-batch-tokens", "128", "--no-prefix-cache")
    saved = {}
    for name, env in (("grouped", None), ("one table", {"DI_KV_NO_GROUPS": "1"})):
        inp = [long]
        _, st = batch(tmp_path, inp, *args, env=env, gen=8)
        saved[name] = st["kv_blocks_high_water"] * st["kv_block_bytes"]
        assert st["kv_blocks_used"] == 0
    print(f"\nKV high water, 1,544 positions: grouped {saved['grouped'] / 2**20:.2f} MiB, "
          f"one table {saved['one table'] / 2**20:.2f} MiB")
    assert saved["grouped"] < 0.6 * saved["one table"], saved


def test_grouped_preemption(setup, tmp_path):
    prompts, refs = setup
    _, st = batch(tmp_path, prompts[:1], "--concurrency", "1", "--no-prefix-cache")
    one_seq = st["kv_blocks_high_water"] * st["kv_block_bytes"]
    # room for about 1.3 sequences: two at once must preempt, outputs unchanged
    # (no prefix cache: the two prompts share 560 tokens, whose blocks they would share)
    got, st = batch(tmp_path, prompts, "--concurrency", "2", "--kv-mem", str(int(one_seq * 1.3)), "--no-prefix-cache")
    assert got == refs
    assert st["preemptions"] > 0
    assert st["kv_blocks_used"] == 0


def test_grouped_prefix_cache(setup, tmp_path):
    """The second prompt shares 560 tokens with the first: run one after the other it hits the
    cached prefix in every table (the sliding-window tables' blocks of the window before the
    hit stay cached after the first sequence let them go) and gives the same tokens."""
    prompts, refs = setup
    got, st = batch(tmp_path, prompts, "--concurrency", "1")
    assert got == refs
    assert st["prefix_hit_tokens"] >= 512, st
    assert st["kv_blocks_used"] == 0
