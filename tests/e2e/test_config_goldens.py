"""config.json read exactly: tiny random checkpoints of llama (llama3 and linear
RoPE scaling), mistral (sliding window), qwen2 (yarn), qwen3 and gemma3 (per
layer type RoPE), with config.json as transformers 5.x writes it and as 4.x
wrote it, against transformers' own float64 forward (tests/golden/configs.json,
made by tests/golden/make_goldens_configs.py). The weights are rebuilt here with
numpy (tests/golden/tiny_hf.py), so CI needs no torch. Also: keys that would
change the computation and are not implemented are load errors naming them."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("DEEPINFER_BIN", str(REPO / "build" / "deepinfer"))
sys.path.insert(0, str(REPO / "tests" / "golden"))
import tiny_hf  # noqa: E402

GOLDEN = json.loads((REPO / "tests" / "golden" / "configs.json").read_text())
TOL = 1e-4


def run(args, **kw):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120, **kw)


@pytest.mark.parametrize("name", list(GOLDEN["cases"]))
def test_logits_and_greedy_match_transformers(name, tmp_path):
    case = GOLDEN["cases"][name]
    d = tiny_hf.write_checkpoint(tmp_path / name, case["config"], case["seed"])
    ids, n_gen = case["ids"], len(case["greedy"])
    dump = tmp_path / "logits.f32"
    p = run(["run", "-m", str(d), "--ids", ",".join(map(str, ids)), "-n", str(n_gen), "--temp", "0",
             "--kv-type", "f32", "--ignore-eos", "--print-ids", "--dump-logits", str(dump)])
    assert p.returncode == 0, p.stderr
    got = np.fromfile(dump, "<f4").reshape(-1, tiny_hf.V)[: len(ids)]
    ref = np.array(case["logits"])
    sub = got[:, GOLDEN["vocab_subset"]]
    diff = np.abs(sub - ref)
    print(f"{name}: max |logit diff| {diff.max():.2e} over {len(ids)} positions")
    assert diff.max() <= TOL, f"{name}: position {int(diff.max(1).argmax())} off by {diff.max():.3g}"
    top1 = got.argmax(-1).tolist()
    for t, (a, b, m) in enumerate(zip(top1, case["top1"], case["margin"])):
        assert a == b or m < 2 * TOL, f"{name}: top-1 at position {t}: {a} vs {b} (margin {m})"
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out == case["greedy"], f"{name}: greedy {out} vs transformers {case['greedy']}"


def llama_cfg(**kw):
    c = json.loads(GOLDEN["cases"]["llama_llama3_4x"]["config"])
    c.update(kw)
    return c


def load_error(tmp_path, cfg):
    d = tiny_hf.write_checkpoint(tmp_path / "m", json.dumps(cfg), 1)
    p = run(["info", "-m", str(d)])
    assert p.returncode != 0, f"loaded: {p.stdout}"
    return p.stderr


@pytest.mark.parametrize("change, key", [
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_scaling.rope_type"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 16}},
     "rope_scaling.low_freq_factor"),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0, "extra_knob": 1}}, "rope_scaling.extra_knob"),
    ({"rope_scaling": None, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                 "partial_rotary_factor": 0.5}},
     "rope_parameters.partial_rotary_factor"),
    ({"quantization_config": {"quant_method": "awq"}}, "quantization_config"),
    ({"attention_bias": True}, "attention_bias"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"some_new_knob": 3}, "some_new_knob"),
    ({"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention", "full_attention"]}, "layer_types"),
    ({"rope_theta": 10000.0, "rope_scaling": None,
      "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}, "rope_theta"),
])
def test_unimplemented_keys_are_load_errors(tmp_path, change, key):
    err = load_error(tmp_path, llama_cfg(**change))
    assert key in err, err


def test_info_reports_rope_parameters(tmp_path):
    case = GOLDEN["cases"]["llama_llama3_5x"]
    d = tiny_hf.write_checkpoint(tmp_path / "m", case["config"], case["seed"])
    p = run(["info", "-m", str(d)])
    assert p.returncode == 0, p.stderr
    assert "base 500000" in p.stdout and "scaling llama3 x8" in p.stdout, p.stdout
    case = GOLDEN["cases"]["gemma3_5x"]
    d = tiny_hf.write_checkpoint(tmp_path / "g", case["config"], case["seed"])
    p = run(["info", "-m", str(d)])
    assert p.returncode == 0, p.stderr
    assert "base 1e+06, local base 10000" in p.stdout and "global layers:  every 3" in p.stdout, p.stdout
