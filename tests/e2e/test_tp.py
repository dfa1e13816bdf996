"""Tensor parallel over Open MPI (--tp N, issue 37): the logits of every
prompt position and generated token are bit-identical to one rank at 2 and
3 ranks (stories260K, SmolLM2, Gemma 3, the tiny DeepSeek-V3: MLA + MoE),
with each rank holding only its part of the split weights and, where
attention is split by KV heads, only its heads' KV cache (run --stats);
batched serving (concurrency, chunked prefill, preemption, prefix-cache hits)
gives the same greedy ids as one rank alone; a rank that is killed or hangs
ends the job with a clear error from rank 0 within 10 s, and the request in
flight gets an error event instead of a truncated success.

Needs mpirun (Debian openmpi-bin, installed by scripts/setup.sh) and a binary
built with DI_MPI; ranks share this machine's cores (--oversubscribe)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from test_batch import greedy_lines, ids_by_id, prompts

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DEEPINFER_BIN", ROOT / "build" / "deepinfer"))
MODELS = Path(os.environ.get("DI_MODELS_DIR", Path.home() / ".cache/deepinfer/models"))
GEN = Path(os.environ.get("DI_TEST_CACHE") or Path.home() / ".cache" / "deepinfer" / "gen")
STORIES = MODELS / "stories260K" / "stories260K.gguf"
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = MODELS / "gemma-3-270m-q4_k_m.gguf"
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]
# DI_TP_HOSTS=2 pretends two hosts (rank r on host r % 2: {0} and {1} at 2 ranks, {0, 2} and {1}
# at 3); DI_TP_LAYOUT=two-level then runs every collective as a gather on the host's first rank,
# the exchange between hosts' first ranks and a broadcast on the host (dist/comm.c)
TWO_LEVEL = {"DI_TP_HOSTS": "2", "DI_TP_LAYOUT": "two-level"}
PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside with"


@pytest.fixture(scope="module", autouse=True)
def mpi():
    if not BIN.exists():
        pytest.skip(f"{BIN} not built (set DEEPINFER_BIN)")
    if not shutil.which("mpirun"):
        pytest.skip("mpirun not installed (openmpi-bin; scripts/setup.sh installs it)")
    r = subprocess.run([str(BIN), "info", "--tp", "2"], capture_output=True, text=True, timeout=60)
    if "built without MPI" in r.stderr:
        pytest.skip("deepinfer built without MPI (libopenmpi-dev, libhwloc-dev)")


def tp(n):
    return MPIRUN + ["-np", str(n)] if n > 1 else []


def run_logits(tmp_path, model, n, *extra, env=None):
    out = tmp_path / f"logits{n}.bin"
    argv = tp(n) + [a for k in (env or {}) for a in ("-x", k)] + [str(BIN), "run", "-m", str(model), "-p", PROMPT, "-n", "8", "--temp", "0", "--threads", "1",
                    "--ignore-eos", "--dump-logits", str(out), "--print-ids", "--stats", *extra] + (["--tp", str(n)] if n > 1 else [])
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    assert len(data) > 0
    return data, r.stdout, json.loads(r.stderr.strip().splitlines()[-1])["tp"]


def check_weights_split(one, tp, n):
    """Each rank holds the replicated part and its own share of the split
    matrices: every split byte on exactly one rank, none on all."""
    total, repl, held = one["weights_total"], tp["weights_replicated"], tp["weights_bytes"]
    assert one["weights_bytes"] == [total] and tp["weights_total"] == total and len(held) == n
    assert 0 < repl < total
    assert all(repl <= w < total for w in held), held
    assert sum(w - repl for w in held) == total - repl, (held, repl, total)
    return total, repl, held


def check_logits(tmp_path, model, ranks):
    if not model.exists():
        pytest.skip(f"{model} missing (scripts/fetch-models)")
    ref, ids, one = run_logits(tmp_path, model, 1)
    stats = {}
    for n in ranks:
        got, got_ids, stats[n] = run_logits(tmp_path, model, n)
        assert got_ids == ids
        assert got == ref, f"--tp {n}: logits differ from one rank"
        check_weights_split(one, stats[n], n)
        kv, kv1 = stats[n]["kv_bytes"], one["kv_bytes"][0]
        # attention split by heads: each KV head's cache on exactly one rank; else (MLA's
        # latent rows, a single KV head) every rank holds the whole pool
        assert len(kv) == n and kv1 > 0 and (sum(kv) == kv1 and max(kv) < kv1 or kv == [kv1] * n), (kv, kv1)
    return one, stats


def check_heads_split(one, stats):
    for n, st in stats.items():
        assert sum(st["kv_bytes"]) == one["kv_bytes"][0] and len(set(st["kv_bytes"])) <= 2, st["kv_bytes"]


def test_logits_stories(tmp_path):
    check_heads_split(*check_logits(tmp_path, STORIES, [2, 3]))  # 4 KV heads: 2+2, 2+1+1


def test_logits_smollm2(tmp_path):
    one, stats = check_logits(tmp_path, SMOL, [2, 3])
    check_heads_split(one, stats)  # 3 KV heads: 2+1, 1+1+1
    for n, st in stats.items():
        total, repl, held = check_weights_split(one, st, n)
        # 576/1536-wide matrices split on 16-column tiles, Q/K/V by KV head (2 of 3 on rank 0
        # at 2 ranks): each rank ~1/n of them
        assert all(w - repl <= (total - repl) / n * 1.1 for w in held), held
        # and the rest is never brought in: every rank's resident set shrinks by at
        # least half of what it no longer holds (the file is mapped, not read, at --tp)
        assert all(rss <= one["rss_bytes"][0] - 0.5 * (total - w) for rss, w in zip(st["rss_bytes"], held)), (
            st["rss_bytes"], one["rss_bytes"])
        # the tied embedding/classifier is split by vocabulary too: only the norms are on every rank
        assert repl < total / 100, (repl, total)
    # the heads' and GLU's gathers move int8 blocks (Q4_1's activation format), not f32: fewer
    # bytes for the same exchanges and the same bits as the f32 gather (DI_TP_F32=1)
    ref, _, _ = run_logits(tmp_path, SMOL, 1)
    f32, _, st32 = run_logits(tmp_path, SMOL, 2, env={"DI_TP_F32": "1"})
    assert f32 == ref
    assert st32["exchanges"] == stats[2]["exchanges"] and st32["exchange_bytes"] > 1.3 * stats[2]["exchange_bytes"], (
        st32, stats[2])


def test_logits_gemma3(tmp_path):
    # one KV head: split by query heads (2+2, 2+1+1) over K/V computed and cached on every rank
    one, stats = check_logits(tmp_path, GEMMA, [2, 3])
    assert all(st["kv_bytes"] == one["kv_bytes"] * len(st["kv_bytes"]) for st in stats.values())


def test_logits_deepseek_v3_tiny(tmp_path):
    # made by tests/e2e/test_deepseek_engine.py's fixture (numpy); skipped until it ran
    check_logits(tmp_path, GEN / "deepseek-v3-tiny" / "v3-tok", [2, 3])  # 16 experts: 5+5+6 at 3 ranks


@pytest.mark.parametrize("model", [STORIES, SMOL, GEN / "deepseek-v3-tiny" / "v3-tok"], ids=["stories", "smollm2",
                                                                                              "deepseek-v3-tiny"])
def test_two_level_layout_same_bits(tmp_path, model):
    # whole logits rows (--dump-logits: the classifier gathered on rank 0), the MoE experts'
    # all-gather in place, and split-logits greedy ids (each rank's slice reduced, gathered)
    if not model.exists():
        pytest.skip(f"{model} missing")
    ref, ids, _ = run_logits(tmp_path, model, 1)
    split1, _ = run_ids(model, 1, "--temp", "0")
    for n in (2, 3):
        got, got_ids, st = run_logits(tmp_path, model, n, env=TWO_LEVEL)
        assert (st["hosts"], st["layout"]) == (2, "two-level"), st
        assert got == ref and got_ids == ids, f"--tp {n}, two-level: logits differ from one rank"
        split, st = run_ids(model, n, "--temp", "0", env=TWO_LEVEL)
        assert split == split1 and st["layout"] == "two-level", (split, split1, st)


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "gemma3", "mistral"])
def test_logits_small_archs(tmp_path, name):
    # test_arch_numpy's tiny f32 checkpoints: 4 query and 2 KV heads, split one KV head per rank
    # at 2 ranks (Q/K/V biases, QK-norm, sliding windows, soft-caps on a rank's heads); at 3 (and
    # qwen2 at 4) fewer KV heads than ranks: each rank computes and caches the one KV head its
    # query heads read (KV head 0 on ranks 0-1, 1 on rank 2; the query heads 1+1+2, 1+1+1+1,
    # Q biases from the middle of a KV head's group); the FFN's 96 columns split 48+48 and 32+32+32
    import numpy as np
    from test_arch_numpy import ARCHS, V, make_model
    arch, n_layer, extra = ARCHS[name]
    rng = np.random.default_rng(11)
    make_model(tmp_path / name, arch, n_layer, rng, **extra)
    ids = ",".join(str(int(i)) for i in rng.integers(3, V, 19))
    out = {}
    for n in (1, 2, 3, 4) if name == "qwen2" else (1, 2, 3):
        dump = tmp_path / f"l{n}.f32"
        argv = tp(n) + [str(BIN), "run", "-m", str(tmp_path / name), "--ids", ids, "-n", "6", "--temp", "0",
                        "--ignore-eos", "--threads", "1", "--print-ids", "--dump-logits", str(dump), "--stats"] + (
                            ["--tp", str(n)] if n > 1 else [])
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out[n] = (dump.read_bytes(), r.stdout, json.loads(r.stderr.strip().splitlines()[-1])["tp"])
        assert out[n][0] == out[1][0] and out[n][1] == out[1][1], f"{name} --tp {n}: logits differ from one rank"
    kv1 = out[1][2]["kv_bytes"][0]
    assert out[2][2]["kv_bytes"] == [kv1 // 2] * 2  # one KV head per rank
    for n in out:  # fewer KV heads than ranks: still one KV head per rank, not the whole cache
        assert n < 3 or out[n][2]["kv_bytes"] == [kv1 // 2] * n, (n, out[n][2]["kv_bytes"], kv1)


def run_batch(tmp_path, n, lines, *args, tag, model=SMOL):
    inp, outp, stats = tmp_path / f"{tag}.in.jsonl", tmp_path / f"{tag}.out.jsonl", tmp_path / f"{tag}.stats.json"
    inp.write_text("\n".join(lines) + "\n")
    argv = tp(n) + [str(BIN), "batch", "-m", str(model), "-i", str(inp), "-o", str(outp), "--threads", "1",
                    "--stats-json", str(stats), "-q", *map(str, args)] + (["--tp", str(n)] if n > 1 else [])
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in outp.read_text().splitlines()], json.loads(stats.read_text())


def test_batched_serving_matches_one_rank(tmp_path):
    # the serving determinism check across rank counts: 32 prompts one at a
    # time on one rank against all 32 at once on 2 and 3 ranks
    if not SMOL.exists():
        pytest.skip(f"{SMOL} missing (scripts/fetch-models)")
    shared = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    lines = greedy_lines(prompts(32, seed=5, shared=shared), 10)
    ref_res, _ = run_batch(tmp_path, 1, lines, "--concurrency", 1, tag="one")
    ref = ids_by_id(ref_res)
    for n in (2, 3):
        got, st = run_batch(tmp_path, n, lines, "--concurrency", 32, tag=f"tp{n}")
        assert ids_by_id(got) == ref, f"--tp {n}"
        assert st["steps"] < 32 * 10  # batched
    sub = lines[:8]
    sub_ref = {k: v for k, v in ref.items() if k in {json.loads(x)["custom_id"] for x in sub}}
    got, st1 = run_batch(tmp_path, 2, sub, "--concurrency", 1, tag="tp2-one")
    assert ids_by_id(got) == sub_ref
    assert st1["prefix_hit_tokens"] > 0  # later prompts read the shared prefix's blocks
    # small blocks in a small pool: preemption and chunked prefill (64 positions of rank 0's
    # KV rows at 2 ranks, which hold 2 of SmolLM2's 3 KV heads)
    tiny = str(st1["kv_block_bytes"] // st1["kv_block_size"] * 4 * 16)
    got, st = run_batch(tmp_path, 2, sub, "--concurrency", 8, "--block-size", 4, "--kv-mem", tiny,
                        "--max-batch-tokens", 7, tag="tiny")
    assert ids_by_id(got) == sub_ref
    assert st["preemptions"] > 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_pid(mpirun_pid, rank):
    for _ in range(100):
        for c in Path(f"/proc/{mpirun_pid}/task/{mpirun_pid}/children").read_text().split():
            try:
                env = Path(f"/proc/{c}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
                return int(c)
        time.sleep(0.1)
    raise AssertionError(f"rank {rank} not found")


# two-level (3 ranks over pretend hosts {0, 2} and {1}): rank 2 is lost inside host 0 (its leader
# waits in the host's gather), rank 1 is host 1's leader (rank 0 waits in the leaders' exchange)
@pytest.mark.parametrize("sig,n,victim_rank,layout", [
    (signal.SIGKILL, 2, 1, None), (signal.SIGSTOP, 2, 1, None), (signal.SIGSTOP, 3, 2, TWO_LEVEL),
    (signal.SIGKILL, 3, 1, TWO_LEVEL)], ids=["killed", "hung", "hung-in-host", "killed-leader"])
def test_lost_rank_is_a_clear_error(tmp_path, sig, n, victim_rank, layout):
    if not SMOL.exists():
        pytest.skip(f"{SMOL} missing (scripts/fetch-models)")
    port = free_port()
    env = dict(os.environ, DI_TP_TIMEOUT_MS="3000", **(layout or {}))
    p = subprocess.Popen(tp(n) + [a for k in (layout or {}) for a in ("-x", k)] + [
        str(BIN), "serve", "-m", str(SMOL), "--port", str(port), "--threads", "1", "--tp", str(n)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    victim = None
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise AssertionError("server not ready")
        body = json.dumps({"prompt": "Hello", "max_tokens": 3000, "temperature": 0, "ignore_eos": True,
                           "stream": True}).encode()
        resp = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", body), timeout=30)
        first = resp.readline()
        assert first.startswith(b"data:") or first.strip() == b"" or first.startswith(b":"), first
        victim = rank_pid(p.pid, victim_rank)
        t0 = time.monotonic()
        os.kill(victim, sig)
        events = []
        try:
            for raw in resp:
                if raw.startswith(b"data:"):
                    events.append(raw[5:].strip())
        except OSError:
            pass
        rc = p.wait(timeout=15)
        elapsed = time.monotonic() - t0
        err = p.stderr.read()
    finally:
        if victim and sig == signal.SIGSTOP:
            try:
                os.kill(victim, signal.SIGKILL)
            except OSError:
                pass
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc != 0
    assert elapsed < 10, elapsed
    assert "deepinfer: rank 0:" in err, err
    assert "exiting now" not in err, err
    # the request in flight ended with an error, not with a finish_reason
    finished = [e for e in events if e.startswith(b"{") and b'"finish_reason":"' in e]
    assert not finished, finished[-1]
    assert any(b'"error"' in e for e in events), (rc, events[-3:], err[-2000:])


def test_sampled_n3_matches_one_rank(tmp_path):
    # n=3 completions share the prompt's last partial block: copy-on-write of
    # KV blocks, which the followers repeat before the next step
    if not SMOL.exists():
        pytest.skip(f"{SMOL} missing (scripts/fetch-models)")
    lines = greedy_lines(prompts(4, seed=9), 8, n=3, temperature=0.9, seed=11)
    # and with a top-k: the 3 completions sample from the merged candidates of split logits
    lines += [x.replace('"custom_id": "r', '"custom_id": "k') for x in
              greedy_lines(prompts(4, seed=9), 8, n=3, temperature=0.9, top_k=40, seed=12)]
    ref, _ = run_batch(tmp_path, 1, lines, "--concurrency", 4, tag="one")
    got, _ = run_batch(tmp_path, 2, lines, "--concurrency", 4, tag="tp2")
    assert ids_by_id(got) == ids_by_id(ref)
    assert any(len({tuple(c) for c in v}) > 1 for v in ids_by_id(ref).values())  # sampled, not all alike


def test_info_placement_and_latency():
    r = subprocess.run(tp(2) + [str(BIN), "info", "--tp", "2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("tensor parallel: 2 ranks"), r.stdout
    assert any(x.startswith("rank 0: host ") for x in lines) and any(x.startswith("rank 1: host ") for x in lines)
    lat = [x for x in lines if x.startswith("exchange: ")]
    assert lat and float(lat[0].split()[1]) > 0, r.stdout
    assert "hosts: 1 (MPI shared-memory groups)" in lines and "host 0: ranks 0, 1" in lines, r.stdout
    assert "layout: flat (one host)" in lines and any(x.startswith("links: intra-host ") for x in lines), r.stdout


def info_lines(n, *env):
    r = subprocess.run(tp(n) + [a for e in env for a in ("-x", e.split("=")[0])] + [str(BIN), "info", "--tp", str(n)],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, **dict(e.split("=") for e in env)))
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_info_hosts_links_and_layout():
    # pretend hosts: the hosts' ranks, both links measured, the layout chosen by the model of a
    # 64 KB all-gather from them (on one machine both links are shared memory: flat wins), or forced
    lines = info_lines(3, "DI_TP_HOSTS=2")
    assert "hosts: 2 (DI_TP_HOSTS: rank r on pretend host r % hosts)" in lines, lines
    assert "host 0: ranks 0, 2" in lines and "host 1: ranks 1" in lines, lines
    links = [x for x in lines if x.startswith("links: ")][0]
    assert "intra-host" in links and "; inter-host" in links and "not measured" not in links, links
    lay = [x for x in lines if x.startswith("layout: ")][0]
    model = [float(x.split()[-2]) for x in lay.split("; ")[1].split(", ")]
    assert lay.startswith("layout: " + ("two-level" if model[1] < model[0] else "flat") + " (the faster by"), lay
    lay = [x for x in info_lines(3, "DI_TP_HOSTS=2", "DI_TP_LAYOUT=two-level") if x.startswith("layout: ")][0]
    assert lay.startswith("layout: two-level (DI_TP_LAYOUT)"), lay


def test_info_pinning():
    # --bind-to none is respected unless DI_TP_BIND=1; then each of 2 ranks on this host gets its
    # share of the cores (checked with hwloc_get_cpubind); more ranks than cores: not pinned
    cores = len(os.sched_getaffinity(0))
    lines = info_lines(2)
    assert all("not pinned (mpirun --bind-to none" in x for x in lines if x.startswith("rank ")), lines
    ranks = [x for x in info_lines(2, "DI_TP_BIND=1") if x.startswith("rank ")]
    if cores >= 2:
        assert all("pinned by deepinfer to cores" in x for x in ranks), ranks
        assert len({x.split("PUs ")[1].split()[0] for x in ranks}) == 2, ranks  # two different PU sets
    ranks = [x for x in info_lines(cores + 1, "DI_TP_BIND=1") if x.startswith("rank ")]
    assert all(f"not pinned ({cores + 1} ranks on this host's" in x for x in ranks), ranks


def test_info_per_rank_memory():
    # `info -m MODEL --tp N`: what each rank will hold, from the file's metadata alone
    if not SMOL.exists():
        pytest.skip(f"{SMOL} missing (scripts/fetch-models)")
    r = subprocess.run(tp(3) + [str(BIN), "info", "-m", str(SMOL), "--ctx", "4096", "--tp", "3"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    mem = [x for x in lines if x.startswith("memory:")][0].split()
    total, kv = float(mem[2]), float(mem[-2])
    head = [x for x in lines if x.startswith("--tp 3:")]
    assert head and "split by KV head" in head[0], r.stdout
    repl = float(head[0].split("(")[1].split()[0])
    ranks = [x.split() for x in lines if x.strip().startswith("rank ") and "weights" in x]
    assert len(ranks) == 3, r.stdout
    w = [float(x[3]) for x in ranks]
    k = [float(x[7]) for x in ranks]
    assert abs(sum(x - repl for x in w) - (total - repl)) < 0.2, (w, repl, total)  # MiB printed to 0.1
    assert abs(sum(k) - kv) < 0.2 and max(k) < kv, (k, kv)  # 3 KV heads: one each


def test_tp_errors_are_clear():
    # without mpirun: one rank where two were asked for
    r = subprocess.run([str(BIN), "run", "-m", str(STORIES), "-p", "x", "--tp", "2"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "mpirun -np 2" in r.stderr, r.stderr
    r = subprocess.run([str(BIN), "run", "-m", str(STORIES), "-p", "x", "--tp", "zero"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--tp: 'zero'" in r.stderr, r.stderr
    r = subprocess.run([str(BIN), "tokenize", "--tp", "2"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--tp" in r.stderr, r.stderr


@pytest.mark.parametrize("model,opts", [(GEMMA, []), (SMOL, ["--swa-window", "16"])], ids=["gemma3-groups", "window"])
def test_sliding_window_batches_match_one_rank(tmp_path, model, opts):
    # Gemma 3's per-layer-group block tables, and a forced window (blocks
    # dropped behind it), sent to the followers with every step
    if not model.exists():
        pytest.skip(f"{model} missing (scripts/fetch-models)")
    lines = greedy_lines(prompts(6, seed=4, shared="A long shared document about rivers and mountains. " * 6), 8)
    runs = []
    for n in (1, 2):
        inp, outp = tmp_path / f"in{n}.jsonl", tmp_path / f"out{n}.jsonl"
        inp.write_text("\n".join(lines) + "\n")
        argv = tp(n) + [str(BIN), "batch", "-m", str(model), "-i", str(inp), "-o", str(outp), "--threads", "1", "-q",
                        "--concurrency", "6", "--block-size", "4", *opts] + (["--tp", "2"] if n > 1 else [])
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        runs.append(ids_by_id([json.loads(x) for x in outp.read_text().splitlines()]))
    assert runs[1] == runs[0]


def run_ids(model, n, *args, env=None):
    env = env or {}
    argv = tp(n) + [a for k in env for a in ("-x", k)] + [str(BIN), "run", "-m", str(model), "-p", PROMPT, "-n", "8",
                                                            "--threads", "1", "--ignore-eos", "--print-ids", "--stats",
                                                            *args] + (["--tp", str(n)] if n > 1 else [])
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1], json.loads(r.stderr.strip().splitlines()[-1])["tp"]


# greedy (each rank's argmax), seeded top-k sampling through top-p and min-p (each rank's
# top-k candidates), and sampling without a top-k (the whole rows, gathered as before)
SAMPLING = {"greedy": ["--temp", "0"], "topk-topp": ["--temp", "0.9", "--top-k", "40", "--top-p", "0.9", "--seed", "7"],
            "topk256-minp": ["--temp", "1.3", "--top-k", "256", "--top-p", "1", "--min-p", "0.01", "--seed", "3"],
            "no-topk": ["--temp", "0.9", "--top-k", "0", "--top-p", "0.8", "--seed", "5"]}


@pytest.mark.parametrize("model,vocab,ranks", [(SMOL, 49152, (2, 3)), (GEMMA, 262144, (2,))], ids=["smollm2", "gemma3"])
def test_sampling_on_split_logits(model, vocab, ranks):
    # the classifier's columns (the vocabulary) stay split: each rank reduces its slice of
    # the logits row and rank 0 merges, instead of gathering the whole row; same ids as one
    # rank, the same exchanges, and (n-1)/n of a row's floats per sampled token fewer bytes
    if not model.exists():
        pytest.skip(f"{model} missing (scripts/fetch-models)")
    for name, args in SAMPLING.items():
        ref, _ = run_ids(model, 1, *args)
        for n in ranks:
            got, st = run_ids(model, n, *args)
            full, st_full = run_ids(model, n, *args, env={"DI_TP_FULL_LOGITS": "1"})
            assert got == ref and full == ref, f"{name} --tp {n}: {got} / {full} vs one rank {ref}"
            assert st["exchanges"] == st_full["exchanges"], (st, st_full)
            saved = st_full["exchange_bytes"] - st["exchange_bytes"]
            rows = 9  # the prompt's last position and 8 generated tokens
            if name == "no-topk":
                assert saved == 0, (name, st, st_full)
            else:
                assert saved >= rows * vocab * 4 * (n - 1) / n * 0.95, (name, n, saved, st, st_full)


def test_mixed_sampling_batch_matches_one_rank(tmp_path):
    # requests whose sampling needs whole rows (logprobs, logit_bias, penalties, a grammar, no
    # top-k) share steps with ones sampled on split logits: a step gathers whole rows when any
    # of its rows needs one; tokens and logprobs are the same as one rank's
    if not SMOL.exists():
        pytest.skip(f"{SMOL} missing (scripts/fetch-models)")
    ps = prompts(8, seed=13)
    bodies = [{"temperature": 0}, {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 1},
              {"temperature": 0.8, "top_k": 50, "min_p": 0.05, "seed": 2}, {"temperature": 0, "logprobs": 3},
              {"temperature": 0.7, "top_k": 30, "logprobs": 2, "seed": 3}, {"temperature": 0, "logit_bias": {"13": 5}},
              {"temperature": 0.9, "top_p": 0.9, "seed": 4}, {"temperature": 0.8, "top_k": 40, "seed": 5,
                                                              "frequency_penalty": 0.5}]
    lines = [json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
                         "body": {"prompt": p, "max_tokens": 8, "return_token_ids": True, **b}})
             for i, (p, b) in enumerate(zip(ps, bodies))]

    def choices(res):
        out = {}
        for r in res:
            assert r["error"] is None, r["error"]
            out[r["custom_id"]] = [(c["token_ids"], c.get("logprobs")) for c in r["response"]["body"]["choices"]]
        return out

    ref, _ = run_batch(tmp_path, 1, lines, "--concurrency", 8, tag="one")
    got, _ = run_batch(tmp_path, 2, lines, "--concurrency", 8, tag="tp2")
    assert choices(got) == choices(ref)
    assert choices(ref)["r3"][0][1] is not None  # logprobs were returned
    # alone, each sampled on split logits (except r3..r7's whole rows) in steps of its own
    got, _ = run_batch(tmp_path, 3, lines, "--concurrency", 1, tag="tp3")
    assert choices(got) == choices(ref)


def test_deepseek_v4_tiny(tmp_path):
    # made by tests/e2e/test_deepseek_v4_engine.py's fixture (numpy); skipped until it ran.
    # DeepSeek-V4's layers run whole on every rank (their experts column-split); its classifier
    # is split by vocabulary like the others': the same logits bits, and greedy / top-k sampling
    # on split logits give one rank's ids
    model = GEN / "deepseek-v4-engine-g1"
    if not (model / "tokenizer.json").exists():
        pytest.skip(f"{model} missing (made by test_deepseek_v4_engine.py)")
    ref, ids, _ = run_logits(tmp_path, model, 1)
    got, got_ids, _ = run_logits(tmp_path, model, 2)
    assert got_ids == ids and got == ref, "--tp 2: DeepSeek-V4 logits differ from one rank"
    for args in (SAMPLING["greedy"], SAMPLING["topk-topp"]):
        one, _ = run_ids(model, 1, *args)
        two, st = run_ids(model, 2, *args)
        _, st_full = run_ids(model, 2, *args, env={"DI_TP_FULL_LOGITS": "1"})
        assert two == one and st["exchange_bytes"] < st_full["exchange_bytes"], (two, one, st, st_full)


def run_spec(tmp_path, model, n, prompt, *spec, env=None, tag=""):
    """run with a drafter: (ids, every generated token's logits, the spec stats, the MTP
    module's logits rows when env asks for them)"""
    env = dict(env or {})
    mtp = tmp_path / f"mtp{n}{tag}.bin"
    env["DI_MTP_DUMP"] = str(mtp)
    dump = tmp_path / f"spec{n}{tag}.bin"
    argv = tp(n) + [a for k in env for a in ("-x", k) if n > 1] + [
        str(BIN), "run", "-m", str(model), "-p", prompt, "-n", "16", "--temp", "0", "--threads", "1", "--ignore-eos",
        "--print-ids", "--dump-logits", str(dump), "--stats", *spec] + (["--tp", str(n)] if n > 1 else [])
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stderr.strip().splitlines()[-1])
    return (r.stdout.strip().splitlines()[-1], dump.read_bytes(), st["spec"],
            mtp.read_bytes() if mtp.exists() else b"", st["tp"])


