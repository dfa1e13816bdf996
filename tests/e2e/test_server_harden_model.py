"""Issue 34, the rows that need the real model (SmolLM2-135M): special tokens
in prompts, tools on a template that ignores them, the tool-call round trip,
fairness of chunked prefill, and the graceful drain on SIGTERM."""
import json
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from server_util import API_KEY, MODEL_NAME, error_of, start_real


def post(srv, path, body, timeout=120):
    req = urllib.request.Request(srv.base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def srv():
    s = start_real("--max-seqs", "4", "--max-batch-tokens", "64", "--ctx", "2048")
    yield s
    s.stop()


# ---- row 11: text is text ----

def test_special_token_text_is_plain_text(srv):
    st, tok = post(srv, "/tokenize", {"prompt": "<|im_start|>"})
    assert st == 200 and tok["count"] > 2
    st, r = post(srv, "/v1/completions", {"model": MODEL_NAME, "prompt": "<|im_start|>", "max_tokens": 1,
                                          "temperature": 0})
    assert st == 200
    assert r["usage"]["prompt_tokens"] == tok["count"], (r["usage"], tok)
    # the opt-in is token ids: the special token itself, one id
    ids = [1, 1]
    st, r = post(srv, "/v1/completions", {"model": MODEL_NAME, "prompt": ids, "max_tokens": 1, "temperature": 0})
    assert st == 200 and r["usage"]["prompt_tokens"] == 2


# ---- row 12 and 13: tools ----

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def test_tools_on_a_template_without_tools_reach_the_model(srv):
    """SmolLM2's template ignores `tools`: they reach the model as the documented fallback, a
    Hermes-style system message describing them (not silently dropped)."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    st0, r0 = post(srv, "/v1/chat/completions", body)
    st, r = post(srv, "/v1/chat/completions", dict(body, tools=TOOLS))
    assert st0 == 200 and st == 200, r
    assert r["usage"]["prompt_tokens"] > r0["usage"]["prompt_tokens"] + 10, (r0["usage"], r["usage"])


def test_tool_call_round_trip_with_null_content(srv):
    msgs = [{"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}]
    st, r = post(srv, "/v1/chat/completions", {"model": MODEL_NAME, "messages": msgs, "max_tokens": 2,
                                               "temperature": 0})
    assert st == 200, r
    assert r["choices"][0]["message"]["content"] is not None


def test_legacy_and_malformed_tool_fields(srv):
    base = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    for extra, param in [({"functions": [{"name": "f"}]}, "functions"),
                         ({"tools": [{"type": "bogus", "function": {"name": "f"}}]}, "tools"),
                         ({"parallel_tool_calls": "yes"}, "parallel_tool_calls")]:
        st, r = post(srv, "/v1/chat/completions", {**base, **extra})
        assert st == 400 and r["error"]["param"] == param, (extra, r)


def test_kv_gauge_known_before_first_request(srv):
    assert srv.metric("deepinfer:kv_cache_blocks") > 0
    # SmolLM2: 16 positions per block x 23,040 bytes per token (30 layers x 192 K + 192 V values, f16)
    assert srv.metric("deepinfer:kv_cache_block_bytes") == 16 * 23040


# ---- row 5: a long prompt does not starve a short request ----

def test_long_prompt_does_not_starve_short_chat(srv):
    short = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 6,
             "temperature": 0, "ignore_eos": True}
    t0 = time.monotonic()
    assert post(srv, "/v1/chat/completions", short)[0] == 200
    idle = time.monotonic() - t0
    long_body = {"model": MODEL_NAME, "prompt": "The quick brown fox jumps over the lazy dog. " * 150,
                 "max_tokens": 1, "temperature": 0}
    done = {}

    def run_long():
        st, r = post(srv, "/v1/completions", long_body, timeout=300)
        done["long"] = (time.monotonic(), st, r["usage"]["prompt_tokens"] if st == 200 else 0)

    th = threading.Thread(target=run_long)
    t_long0 = time.monotonic()
    th.start()
    while srv.metric("deepinfer:num_requests_running") < 1 and time.monotonic() - t_long0 < 30:
        time.sleep(0.05)
    time.sleep(0.3)  # the long prompt is now several chunks into its prefill
    ts = time.monotonic()
    st, _ = post(srv, "/v1/chat/completions", short)
    t_short_end = time.monotonic()
    th.join()
    t_long_end, lst, ptoks = done["long"]
    assert st == 200 and lst == 200 and ptoks > 1000
    short_lat, long_lat = t_short_end - ts, t_long_end - t_long0
    # Relative bounds only (a loaded 2-core host): the short chat finishes
    # while the long prompt is still in prefill, well before it.
    assert t_short_end < t_long_end, f"short {short_lat:.2f}s finished after the long prompt ({long_lat:.2f}s)"
    assert short_lat < 0.7 * long_lat, f"short {short_lat:.2f}s vs long {long_lat:.2f}s (idle short {idle:.2f}s)"


# ---- row 17: graceful drain ----

def _stream(port, body):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    data = json.dumps(body).encode()
    s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data)
    return s


def _read_until_closed(s, limit):
    s.settimeout(limit)
    out = []
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out.append(b)
    except (socket.timeout, ConnectionResetError):
        pass
    return b"".join(out)


def test_sigterm_drains_streams():
    # the short stream must finish inside the drain even on a loaded host; the
    # long one (8000 tokens) cannot, even on a quiet one (2000 had finished in 8 s)
    s = start_real("--drain-timeout", "8", "--max-seqs", "4", "--ctx", "8192")
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Count to a thousand."}],
            "max_tokens": 8000, "ignore_eos": True, "stream": True}
    short = dict(body, max_tokens=3)
    try:
        long_s = _stream(s.port, body)
        first = long_s.recv(4096)
        assert b"200" in first.split(b"\r\n")[0]
        short_s = _stream(s.port, short)
        short_first = short_s.recv(4096)  # admitted before the signal
        assert b"200" in short_first.split(b"\r\n")[0]
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        # draining: new generation requests are refused, /health says so
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(s.base + "/health", timeout=5)
        assert ei.value.code == 503
        short_raw = short_first + _read_until_closed(short_s, 15)
        # a draining server closes a kept-alive connection once its answer is
        # complete: a client reading until close is not held until the server
        # stops (meanwhile the unread long stream would fill its socket buffers,
        # its reader could not see the drain's cancel, and it was cut unfinished)
        assert time.monotonic() - t0 < 5
        long_raw = first + _read_until_closed(long_s, 30)
        assert short_raw.count(b"data: [DONE]") == 1 and b"server_shutdown" not in short_raw
        assert b"server_shutdown" in long_raw and long_raw.rstrip().endswith(b"0") and b"data: [DONE]" in long_raw, \
            (len(long_raw), long_raw[-600:], "\n".join(s.log[-20:]))
        assert s.proc.wait(timeout=20) == 0
        assert time.monotonic() - t0 < 25
    finally:
        s.stop()


def test_second_signal_exits_at_once():
    s = start_real("--drain-timeout", "60")
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Count."}], "max_tokens": 900,
            "ignore_eos": True, "stream": True}
    try:
        c = _stream(s.port, body)
        c.recv(4096)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert s.proc.poll() is None  # still draining
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(timeout=10)
        assert time.monotonic() - t0 < 3
        c.close()
    finally:
        s.stop()


def test_batch_prompt_text_is_plain_text(srv, tmp_path):
    """batch follows the server's rule: a prompt string is text."""
    from test_batch import run_batch
    from server_util import MODEL
    st, tok = post(srv, "/tokenize", {"prompt": "<|im_start|>"})
    line = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions",
                       "body": {"prompt": "<|im_start|>", "max_tokens": 1, "temperature": 0}})
    results, _ = run_batch(tmp_path, MODEL, [line])
    assert results[0]["error"] is None, results[0]
    assert results[0]["response"]["body"]["usage"]["prompt_tokens"] == tok["count"]


