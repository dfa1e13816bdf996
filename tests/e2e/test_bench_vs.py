"""`deepinfer bench --concurrency N --vs-concurrency B --rounds K`: one process alternates runs at
N and B streams and reports each round's TPOTs, the aggregate decode rate ratio
N/TPOT_N over B/TPOT_B, and the medians; bad combinations are refused with a message."""
import json
import os
import statistics
import subprocess
from pathlib import Path

import pytest

from tok_common import binary
SMOL = Path(os.environ.get("DI_MODELS_DIR") or Path.home() / ".cache" / "deepinfer" / "models") / "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = pytest.mark.skipif(not SMOL.exists(), reason="SmolLM2 Q4_1 not downloaded")


def bench(*extra):
    return subprocess.run([binary(), "bench", "-m", str(SMOL), "--threads", "1", "--prompt-len", "8", *map(str, extra)],
                          capture_output=True, timeout=300)


def test_vs_concurrency_rounds():
    p = bench("--concurrency", 3, "--vs-concurrency", 1, "--rounds", 3, "--gen-len", 6, "--json")
    assert p.returncode == 0, p.stderr.decode()
    r = json.loads(p.stdout.decode().strip().splitlines()[-1])
    assert (r["concurrency"], r["vs_concurrency"], r["rounds"]) == (3, 1, 3)
    assert len(r["tpot_p50"]) == len(r["vs_tpot_p50"]) == len(r["ratio"]) == 3
    for t3, t1, ratio in zip(r["tpot_p50"], r["vs_tpot_p50"], r["ratio"]):
        assert t3 > 0 and t1 > 0
        assert ratio == pytest.approx(3 * t1 / t3, rel=2e-3)
    assert r["tpot_median"] == pytest.approx(statistics.median(r["tpot_p50"]), abs=1e-5)
    assert r["vs_tpot_median"] == pytest.approx(statistics.median(r["vs_tpot_p50"]), abs=1e-5)
    assert r["median_ratio"] == pytest.approx(statistics.median(r["ratio"]), abs=1e-4)
    assert r["ratio_of_medians"] == pytest.approx(3 * r["vs_tpot_median"] / r["tpot_median"], rel=2e-3)
    text = bench("--concurrency", 2, "--vs-concurrency", 1, "--rounds", 2, "--gen-len", 4)
    assert text.returncode == 0, text.stderr.decode()
    lines = text.stdout.decode().splitlines()
    assert [ln.split()[0] for ln in lines[2:]] == ["1", "2", "median"]


@pytest.mark.parametrize("extra, msg", [
    (["--concurrency", 2, "--requests", 3, "--gen-len", 4], b"multiple of --concurrency"),
    (["--concurrency", 2, "--gen-len", 1], b"--gen-len >= 2"),
    (["--concurrency", 2, "--gen-len", 4, "--rounds", 0], b"--rounds must be >= 1"),
])
def test_vs_concurrency_refused(extra, msg):
    p = bench("--vs-concurrency", 1, *extra)
    assert p.returncode == 2 and msg in p.stderr, p.stderr
