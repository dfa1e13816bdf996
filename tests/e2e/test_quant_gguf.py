"""The quantization golden (tests/golden/quant/quant_golden.bin) is what gguf-py
produces today: regenerating it from the real models gives the same bytes. The
C side (tests/unit/test_quant_golden.c) checks our kernels against the file."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(os.environ.get("DI_MODELS_DIR") or Path.home() / ".cache" / "deepinfer" / "models")


def run_script(arg):
    r = subprocess.run([sys.executable, str(ROOT / "tests/golden/make_quant_golden.py"), arg],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_quant_golden_synthetic_records_are_reproducible():
    pytest.importorskip("gguf")
    run_script("--check-synthetic")


@pytest.mark.skipif(not os.environ.get("DI_SLOW_TESTS"),
                    reason="gguf-py parses the models' vocabularies for minutes; set DI_SLOW_TESTS=1")
def test_quant_golden_real_rows_are_reproducible():
    pytest.importorskip("gguf")
    for name in ("gemma-3-270m-q4_k_m.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"):
        if not (MODELS / name).exists():
            pytest.skip(f"{name} not fetched (scripts/fetch-models)")
    run_script("--check")