# ---- row 7: a stream whose client stops reading is paused (KV freed), resumed when it reads ----

def _stalled_stream(port, body):
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    c.connect(("127.0.0.1", port))
    data = json.dumps(body).encode()
    c.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data)
    return c


def _read_stream(c, limit=120.0):
    c.settimeout(limit)
    raw = b""
    while b"data: [DONE]" not in raw:
        b = c.recv(65536)
        if not b:
            break
        raw += b
    text, errors = [], []
    for line in raw.decode(errors="replace").split("\n"):
        if line.startswith("data: {"):
            j = json.loads(line[6:])
            errors += [j["error"]] if "error" in j else []
            for ch in j.get("choices", []):
                text.append(ch.get("delta", {}).get("content") or "")
    return "".join(text), errors, raw


def _wait_metric(srv, name, pred, limit=60.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        v = srv.metric(name)
        if pred(v):
            return v
        time.sleep(0.1)
    raise AssertionError(f"{name} stayed at {srv.metric(name)}")


def test_unread_stream_pauses_then_resumes_or_is_cancelled():
    srv = start_real("--stream-buffer", "2048", "--stream-stall-timeout", "4", "--max-seqs", "4")
    try:
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Tell me a long story about a cat."}],
                "max_tokens": 200, "temperature": 0, "ignore_eos": True, "stream": True, "logprobs": True,
                "top_logprobs": 10}
        ref = _read_stream(_stalled_stream(srv.port, body))  # read at once: the uninterrupted answer
        assert not ref[1] and ref[0]
        # A client that stops reading: paused, its KV given back, nothing computed while paused.
        c = _stalled_stream(srv.port, body)
        _wait_metric(srv, "deepinfer:num_requests_paused", lambda v: v == 1)
        _wait_metric(srv, "deepinfer:kv_cache_blocks_used", lambda v: v == 0, limit=5)
        gen = srv.metric("deepinfer:engine_generation_tokens_total")
        time.sleep(1.0)
        assert srv.metric("deepinfer:engine_generation_tokens_total") == gen
        assert srv.metric("deepinfer:num_requests_paused") == 1
        # It reads again: resumed, and its answer is the uninterrupted one.
        text, errors, _ = _read_stream(c)
        c.close()
        assert not errors and text == ref[0]
        assert srv.metric("deepinfer:num_requests_paused") == 0
        # A client that never comes back is cancelled after --stream-stall-timeout.
        c = _stalled_stream(srv.port, body)
        _wait_metric(srv, "deepinfer:num_requests_paused", lambda v: v == 1)
        t0 = time.monotonic()
        _wait_metric(srv, "deepinfer:num_requests_paused", lambda v: v == 0, limit=20)
        assert time.monotonic() - t0 > 2
        _, errors, raw = _read_stream(c)
        c.close()
        assert errors and errors[0].get("code") == "stream_stalled" and b"data: [DONE]" in raw, raw[-300:]
    finally:
        srv.stop()