REPEAT = "The cat sat on the mat. The cat sat on the mat. The cat sat on the"


@pytest.mark.parametrize("kind", ["ngram", "draft", "mtp", "mtp-v4"])
def test_speculative_decoding_under_tp(tmp_path, kind):
    # rank 0's engine drafts (n-gram lookup; a draft model on rank 0 alone, here SmolLM2 as its
    # own draft; the MTP module, which every rank runs like a layer of the model), every rank
    # verifies in the same step: the ids, every token's logits, the drafts (the same drafted and
    # accepted counts; for MTP the module's logits rows, DI_MTP_DUMP) are one rank's, at 2 and
    # 3 ranks, and at 3 ranks over two pretend hosts in the two-level layout. DeepSeek-V4's module
    # (hyper-connection streams, its window in the cache plan) runs whole on every rank, as its layers
    model = {"mtp": GEN / "deepseek-v3-tiny" / "v3-mtp-tok", "mtp-v4": GEN / "deepseek-v4-engine-mtp-g1"}.get(kind, SMOL)
    if not model.exists():
        pytest.skip(f"{model} missing (made by test_spec_mtp*.py, or scripts/fetch-models)")
    spec = {"ngram": ("--spec", "ngram"), "draft": ("--spec", "draft", "--draft-model", str(SMOL), "--spec-k-max", "4"),
            "mtp": ("--spec", "mtp"), "mtp-v4": ("--spec", "mtp")}[kind] + ("--spec-mode", "always")
    kind = kind.split("-")[0]
    prompt = REPEAT if kind != "mtp" else "Hello world, this is"
    ref = run_spec(tmp_path, model, 1, prompt, *spec)
    assert ref[2]["kind"] == kind and ref[2]["drafted"] > 0 and ref[2]["verify_steps"] > 0, ref[2]
    assert kind == "mtp" or ref[2]["accepted"] > 0, ref[2]  # the random module's drafts: never accepted
    assert (len(ref[3]) > 0) == (kind == "mtp")
    for n, env in ((2, None), (3, None), (3, TWO_LEVEL)):
        got = run_spec(tmp_path, model, n, prompt, *spec, env=env, tag=f"-{bool(env)}")
        assert got[0] == ref[0], (n, env, got[0], ref[0])
        assert got[1] == ref[1] and got[2] == ref[2] and got[3] == ref[3], f"--tp {n} {env}: differs from one rank"
        assert got[4]["layout"] == ("two-level" if env else "flat"), got[4]


def test_mtp_batched_under_tp(tmp_path):
    # the engine's MTP rounds over a batch (chained drafts in scratch rows of free blocks, small
    # blocks so sequences cross them) at 2 ranks: the ids of one rank with speculation off
    model = GEN / "deepseek-v3-tiny" / "v3-mtp-tok"
    if not model.exists():
        pytest.skip(f"{model} missing (made by test_spec_mtp.py)")
    lines = greedy_lines(prompts(6, seed=5), 12) + [x.replace('"custom_id": "r', '"custom_id": "s') for x in greedy_lines(
        prompts(4, seed=6), 10, temperature=0.9, seed=3)]
    ref, _ = run_batch(tmp_path, 1, lines, "--concurrency", 10, "--spec", "off", tag="off", model=model)
    got, st = run_batch(tmp_path, 2, lines, "--concurrency", 10, "--spec", "mtp", "--spec-mode", "always",
                        "--block-size", 4, tag="mtp", model=model)
    assert ids_by_id(got) == ids_by_id(ref)
    assert sum(len(c) for v in ids_by_id(ref).values() for c in v) > len(lines)
    assert st["batch_tokens"] > st["prompt_tokens"] + st["generated_tokens"], st  # drafts were verified
