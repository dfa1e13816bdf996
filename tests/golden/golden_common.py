"""Helpers shared by the golden generators (make_goldens.py for llama.cpp,
make_goldens_transformers.py for transformers): the model file check and the
statistics stored for a row of logits. numpy only, so either scratch venv can
import it."""
import hashlib
import sys

import numpy as np


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""):
            h.update(b)
    return h.hexdigest()


def check_model(path, sha256, key):
    """Exits with a message unless path is the model file the goldens are for."""
    if not path.is_file():
        sys.exit(f"{path} missing: run scripts/fetch-models --only {key}")
    got = sha256_file(path)
    if got != sha256:
        sys.exit(f"{path}: sha256 {got} != {sha256}")


def stats(row):
    """Summary of one float32 logits row, and the ids ordered by logit desc, then id asc."""
    row64 = row.astype(np.float64)
    m = row64.max()
    lse = m + np.log(np.exp(row64 - m).sum())
    order = np.lexsort((np.arange(row.size), -row))
    return {
        "argmax": int(order[0]),
        "max": float(row[order[0]]),
        "second": float(row[order[1]]),
        "min": float(row.min()),
        "mean": float(row64.mean()),
        "std": float(row64.std()),
        "logsumexp": float(lse),
        "l2": float(np.sqrt((row64 ** 2).sum())),
    }, order
