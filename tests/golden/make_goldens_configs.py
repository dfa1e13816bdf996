"""Goldens for config.json reading: tiny random checkpoints of every supported
architecture, with config.json as transformers 5.x writes it (save_pretrained:
`rope_parameters`, flat or per layer type, `layer_types`) and as 4.x wrote it
(`rope_theta`, `rope_scaling` spelled with "type" or "rope_type",
`rope_local_base_freq`, `sliding_window_pattern`), run by transformers in
float64. Writes configs.json: per case the exact config.json text, the weight
seed (tests/golden/tiny_hf.py rebuilds the weights with numpy), the prompt
ids, the logits of every prompt position for a subset of the vocabulary, each
position's top-1 over the whole vocabulary and its margin, and the greedy
continuation. tests/e2e/test_config_goldens.py checks them without torch.

    /work/refvenv/bin/python tests/golden/make_goldens_configs.py   # ~1 min, CPU
"""
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_hf  # noqa: E402
from tiny_hf import D, FF, H, HD, HKV, V  # noqa: E402

OUT = Path(__file__).resolve().parent / "configs.json"
T = 24            # prompt positions
N_GEN = 8         # greedy continuation
VOCAB_SUBSET = list(range(0, V, 6))  # logits kept per position

BASE = {"hidden_size": D, "intermediate_size": FF, "num_attention_heads": H, "num_key_value_heads": HKV,
        "head_dim": HD, "vocab_size": V, "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2}


def cfg4(model_type, arch_class, **kw):
    """config.json as transformers 4.x wrote it (hand-written: 4.x is not installed)."""
    c = {"architectures": [arch_class], "model_type": model_type, **BASE, "torch_dtype": "float32",
         "transformers_version": "4.46.3", "use_cache": True, "initializer_range": 0.02, "attention_dropout": 0.0}
    c.update(kw)
    return json.dumps(c, indent=2)


def cfg5(config_class, **kw):
    """config.json exactly as this transformers' save_pretrained writes it."""
    c = config_class(**BASE, **kw)
    c.architectures = [config_class.__name__.replace("Config", "ForCausalLM")]
    with tempfile.TemporaryDirectory() as d:
        c.save_pretrained(d)
        return (Path(d) / "config.json").read_text()


def cases():
    C = transformers
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 16}
    return {
        "llama_llama3_4x": cfg4("llama", "LlamaForCausalLM", num_hidden_layers=3, max_position_embeddings=128,
                                rope_theta=500000.0, rope_scaling=llama3, hidden_act="silu", mlp_bias=False,
                                attention_bias=False, pretraining_tp=1, tie_word_embeddings=False),
        "llama_llama3_5x": cfg5(C.LlamaConfig, num_hidden_layers=3, max_position_embeddings=128,
                                rope_parameters={"rope_theta": 500000.0, **llama3}),
        "llama_linear_4x": cfg4("llama", "LlamaForCausalLM", num_hidden_layers=2, max_position_embeddings=128,
                                rope_theta=10000.0, rope_scaling={"type": "linear", "factor": 4.0},
                                tie_word_embeddings=True),
        "mistral_5x": cfg5(C.MistralConfig, num_hidden_layers=3, max_position_embeddings=128, sliding_window=7,
                           rope_parameters={"rope_type": "default", "rope_theta": 20000.0}),
        "qwen2_yarn_4x": cfg4("qwen2", "Qwen2ForCausalLM", num_hidden_layers=3, max_position_embeddings=64,
                              rope_theta=1000000.0, use_sliding_window=False, sliding_window=32,
                              max_window_layers=3, tie_word_embeddings=False, hidden_act="silu",
                              rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}),
        "qwen3_5x": cfg5(C.Qwen3Config, num_hidden_layers=3, max_position_embeddings=128,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        "gemma3_4x": cfg4("gemma3_text", "Gemma3ForCausalLM", num_hidden_layers=6, max_position_embeddings=128,
                          rope_theta=1000000.0, rope_local_base_freq=10000.0, sliding_window=5,
                          sliding_window_pattern=3, query_pre_attn_scalar=24, hidden_activation="gelu_pytorch_tanh",
                          rope_scaling={"rope_type": "linear", "factor": 8.0}, final_logit_softcapping=30.0,
                          attn_logit_softcapping=None, cache_implementation="hybrid"),
        "gemma3_5x": cfg5(C.Gemma3TextConfig, num_hidden_layers=6, max_position_embeddings=128, sliding_window=5,
                          layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
                          query_pre_attn_scalar=24, final_logit_softcapping=30.0,
                          rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                              "rope_theta": 1000000.0},
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    }


def run_case(name, text, seed):
    with tempfile.TemporaryDirectory() as d:
        tiny_hf.write_checkpoint(d, text, seed)
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager")
        model.eval()
        rng = np.random.default_rng(seed + 1000)
        ids = [int(i) for i in rng.integers(3, V, T)]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].numpy()
            seq = list(ids)
            for _ in range(N_GEN):  # greedy by hand: no EOS stop, no generation config
                nxt = model(torch.tensor([seq])).logits[0, -1].numpy()
                seq.append(int(np.argmax(nxt)))
    top2 = np.sort(logits, axis=-1)[:, -2:]
    print(f"{name}: logits {logits.min():.2f}..{logits.max():.2f}, min top-1 margin {np.min(top2[:, 1] - top2[:, 0]):.4f}")
    return {"config": text, "seed": seed, "ids": ids,
            "logits": [[round(float(x), 7) for x in row[VOCAB_SUBSET]] for row in logits],
            "top1": [int(i) for i in logits.argmax(-1)],
            "margin": [round(float(m), 6) for m in (top2[:, 1] - top2[:, 0])],
            "greedy": seq[T:]}


def main():
    out = {"reference": {"transformers": transformers.__version__, "torch": torch.__version__,
                         "numpy": np.__version__, "dtype": "float64", "attn_implementation": "eager"},
           "vocab_subset": VOCAB_SUBSET, "cases": {}}
    for i, (name, text) in enumerate(cases().items()):
        out["cases"][name] = run_case(name, text, 100 + i)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
