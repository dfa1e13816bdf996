"""The MTP drafter (`--spec mtp`) never changes the output.

The tiny DeepSeek-V3 (test_deepseek_engine's fixture: regenerated with numpy, DeepSeek-V3's
tokenizer) gets a random multi-token-prediction module from tests/golden/deepseek/add_mtp.py.
With random weights the module's drafts are rarely accepted; what is checked is that greedy and
seeded sampled completions (12 prompts through `deepinfer batch`, 8 at once with every other
request opting out, and 12 at once under KV pressure that preempts) are identical to `--spec off`, that
`run --stats` reports the drafts and `--dump-logits` files are byte-identical, and that
`--spec mtp` on a model without MTP weights is a clear start-up error; the module also loads from
GGUF (tests/golden/deepseek/make_gguf.py: llama.cpp's blk.N.nextn.* names), F32 and Q8_0.

Binary: $DEEPINFER_BIN (default build/deepinfer)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import test_spec as base
from test_deepseek_engine import CACHE, v3  # noqa: F401 (the fixture)

ADD_MTP = Path(__file__).resolve().parents[1] / "golden" / "deepseek" / "add_mtp.py"
SPEC = ("--spec", "mtp", "--spec-mode", "always")
N = 12  # prompts: the 129k-entry vocabulary makes every logits row (and the module's head) a 33 MB matmul
ONE = ("--threads", "1")  # a tiny model loses more to a busy core's handoffs than it gains


def bodies(sampled, mix=False):
    return base.bodies(sampled, mix)[:N]


@pytest.fixture(scope="module")
def v3_mtp(v3):  # noqa: F811
    d = CACHE / "v3-mtp-tok"
    if not (d / "model.safetensors").exists():
        tmp = CACHE / f"v3-mtp-tok.tmp{os.getpid()}"
        subprocess.run([sys.executable, str(ADD_MTP), str(v3), str(tmp)], check=True)
        shutil.rmtree(d, ignore_errors=True)
        tmp.rename(d)
    return d


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_identical_to_off(tmp_path, v3_mtp, sampled):
    base.need(v3_mtp)
    ref = base.batch(tmp_path, v3_mtp, bodies(sampled), "--spec", "off", "--concurrency", 8, *ONE, tag="off")
    assert sum(len(v[0]) for v in ref.values()) > len(ref)
    got = base.batch(tmp_path, v3_mtp, bodies(sampled, mix=True), *SPEC, "--concurrency", 8, *ONE, tag="mtp")
    assert got == ref


def test_identical_under_preemption(tmp_path, v3_mtp):
    base.need(v3_mtp)
    ref = base.batch(tmp_path, v3_mtp, bodies(True), "--spec", "off", "--concurrency", 1, *ONE, tag="off")
    # a few blocks per sequence for 12 sequences (the module's K/V is one more layer of 4)
    got = base.batch(tmp_path, v3_mtp, bodies(True), *SPEC, "--concurrency", 12, "--block-size", 4, "--kv-mem", "36K",
                     *ONE, "--stats-json", tmp_path / "st.json", tag="tight")
    assert got == ref
    assert json.loads((tmp_path / "st.json").read_text())["preemptions"] > 0


def test_parallel_sampling(tmp_path, v3_mtp):
    """n > 1: every completion drafts with its own module state (the pair at the fork position is its
    own), and every completion is the one without speculation, also when KV pressure preempts them."""
    base.need(v3_mtp)
    b = [dict(x, n=3) for x in bodies(True)[:6]]
    ref = base.batch(tmp_path, v3_mtp, b, "--spec", "off", "--concurrency", 6, *ONE, tag="off", choices=True)
    assert all(len(v) == 3 for v in ref.values())
    got = base.batch(tmp_path, v3_mtp, b, *SPEC, "--concurrency", 6, *ONE, "--stats-json", tmp_path / "st.json",
                     tag="mtp", choices=True)
    assert got == ref
    st = json.loads((tmp_path / "st.json").read_text())
    decode = base.mtp_drafted_steps(ref)
    # each verification yields its accepted drafts and one token more
    assert st["spec_verify_steps"] + st["spec_accepted"] >= decode > 0 and st["spec_mtp_rows"] > 0, (st, decode)
    got = base.batch(tmp_path, v3_mtp, b, *SPEC, "--concurrency", 6, "--block-size", 4, "--kv-mem", "36K", *ONE,
                     "--stats-json", tmp_path / "tight.json", tag="tight", choices=True)
    assert got == ref
    assert json.loads((tmp_path / "tight.json").read_text())["preemptions"] > 0


def test_logit_dumps_and_stats(tmp_path, v3_mtp):
    base.need(v3_mtp)
    p = base.SEEDS[0]
    a = base.run(v3_mtp, "-p", p, "-n", 16, "--temp", 0, "--print-ids", "--dump-logits", tmp_path / "off.bin")
    assert len(json.loads(a.stdout.splitlines()[-1])) == 16
    b = base.run(v3_mtp, "-p", p, "-n", 16, "--temp", 0, "--print-ids", "--dump-logits", tmp_path / "on.bin",
                 "--stats", *SPEC)
    assert a.stdout == b.stdout
    assert (tmp_path / "off.bin").read_bytes() == (tmp_path / "on.bin").read_bytes()
    st = json.loads(b.stderr.strip().splitlines()[-1])["spec"]
    # --spec-mode always chains the module to the full draft length
    assert st["kind"] == "mtp" and st["drafted"] > st["verify_steps"] > 0 and st["accepted"] <= st["drafted"]


def test_no_mtp_weights(v3):  # noqa: F811
    base.need(v3)
    r = base.run(v3, "-p", "hello", "-n", 2, "--spec", "mtp", check=False)
    assert r.returncode == 2 and "--spec mtp" in r.stderr and "MTP" in r.stderr, r.stderr


def test_gguf_mtp(tmp_path, v3_mtp):
    """The module from GGUF (llama.cpp's blk.N.nextn.* names, nextn_predict_layers), F32 and Q8_0."""
    base.need(v3_mtp)
    pytest.importorskip("gguf")
    subprocess.run([sys.executable, str(ADD_MTP.with_name("make_gguf.py")), str(v3_mtp), str(tmp_path)], check=True,
                   stdout=subprocess.DEVNULL)
    ids = ("--ids", "5,6,7,8,9,10,11,12", "-n", 16, "--temp", 0, "--print-ids", "--stats", *ONE)
    for f in ("v3-f32.gguf", "v3-q8_0.gguf"):
        a = base.run(tmp_path / f, *ids)
        b = base.run(tmp_path / f, *ids, *SPEC, "--spec-k-max", 3)
        assert a.stdout == b.stdout and len(json.loads(a.stdout.splitlines()[-1])) == 16
        st = json.loads(b.stderr.strip().splitlines()[-1])["spec"]
        assert st["kind"] == "mtp" and st["drafted"] > st["verify_steps"] > 0, st
