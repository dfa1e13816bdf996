"""End-to-end tests of the serving engine through `deepinfer batch`:
determinism across concurrency / chunked prefill / preemption / prefix cache,
seeded sampling, stop strings across tokens, n > 1, bad lines.

Binary: $DEEPINFER_BIN (default build/deepinfer). Models: stories260K from
../shared/data, SmolLM2-135M from the model cache (scripts/fetch-models)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DEEPINFER_BIN", ROOT / "build" / "deepinfer"))
MODELS = Path(os.environ.get("DI_MODELS_DIR") or Path.home() / ".cache" / "deepinfer" / "models")
STORIES = ROOT.parent / "shared" / "data" / "models" / "stories260K" / "stories260K.gguf"
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"

WORDS = ("Lily Tom Sue Ben a the cat dog ball park tree sun big small red happy sad ran jumped "
         "played saw found liked wanted went looked").split()


def need(path):
    if not BIN.exists():
        pytest.skip(f"{BIN} not built (set DEEPINFER_BIN)")
    if not path.exists():
        pytest.skip(f"{path} missing (scripts/fetch-models)")


def prompts(n, seed=1, shared=""):
    out, x = [], seed
    for i in range(n):
        words = []
        for _ in range(2 + i % 9):
            x = (x * 1103515245 + 12345) % (1 << 31)
            words.append(WORDS[x % len(WORDS)])
        out.append(shared + " ".join(words))
    return out


def line(cid, body, url="/v1/completions"):
    return json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": body})


def run_batch(tmp_path, model, lines, *args, tag="run"):
    inp, outp, stats = tmp_path / f"{tag}.in.jsonl", tmp_path / f"{tag}.out.jsonl", tmp_path / f"{tag}.stats.json"
    inp.write_text("\n".join(lines) + "\n")
    r = subprocess.run([str(BIN), "batch", "-m", str(model), "-i", str(inp), "-o", str(outp), "--threads", "2",
                        "--stats-json", str(stats), "-q", *map(str, args)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    results = [json.loads(x) for x in outp.read_text().splitlines()]
    assert len(results) == len(lines)
    return results, json.loads(stats.read_text())


def ids_by_id(results):
    out = {}
    for r in results:
        assert r["error"] is None, r["error"]
        out[r["custom_id"]] = [c["token_ids"] for c in r["response"]["body"]["choices"]]
    return out


def greedy_lines(ps, max_tokens, **extra):
    return [line(f"r{i}", {"prompt": p, "max_tokens": max_tokens, "temperature": 0, "return_token_ids": True,
                           **extra}) for i, p in enumerate(ps)]


def check_determinism(tmp_path, model, n, max_tokens, probe_pool=False):
    lines = greedy_lines(prompts(n), max_tokens)
    ref_res, _ = run_batch(tmp_path, model, lines, "--concurrency", 1, tag="one")
    ref = ids_by_id(ref_res)
    assert sum(len(v[0]) for v in ref.values()) > n  # something was generated
    got, st = run_batch(tmp_path, model, lines, "--concurrency", n, tag="all")
    assert ids_by_id(got) == ref
    assert st["steps"] < n * max_tokens  # batched
    got, st = run_batch(tmp_path, model, lines, "--concurrency", n, "--max-batch-tokens", 5, tag="chunk")
    assert ids_by_id(got) == ref
    # A pool of 4-token blocks that holds about two of the longest sequences:
    # with n running at once, preemption must happen.
    longest = max(r["response"]["body"]["usage"]["total_tokens"] for r in ref_res)
    tiny = str(st["kv_block_bytes"] // st["kv_block_size"] * 4 * (2 * (longest + 3) // 4 + 2))
    if probe_pool:  # window tables (DeepSeek-V4's grouped cache): two sequences' measured peak in 4-token blocks
        _, one = run_batch(tmp_path, model, lines, "--concurrency", 1, "--block-size", 4, tag="probe")
        tiny = str(one["kv_block_bytes"] * (2 * one["kv_blocks_high_water"] + 2))
    got, st = run_batch(tmp_path, model, lines, "--concurrency", n, "--block-size", 4, "--kv-mem", tiny, tag="tiny")
    assert ids_by_id(got) == ref
    assert st["preemptions"] > 0
    assert st["kv_blocks_used"] == 0
    got, st = run_batch(tmp_path, model, lines, "--concurrency", n, "--block-size", 4, "--kv-mem", tiny,
                        "--no-prefix-cache", "--max-batch-tokens", 7, tag="tiny-nocache")
    assert ids_by_id(got) == ref
    assert st["prefix_hit_tokens"] == 0


def test_determinism_stories(tmp_path):
    need(STORIES)
    check_determinism(tmp_path, STORIES, 32, 40)


def test_determinism_smollm2(tmp_path):
    need(SMOL)
    check_determinism(tmp_path, SMOL, 32, 4)


def test_prefix_cache_hits_and_same_outputs(tmp_path):
    need(STORIES)
    shared = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
              "with her friends. One day, she saw a big red ball under a tree. ")
    lines = greedy_lines(prompts(8, seed=3, shared=shared), 24)
    off, _ = run_batch(tmp_path, STORIES, lines, "--concurrency", 1, "--no-prefix-cache", tag="off")
    on, st = run_batch(tmp_path, STORIES, lines, "--concurrency", 1, tag="on")
    assert ids_by_id(on) == ids_by_id(off)
    hits = [r["response"]["body"]["usage"]["prompt_cache_hit_tokens"] for r in on]
    assert hits[0] == 0 and all(h >= 32 for h in hits[1:]), hits
    for r in on:
        u = r["response"]["body"]["usage"]
        assert u["prompt_cache_hit_tokens"] + u["prompt_cache_miss_tokens"] == u["prompt_tokens"]
    assert st["prefix_hit_tokens"] == sum(hits)
    assert all(r["response"]["body"]["usage"]["prompt_cache_hit_tokens"] == 0 for r in off)


def test_seeded_sampling(tmp_path):
    need(STORIES)
    ps = prompts(16, seed=5)
    lines = [line(f"s{i}", {"prompt": p, "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "seed": 100 + i,
                            "return_token_ids": True}) for i, p in enumerate(ps)]
    a = ids_by_id(run_batch(tmp_path, STORIES, lines, "--concurrency", 1, tag="a")[0])
    b = ids_by_id(run_batch(tmp_path, STORIES, lines, "--concurrency", 16, "--max-batch-tokens", 9, tag="b")[0])
    assert a == b
    other = [line(f"s{i}", {"prompt": p, "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "seed": 999 + i,
                            "return_token_ids": True}) for i, p in enumerate(ps)]
    c = ids_by_id(run_batch(tmp_path, STORIES, other, "--concurrency", 16, tag="c")[0])
    assert sum(a[k] != c[k] for k in a) >= 12


def test_stop_string_across_tokens(tmp_path):
    need(STORIES)
    body = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "logprobs": 0, "ignore_eos": True}
    (r,), _ = run_batch(tmp_path, STORIES, [line("x", body)], tag="nostop")
    ch = r["response"]["body"]["choices"][0]
    text, pieces = ch["text"], ch["logprobs"]["tokens"]
    # A 4-character stop string that starts inside token 3's text and ends in a later token.
    start = sum(len(p) for p in pieces[:3]) + len(pieces[3]) - 1
    assert len(pieces[3]) >= 1 and text.startswith("".join(pieces[:3]))
    stop = text[start:start + 4]
    assert len(stop) == 4
    (r2,), _ = run_batch(tmp_path, STORIES, [line("x", {**body, "stop": ["@@never@@", stop]})], tag="stop")
    ch2 = r2["response"]["body"]["choices"][0]
    assert ch2["finish_reason"] == "stop"
    assert ch2["text"] == text[:text.index(stop)]


def test_n4(tmp_path):
    need(STORIES)
    body = {"prompt": "Lily and Tom went to the park", "max_tokens": 16, "temperature": 1.0, "seed": 3, "n": 4,
            "ignore_eos": True, "return_token_ids": True}
    (r,), st = run_batch(tmp_path, STORIES, [line("n", body)], tag="n4")
    choices = r["response"]["body"]["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    assert all(len(c["token_ids"]) == 16 for c in choices)
    assert len({tuple(c["token_ids"]) for c in choices}) > 1
    assert r["response"]["body"]["usage"]["completion_tokens"] == 64
    assert st["kv_blocks_used"] == 0


def test_bad_lines_do_not_disturb_others(tmp_path):
    need(STORIES)
    good = greedy_lines(prompts(4, seed=9), 12)
    bad = [
        line("neg", {"prompt": "a", "max_tokens": -1}),
        line("topp", {"prompt": "a", "top_p": 0}),
        line("temp", {"prompt": "a", "temperature": -1}),
        line("n0", {"prompt": "a", "n": -2}),
        line("ids", {"prompt": [1, 2, 999999]}),
        line("long", {"prompt": list(range(3, 3 + 400)) * 3}),
        line("bias", {"prompt": "a", "logit_bias": {"99999": 5}}),
        "{not json",
        json.dumps({"custom_id": "url", "method": "POST", "url": "/v1/embeddings", "body": {}}),
        line("chat", {"messages": "nope"}, url="/v1/chat/completions"),
    ]
    mixed = [good[0], *bad[:5], good[1], *bad[5:], good[2], good[3]]
    ref = ids_by_id(run_batch(tmp_path, STORIES, good, "--concurrency", 4, tag="good")[0])
    res, st = run_batch(tmp_path, STORIES, mixed, "--concurrency", 4, tag="mixed")
    by = {r["custom_id"]: r for r in res}
    for cid in ("neg", "topp", "temp", "n0", "ids", "long", "bias", "url", "chat"):
        assert by[cid]["response"] is None and by[cid]["error"]["message"], cid
    assert res[mixed.index("{not json")]["error"]["code"] == "invalid_request"
    assert ids_by_id([r for r in res if r["custom_id"] in ref]) == ref
    assert st["errors"] == len(bad)


def test_chat_lines(tmp_path):
    need(SMOL)
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}
    res, _ = run_batch(tmp_path, SMOL, [line("c", body, url="/v1/chat/completions"),
                                        line("p", {"prompt": "Hello", "max_tokens": 4, "temperature": 0})], tag="chat")
    b = res[0]["response"]["body"]
    assert b["object"] == "chat.completion"
    msg = b["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str) and msg["content"]
    assert b["usage"]["prompt_tokens"] > 5 and b["usage"]["completion_tokens"] <= 8
    assert res[1]["response"]["body"]["object"] == "text_completion"


def test_chat_without_template_is_a_line_error(tmp_path):
    need(STORIES)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    res, st = run_batch(tmp_path, STORIES, [line("c", body, url="/v1/chat/completions")], tag="notmpl")
    assert res[0]["response"] is None and "chat template" in res[0]["error"]["message"]
    assert st["errors"] == 1


def test_hostile_lines(tmp_path):
    need(STORIES)
    good = line("ok", {"prompt": "Lily", "max_tokens": 4, "temperature": 0})
    hostile = [
        line("h1", {"prompt": {}}),
        line("h2", {"prompt": "a", "max_tokens": "10"}),
        line("h3", {"prompt": "a", "n": 10 ** 12}),
        line("h4", {"prompt": "a", "stop": [1, 2]}),
        line("h5", {"prompt": "a", "logit_bias": {"abc": 1}}),
        line("h6", {"prompt": "a", "seed": "x"}),
        line("h7", {"prompt": [1.5, 2]}),
        line("h8", {"prompt": "a", "logprobs": 99}),
        line("h9", {"prompt": "a", "top_k": -5}),
        line("h10", {"prompt": []}),
        line("h11", {"prompt": "a", "echo": True}),
        json.dumps({"custom_id": "h12", "method": "GET", "url": "/v1/completions", "body": {"prompt": "a"}}),
        json.dumps({"custom_id": "h13", "method": "POST", "url": "/v1/completions"}),
        "[" * 5000 + "]" * 5000,
        '{"custom_id": "h15", "body": "\xff\xfe"}',
        "\x00\x01\x02 garbage",
    ]
    res, st = run_batch(tmp_path, STORIES, [good, *hostile, good.replace('"ok"', '"ok2"')], tag="hostile")
    assert res[0]["error"] is None and res[-1]["error"] is None
    for r in res[1:-1]:
        assert r["response"] is None and r["error"]["message"], r
    assert st["errors"] == len(hostile)


def test_one_output_line_per_input_line(tmp_path):
    """Issue 34 row 16: blank and whitespace-only lines, an unknown model and a
    missing or repeated custom_id each get their own error line, in order; the
    good lines around them run."""
    need(STORIES)
    ok = {"prompt": "Lily", "max_tokens": 3, "temperature": 0}
    lines = [
        line("a", ok),
        "   \t ",
        "",
        line("m", {**ok, "model": "gpt-4"}),
        line("a", ok),
        json.dumps({"method": "POST", "url": "/v1/completions", "body": ok}),
        json.dumps({"custom_id": 7, "method": "POST", "url": "/v1/completions", "body": ok}),
        line("b", {**ok, "model": "stories260K.gguf"}),
        line("t", {**ok, "temperature": 5}),
    ]
    res, st = run_batch(tmp_path, STORIES, lines, tag="lines")
    assert [r["id"] for r in res] == [f"batch_req_{i + 1}" for i in range(len(lines))]
    assert res[0]["error"] is None and res[7]["error"] is None
    assert "empty" in res[1]["error"]["message"] and "empty" in res[2]["error"]["message"]
    assert res[3]["error"]["code"] == "model_not_found" and "gpt-4" in res[3]["error"]["message"]
    assert res[3]["error"]["param"] == "model" and res[3]["custom_id"] == "m"
    assert res[4]["error"]["code"] == "duplicate_custom_id" and "line 1" in res[4]["error"]["message"]
    assert res[5]["error"]["param"] == "custom_id" and res[6]["error"]["param"] == "custom_id"
    # the server's own validation and message
    assert res[8]["error"]["param"] == "temperature" and "temperature" in res[8]["error"]["message"]
    assert st["errors"] == 7


def test_batch_errors_match_the_server(tmp_path):
    """One parser for both: a bad body gets the same param and message from
    `deepinfer batch` as from `deepinfer serve`."""
    need(SMOL)
    from server_util import start_real
    import urllib.request
    import urllib.error
    bodies = [{"prompt": "a", "top_p": 0}, {"prompt": "a", "stop": ["x"] * 17}, {"prompt": "a", "n": 0},
              {"prompt": "a", "logit_bias": {"99999999": 1}}, {"prompt": "a", "max_tokens": 10 ** 6},
              {"prompt": "a", "model": "gpt-4"}]
    chat = [{"messages": [{"role": "robot", "content": "x"}]}, {"messages": []}]
    res, _ = run_batch(tmp_path, SMOL, [line(f"c{i}", b) for i, b in enumerate(bodies)] +
                       [line(f"h{i}", b, url="/v1/chat/completions") for i, b in enumerate(chat)],
                       "--served-model-name", "smollm2", "--ctx", "1024", tag="parity")
    s = start_real()
    try:
        for r, (b, url) in zip(res, [(b, "/v1/completions") for b in bodies] +
                               [(b, "/v1/chat/completions") for b in chat]):
            req = urllib.request.Request(s.base + url, data=json.dumps(b).encode(), method="POST",
                                         headers={"Authorization": "Bearer sk-test-key",
                                                  "Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as ei:
                urllib.request.urlopen(req, timeout=60)
            err = json.loads(ei.value.read())["error"]
            assert r["error"]["message"] == err["message"], (b, r["error"], err)
            assert r["error"]["param"] == err["param"], (b, r["error"], err)
    finally:
        s.stop()
