"""Concurrent streaming load through bench/serve_load.py: every stream must be
complete and well-formed, with zero errors, within a time bound. The full
issue-sized run (64 clients x 4 requests) takes minutes on a 2-core machine,
so it runs with DI_LOAD_FULL=1; by default 16 clients x 2 requests."""
import json
import os
import subprocess
import sys
from pathlib import Path

from server_util import API_KEY, MODEL_NAME, start_real

REPO = Path(__file__).resolve().parents[2]


def test_streaming_load():
    full = os.environ.get("DI_LOAD_FULL") == "1"
    srv = start_real("--max-seqs", "16", "--max-queue", "1024", "--quiet")
    try:
        args = ["--clients", "64", "--requests", "4", "--max-tokens", "8"] if full else \
               ["--clients", "16", "--requests", "2", "--max-tokens", "4"]
        p = subprocess.run([sys.executable, str(REPO / "bench" / "serve_load.py"), "--url", srv.base,
                            "--key", API_KEY, "--name", MODEL_NAME, *args],
                           capture_output=True, text=True, timeout=900 if full else 300)
        assert p.returncode == 0, p.stdout + p.stderr
        rep = json.loads(p.stdout.strip().splitlines()[-1])
        assert rep["errors"] == 0 and rep["requests"] == (256 if full else 32)
        assert rep["completion_tokens"] > 0
    finally:
        srv.stop()
