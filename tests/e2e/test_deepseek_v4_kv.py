"""DeepSeek-V4's grouped KV cache (graph/dsv4.h): compressed rows in the main
table at 1/rate, raw rows and the compressors' projections (their unfinished
windows included) in window tables that keep the last max(sliding_window,
2 x CSA rate, HCA rate) positions and checkpoints. Exact: greedy tokens and
every logprob bit-identical to cold runs of the one-row-per-position layout
(--swa-full, no prefix cache) on documents of many windows and compression
blocks, across prefix hits whose windows were evicted (bounded replay),
--no-replay, chunked prefill, concurrency and preemption; and memory: the
window group stays at the window plus checkpoints while the main group grows
by the compressed rows only (block counts from --stats-json and `info`).

The model is test_deepseek_v4_engine's tiny "engine" config (window 16, CSA
rate 4, HCA rate 16; 23 window tables of 26 values per position, 15 of them
the CSA series' 8 positions))."""
import re
import subprocess

from test_deepseek_v4_engine import v4  # noqa: F401 (fixture)
from test_swa_replay import BIN, GEN, batch, need, same, workload

DOC, BRANCH = 300, 200
BRANCH_P, RETURN_P = (BRANCH + 3 - 1) // 16 * 16, (DOC + 2 - 1) // 16 * 16  # 192, 288
BASE = ["--max-batch-tokens", "32", "--kv-type", "f32"]  # the pool sizes below are f32 blocks


def test_grouped_exact(tmp_path, v4):  # noqa: F811
    need(v4)
    prompts = workload(129000, DOC, BRANCH)
    ref, full = batch(tmp_path, v4, prompts, *BASE, "--swa-full", "--no-prefix-cache")
    assert full["kv_blocks_high_window"] == 0
    got, st = batch(tmp_path, v4, prompts, *BASE, "--kv-mem", "8M")  # roomy pool: hits at P exactly
    print("roomy", [(q["cached_tokens"], q["replayed_tokens"]) for q in got], st)
    assert same(ref, got)
    assert got[2]["cached_tokens"] == BRANCH_P and got[3]["cached_tokens"] == RETURN_P
    for c in (64, 128):
        got, st = batch(tmp_path, v4, prompts, *BASE, "--kv-mem", "600K", "--swa-checkpoint", str(c))
        print(c, [(q["cached_tokens"], q["replayed_tokens"]) for q in got], st)
        assert same(ref, got), c
    # the window group: per table the window a chunk reads and the one it
    # leaves with partial blocks (4), and one block per checkpoint passed; the
    # main group one block of compressed rows per 16 positions of the longest sequence
    assert st["kv_blocks_high_window"] <= 23 * (4 + (DOC + GEN) // 128), st
    assert st["kv_blocks_high_full"] <= (DOC + 3 + GEN + 15) // 16, st
    assert st["swa_replays"] >= 1 and st["swa_replay_max"] <= 128, st
    # 104 bytes per position in the main group (the compressed rows alone) instead of 2816 for every layer's row
    assert st["kv_block_bytes"] // 16 == 104 and full["kv_block_bytes"] // 16 == 2816, (st, full)
    got, st = batch(tmp_path, v4, prompts, *BASE, "--kv-mem", "600K", "--no-replay")
    assert same(ref, got) and st["swa_replays"] == 0
    # preemption: four at once, chunks of 7 that cut the compression windows, in a pool for about one
    # (older checkpoints go back to the cache first: 360K needs no preemption)
    got, st = batch(tmp_path, v4, prompts, "--max-batch-tokens", "7", "--kv-type", "f32", "--kv-mem", "300K",
                    concurrency=4)
    print("tight", [(q["cached_tokens"], q["replayed_tokens"]) for q in got], st)
    assert same(ref, got) and st["preemptions"] > 0, st
    # f16 (the default --kv-type): every cached value rounded once where it is stored, the same
    # values in both layouts, so grouped and one-row-per-position still agree bit for bit
    ref16, full16 = batch(tmp_path, v4, prompts, "--max-batch-tokens", "32", "--swa-full", "--no-prefix-cache")
    got, st = batch(tmp_path, v4, prompts, "--max-batch-tokens", "32", "--kv-mem", "300K", "--swa-checkpoint", "64")
    assert same(ref16, got) and st["kv_block_bytes"] // 16 == 52 and full16["kv_block_bytes"] // 16 == 1408, st


def test_info_groups(v4):  # noqa: F811
    """`deepinfer info`: per-group bytes and the KV of one 1M-token sequence, in f16 (the engine's
    default) and f32."""
    need(v4)
    for kvt, cmp, one in (("f16", 52, 1408), ("f32", 104, 2816)):
        out = subprocess.run([str(BIN), "info", "-m", str(v4), "--kv-type", kvt], capture_output=True, text=True,
                             check=True).stdout
        # the unit is the rows alone: 2 CSA x (32 + 16) / 4 + HCA 32 / 16 values
        assert (f"KV groups ({kvt}): compressed {cmp} B/token (rows {cmp}.0 B/token: " in out
                and "window 23 tables x 26 values" in out and "(15 of the tables: 8, " in out), out
        m = re.search(r"KV at 1048576\s+grouped ([\d.]+) MiB \(compressed ([\d.]+) \+ window ([\d.]+)\) = (\d+) "
                      r"B/token; one row per position ([\d.]+) MiB", out)
        assert m and float(m[2]) == cmp and float(m[3]) < 0.1 and int(m[4]) == cmp and float(m[5]) == one, out


def test_sliced_hca_rows(tmp_path, v4):  # noqa: F811
    """Blocks of 8 positions under the HCA rate 16: each HCA row is cut into two slices, one in
    each block of its window (graph/dsv4.h), so a block's values depend on the next one's
    positions. Prefix hits stop at multiples of 16, shared blocks are copied before a closing
    window writes its slice back into them, and the outputs stay those of cold runs."""
    need(v4)
    prompts = workload(129000, DOC, BRANCH)
    ref, _ = batch(tmp_path, v4, prompts, *BASE, "--swa-full", "--no-prefix-cache")
    got, st = batch(tmp_path, v4, prompts, *BASE, "--block-size", "8", "--kv-mem", "8M")
    print("roomy", [(q["cached_tokens"], q["replayed_tokens"]) for q in got], st)
    assert same(ref, got)
    assert got[2]["cached_tokens"] == 192 and got[3]["cached_tokens"] == 288  # (203 - 1) // 8 * 8 = 200 -> 192
    got, st = batch(tmp_path, v4, prompts, "--max-batch-tokens", "7", "--kv-type", "f32", "--block-size", "8",
                    "--kv-mem", "300K", concurrency=4)
    print("tight", [(q["cached_tokens"], q["replayed_tokens"]) for q in got], st)
    assert same(ref, got) and all(q["cached_tokens"] % 16 == 0 for q in got), st
