"""The official `openai` client against a real `deepinfer serve` running
SmolLM2-135M-Instruct: chat and completions, streamed and not, n, stop, seeds,
logprobs, usage, DeepSeek prefix completion, typed errors, and a client that
disconnects mid-stream (cancelled, KV blocks back to baseline). Skips only
while the model file is absent."""
import json
import socket
import time
import urllib.request

import openai
import pytest

from server_util import API_KEY, MODEL_NAME, start_real

CHAT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def srv():
    # 2 running + 1 queued: a 4th request at once gets 429.
    s = start_real("--max-seqs", "2", "--max-queue", "1")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def test_models(client):
    ids = [m.id for m in client.models.list()]
    assert ids == [MODEL_NAME]


def test_chat(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=6, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 6 and r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    extra = r.usage.model_extra or {}
    assert extra["prompt_cache_hit_tokens"] + extra["prompt_cache_miss_tokens"] == r.usage.prompt_tokens


def test_chat_stream_matches_non_stream(client):
    want = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=6, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=6, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(ch.usage is None for ch in chunks[:-1])
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == want.choices[0].message.content
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == [want.choices[0].finish_reason]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == want.usage.completion_tokens
    # the second identical prompt hits the prefix cache
    assert (usage.model_extra or {}).get("prompt_cache_hit_tokens", 0) > 0


def test_completions_and_stop(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=8, temperature=0)
    text = r.choices[0].text
    assert r.object == "text_completion" and len(text) > 0 and r.choices[0].finish_reason == "length"
    words = text.split(" ")
    assert len(words) >= 3, text
    stop = " " + words[2]  # cut before the third word
    s = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=8, temperature=0,
                                  stop=[stop])
    assert s.choices[0].finish_reason == "stop"
    assert s.choices[0].text == text[:text.index(stop)]
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_NAME, prompt="Once upon a time", max_tokens=8, temperature=0, stream=True) if c.choices)
    assert streamed == text


def _post(srv, path, obj):
    req = urllib.request.Request(srv.base + path, data=json.dumps(obj).encode(),
                                 headers={"Authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def test_tokenize_roundtrip(srv):
    t = _post(srv, "/tokenize", {"prompt": "Hello, world!"})
    assert t["count"] == len(t["tokens"]) and t["max_model_len"] == 1024
    assert _post(srv, "/detokenize", {"tokens": t["tokens"]})["prompt"].endswith("Hello, world!")


def test_completions_prompt_forms(srv, client):
    ids = _post(srv, "/tokenize", {"prompt": "Once upon a time"})["tokens"]
    a = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=3, temperature=0)
    b = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=3, temperature=0)
    assert a.choices[0].text == b.choices[0].text
    m = client.completions.create(model=MODEL_NAME, prompt=["One", "Two"], max_tokens=2, temperature=0, echo=True)
    assert [c.index for c in m.choices] == [0, 1]
    assert m.choices[0].text.startswith("One") and m.choices[1].text.startswith("Two")


def test_n2(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=4, n=2, seed=3, temperature=1.0)
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert all(c.message.content is not None for c in r.choices)


def test_seed_reproducible(client):
    def go(seed):
        return client.completions.create(model=MODEL_NAME, prompt="My favourite animal is", max_tokens=8,
                                         temperature=1.0, seed=seed).choices[0].text
    first = go(1234)
    assert go(1234) == first
    assert any(go(s) != first for s in (1, 2, 3))


def test_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=2)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    for e in lp:
        assert e.logprob <= 0 and len(e.top_logprobs) == 2
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4  # greedy takes the best
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token or "\ufffd" in e.token
    c = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=3, temperature=0,
                                  logprobs=2)
    clp = c.choices[0].logprobs
    assert len(clp.tokens) == len(clp.token_logprobs) == len(clp.top_logprobs) == c.usage.completion_tokens
    assert "".join(clp.tokens) == c.choices[0].text


def test_prefix_completion(client):
    msgs = CHAT + [{"role": "assistant", "content": "The capital of France is", "prefix": True}]
    r = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=4, temperature=0)
    closed = client.chat.completions.create(model=MODEL_NAME, messages=CHAT + [
        {"role": "assistant", "content": "The capital of France is"}, {"role": "user", "content": "ok"}],
        max_tokens=1, temperature=0)
    assert r.choices[0].message.content
    # a continued turn has no end-of-turn or new assistant header after the prefix
    assert r.usage.prompt_tokens < closed.usage.prompt_tokens
    assert "Paris" in r.choices[0].message.content


def test_typed_errors(srv, client):
    bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=CHAT, temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=CHAT)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=5000)
    assert e.value.body["code"] == "context_length_exceeded" and "1024" in e.value.body["message"]


def _open_stream(srv, max_tokens, until=b"data: {"):
    body = json.dumps({"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    got = b""
    while until not in got:
        b = s.recv(4096)
        assert b, got
        got += b
    return s


def _wait_metric(srv, name, labels, want, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = srv.metric(name, labels)
        if v == want:
            return v
        time.sleep(0.2)
    return srv.metric(name, labels)


def test_rate_limit_and_disconnect_cancels(srv, client):
    base_kv = _wait_metric(srv, "deepinfer:num_requests_running", "", 0)
    assert base_kv == 0
    kv0 = srv.metric("deepinfer:kv_cache_blocks_used")
    cancelled0 = srv.metric("deepinfer:request_success_total", '{finished_reason="cancelled"}')
    # two run (a first token came), the third waits in the queue
    socks = [_open_stream(srv, 500) for _ in range(2)] + [_open_stream(srv, 500, until=b"HTTP/1.1 200")]
    try:
        with pytest.raises(openai.RateLimitError) as e:
            client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=1)
        assert e.value.response.headers.get("retry-after") == "1"
        assert srv.metric("deepinfer:kv_cache_blocks_used") > kv0
    finally:
        for s in socks:
            s.close()
    assert _wait_metric(srv, "deepinfer:request_success_total", '{finished_reason="cancelled"}',
                        cancelled0 + 3) == cancelled0 + 3
    # blocks of cancelled sequences go back at once (cached prefix blocks are
    # parked, not in use)
    assert _wait_metric(srv, "deepinfer:kv_cache_blocks_used", "", kv0) == kv0
    assert _wait_metric(srv, "deepinfer:num_requests_running", "", 0) == 0
    r = client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=1)
    assert r.choices[0].finish_reason in ("stop", "length")
