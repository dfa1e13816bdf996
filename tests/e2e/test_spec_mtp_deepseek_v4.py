"""The MTP drafter (`--spec mtp`) on DeepSeek-V4 never changes the output.

The tiny serving-engine DeepSeek-V4 (test_deepseek_v4_engine's model: sliding / CSA / HCA
layers, hyper-connections, hash + routed MoE, DeepSeek-V3's tokenizer) with a random
multi-token-prediction block (gen_tiny.py's "engine-mtp": mtp.0.* under DeepSeek's names; its
forward is checked against transformers' blocks by tests/unit/test_deepseek_v4_mtp.c). Random
weights make the drafts rarely right; what is checked is that greedy and seeded sampled
completions (12 prompts through `deepinfer batch`, 8 at once with every other request opting out,
and 12 at once in a pool small enough to preempt) are identical to `--spec off` in both cache
layouts (grouped window tables, and --swa-full's one row per position), that `run --stats`
reports the drafts and `--dump-logits` files are byte-identical, and that `--spec mtp` on the
model without MTP weights is a clear start-up error.

Binary: $DEEPINFER_BIN (default build/deepinfer)."""
import json
import subprocess
import sys

import pytest

import test_spec as base
from test_deepseek_v4_engine import CACHE as V4_CACHE, GEN, tiny_model, v4  # noqa: F401 (the fixture)

CACHE = V4_CACHE.with_name("deepseek-v4-engine-mtp-g1")
SPEC = ("--spec", "mtp", "--spec-mode", "always")
N = 12
ONE = ("--threads", "1")
KV_TIGHT = "300K"  # 12 sequences of ~40 positions: some wait, some are preempted


def bodies(sampled, mix=False):
    return base.bodies(sampled, mix)[:N]


@pytest.fixture(scope="module")
def v4_mtp():
    return tiny_model("engine-mtp", CACHE)


@pytest.mark.parametrize("layout", [(), ("--swa-full",)], ids=["grouped", "one-row"])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_identical_to_off(tmp_path, v4_mtp, sampled, layout):
    base.need(v4_mtp)
    ref = base.batch(tmp_path, v4_mtp, bodies(sampled), "--spec", "off", "--concurrency", 8, *ONE, *layout, tag="off")
    assert sum(len(v[0]) for v in ref.values()) > len(ref)
    got = base.batch(tmp_path, v4_mtp, bodies(sampled, mix=True), *SPEC, "--concurrency", 8, *ONE, *layout, tag="mtp")
    assert got == ref


def test_identical_under_preemption(tmp_path, v4_mtp):
    base.need(v4_mtp)
    ref = base.batch(tmp_path, v4_mtp, bodies(True), "--spec", "off", "--concurrency", 1, *ONE, tag="off")
    got = base.batch(tmp_path, v4_mtp, bodies(True), *SPEC, "--concurrency", 12, "--kv-mem", KV_TIGHT, *ONE,
                     "--stats-json", tmp_path / "st.json", tag="tight")
    assert got == ref
    assert json.loads((tmp_path / "st.json").read_text())["preemptions"] > 0



@pytest.mark.parametrize("layout", [(), ("--swa-full",)], ids=["grouped", "one-row"])
def test_parallel_sampling(tmp_path, v4_mtp, layout):
    """n > 1: every completion drafts with its own module state, and is the one without speculation (grouped
    cache: also when KV pressure preempts)."""
    base.need(v4_mtp)
    b = [dict(x, n=3) for x in bodies(True)[:6]]
    ref = base.batch(tmp_path, v4_mtp, b, "--spec", "off", "--concurrency", 6, *ONE, *layout, tag="off", choices=True)
    assert all(len(v) == 3 for v in ref.values())
    tight = ("--kv-mem", "120K") if not layout else ()  # grouped: 18 sequences, some preempted
    got = base.batch(tmp_path, v4_mtp, b, *SPEC, "--concurrency", 6, *ONE, *layout, *tight, "--stats-json",
                     tmp_path / "st.json", tag="mtp", choices=True)
    assert got == ref
    st = json.loads((tmp_path / "st.json").read_text())
    assert st["spec_mtp_rows"] > 0 and (st["preemptions"] > 0 if tight else True)
    if not tight:  # (under pressure a draft may find no free block)
        # each verification yields its accepted drafts and one token more
        decode = base.mtp_drafted_steps(ref)
        assert st["spec_verify_steps"] + st["spec_accepted"] >= decode > 0, (st, decode)


@pytest.mark.parametrize("layout", [(), ("--swa-full",)], ids=["grouped", "one-row"])
def test_logit_dumps_and_stats(tmp_path, v4_mtp, layout):
    base.need(v4_mtp)
    p = base.SEEDS[0]
    args = ("-p", p, "-n", 16, "--temp", 0, "--print-ids", *ONE, *layout)
    a = base.run(v4_mtp, *args, "--dump-logits", tmp_path / "off.bin")
    assert len(json.loads(a.stdout.splitlines()[-1])) == 16
    b = base.run(v4_mtp, *args, "--dump-logits", tmp_path / "on.bin", "--stats", *SPEC)
    assert a.stdout == b.stdout
    assert (tmp_path / "off.bin").read_bytes() == (tmp_path / "on.bin").read_bytes()
    st = json.loads(b.stderr.strip().splitlines()[-1])["spec"]
    # --spec-mode always chains the module to the full draft length
    assert st["kind"] == "mtp" and st["drafted"] > st["verify_steps"] > 0 and st["accepted"] <= st["drafted"], st


def test_no_mtp_weights(v4):  # noqa: F811
    base.need(v4)
    r = base.run(v4, "-p", "hello", "-n", 2, "--spec", "mtp", check=False)
    assert r.returncode == 2 and "--spec mtp" in r.stderr and "MTP" in r.stderr, r.stderr


def test_gguf_mtp(tmp_path):
    """The block from llama.cpp's GGUF layout (to_gguf.py: blk.N.nextn.*, nextn_predict_layers), routed
    experts MXFP4 as converted files hold them, matrices F32 and Q8_0; the module's logits from GGUF
    are checked against the checkpoint's by tests/unit/test_deepseek_v4_mtp.c."""
    pytest.importorskip("gguf")
    base.need(GEN)
    subprocess.run([sys.executable, str(GEN), "--out", str(tmp_path), "--config", "tiny-mtp"], check=True,
                   stdout=subprocess.DEVNULL)
    ids = ("--ids", "5,6,7,8,9,10,11,12", "-n", 24, "--temp", 0, "--ignore-eos", "--print-ids", "--stats", *ONE)
    for m in ("F32", "Q8_0"):
        f = tmp_path / f"v4-mtp-{m}.gguf"
        subprocess.run([sys.executable, str(GEN.with_name("to_gguf.py")), "--hf", str(tmp_path / "tiny-mtp"), "--out",
                        str(f), "--matrices", m], check=True)
        a = base.run(f, *ids)
        b = base.run(f, *ids, *SPEC, "--spec-k-max", 3)
        assert a.stdout == b.stdout and len(json.loads(a.stdout.splitlines()[-1])) == 24
        st = json.loads(b.stderr.strip().splitlines()[-1])["spec"]
        assert st["kind"] == "mtp" and st["drafted"] > st["verify_steps"] > 0, st
