"""Issue 34, the HTTP layer: what an attacker or a careless client can do
with raw sockets. These run against the fake-backend server (the HTTP code is
the same; no model needed, fast) unless a case needs the real model."""
import json
import os
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

from server_util import API_KEY, Server, deepinfer_bin, error_of, fake_server_bin, raw_request

FAKE_ARGS = ["--max-queue", "2", "--header-timeout", "2", "--request-timeout", "30", "--stream-buffer", "4096"]


def start_fake(*extra):
    fake = fake_server_bin()
    if not fake.exists():
        pytest.skip(f"{fake} not built")
    return Server([str(fake), "serve", "0", "--api-key", API_KEY, *extra])


@pytest.fixture(scope="module")
def fake():
    s = start_fake(*FAKE_ARGS)
    yield s
    s.stop()


def _connect(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def _read_all(s, limit=10.0):
    s.settimeout(limit)
    chunks = []
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    except (ConnectionResetError, socket.timeout):
        pass
    return b"".join(chunks)


def _responses(raw: bytes):
    """Status codes of the final (non-1xx) responses in raw, in order."""
    out = []
    for line in raw.split(b"\r\n"):
        if line.startswith(b"HTTP/1.1 ") and not line.startswith(b"HTTP/1.1 1"):
            out.append(int(line.split()[1]))
    return out


def _first_line(c):
    try:
        return c.recv(4096).split(b"\r\n")[0]
    except (ConnectionResetError, socket.timeout):
        return b""


def _post_head(path, length, key=API_KEY, extra=""):
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n").encode()


CHAT = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()


# ---- row 2: authentication fails closed ----

def test_empty_api_key_is_a_startup_error():
    fake = fake_server_bin()
    if not fake.exists():
        pytest.skip("fake server not built")
    p = subprocess.run([str(fake), "serve", "0", "--api-key", ""], input="", capture_output=True, text=True,
                       timeout=20)
    assert p.returncode != 0 and "API key is empty" in p.stderr, p.stderr
    if deepinfer_bin().exists():
        p = subprocess.run([str(deepinfer_bin()), "serve", "-m", "/nonexistent", "--api-key", ""],
                           capture_output=True, text=True, timeout=20)
        assert p.returncode != 0 and "--api-key is empty" in p.stderr, p.stderr


@pytest.mark.parametrize("value", [b"Basic xyz", API_KEY.encode(), b"Bearer ", b"Bearer", b"bearer  " + API_KEY.encode(),
                                   b"Bearer " + API_KEY.encode() + b"x", b"Bearer " + API_KEY.encode()[:-1]])
def test_malformed_authorization_is_401(fake, value):
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: " + value +
           b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(CHAT)).encode() + b"\r\n\r\n" + CHAT)
    st, body = raw_request(fake.port, req)
    assert st == 401, (value, st, body)
    assert error_of(body)["code"] == "invalid_api_key"


@pytest.mark.parametrize("value", [b"Bearer \x00" + API_KEY.encode(), b"Bearer " + API_KEY.encode()[:4] + b"\x00" +
                                   API_KEY.encode()[4:], b"\x00Bearer " + API_KEY.encode()])
def test_nul_in_authorization_never_helps(fake, value):
    """libmicrohttpd 0.9.75 ends a header value at a NUL, so what is checked is
    the part before it, which must be exactly "Bearer KEY": a NUL can hide
    nothing and skip nothing (docs/SECURITY.md)."""
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: " + value +
           b"\r\nContent-Length: " + str(len(CHAT)).encode() + b"\r\n\r\n" + CHAT)
    st, _ = raw_request(fake.port, req)
    assert st in (400, 401), st


# ---- row 9: request smuggling with two Content-Length headers ----

def test_duplicate_content_length_is_400_and_closes(fake):
    smuggled = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() + b"\r\n\r\n"
    body = CHAT + smuggled
    req = (_post_head("/v1/chat/completions", len(CHAT), extra=f"Content-Length: {len(body)}\r\n") + body)
    with _connect(fake.port) as s:
        s.sendall(req)
        raw = _read_all(s)
    assert _responses(raw) == [400], raw[:300]
    assert b"Content-Length" in raw
    assert b"Connection: close" in raw


# ---- row 14: unsupported transfer codings answer at once ----

def test_transfer_encoding_gzip_is_501_at_once(fake):
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() +
           b"\r\nTransfer-Encoding: gzip\r\n\r\n")
    t0 = time.monotonic()
    with _connect(fake.port) as s:
        s.sendall(req)
        raw = _read_all(s, limit=10)
    assert time.monotonic() - t0 < 5
    assert _responses(raw) and _responses(raw)[0] in (400, 501), raw[:200]


# ---- row 8: refused before the body ----

def test_unauthenticated_upload_refused_on_headers(fake):
    head = _post_head("/v1/chat/completions", 4 << 20, key="wrong", extra="Expect: 100-continue\r\n")
    with _connect(fake.port) as s:
        s.sendall(head)  # no body is ever sent
        t0 = time.monotonic()
        raw = _read_all(s, limit=10)
    assert time.monotonic() - t0 < 5
    assert b"100 Continue" not in raw
    assert _responses(raw) == [401], raw[:200]


def test_unauthenticated_uploads_are_not_stored(fake):
    """Without Expect the body is read (so the client can finish sending and
    read its 401) but discarded: 32 uploads of 4 MB leave RSS where it was."""
    body = b"x" * (4 << 20)
    base = _rss_mb(fake.proc.pid)
    results = []

    def one():
        results.append(raw_request(fake.port, _post_head("/v1/chat/completions", len(body), key="wrong",
                                                         extra="Connection: close\r\n") + body))

    ts = [threading.Thread(target=one) for _ in range(32)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [st for st, _ in results] == [401] * 32
    assert _rss_mb(fake.proc.pid) < base + 40, f"RSS {base:.0f} -> {_rss_mb(fake.proc.pid):.0f} MB"


def test_oversized_declared_body_refused_on_headers(fake):
    with _connect(fake.port) as s:
        s.sendall(_post_head("/v1/chat/completions", 64 << 20, extra="Expect: 100-continue\r\n"))
        raw = _read_all(s, limit=10)
    assert _responses(raw) == [413], raw[:200]


# ---- row 10: a half-close is not a disconnect ----

def test_half_close_is_answered(fake):
    req = _post_head("/v1/chat/completions", len(CHAT)) + CHAT
    with _connect(fake.port) as s:
        s.sendall(req)
        s.shutdown(socket.SHUT_WR)
        raw = _read_all(s, limit=15)
    assert _responses(raw) == [200], raw[:300]
    body = raw.split(b"\r\n\r\n", 2)[-1]
    assert json.loads(body)["choices"][0]["message"]["content"] == "hell"


def test_half_close_stream_is_answered(fake):
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}).encode()
    with _connect(fake.port) as s:
        s.sendall(_post_head("/v1/chat/completions", len(body)) + body)
        s.shutdown(socket.SHUT_WR)
        raw = _read_all(s, limit=15)
    assert b"data: [DONE]" in raw, raw[-300:]


# ---- smaller: URLs ----

def test_url_with_encoded_nul_is_refused(fake):
    st, body = raw_request(fake.port, b"GET /v1/models/fake-model%00x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                      b"Authorization: Bearer " + API_KEY.encode() + b"\r\n\r\n")
    assert st == 400 and "NUL" in error_of(body)["message"]


def test_url_invalid_utf8_error_is_whole(fake):
    st, body = raw_request(fake.port, b"GET /v1/nothing%ff%fe/tail HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert st == 400
    assert "UTF-8" in error_of(body)["message"]
    st, body = raw_request(fake.port, b"GET /v2/\x01abc/tail HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    if st == 404:  # the path reached the router: the message keeps the tail, control bytes escaped
        assert error_of(body)["message"].endswith("%01abc/tail")


def test_long_url_and_headers_are_json_errors(fake):
    # limits the server sets answer in OpenAI's error shape, not libmicrohttpd's HTML pages
    st, body = raw_request(fake.port, b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert st == 414 and error_of(body)["code"] == "uri_too_long"
    st, body = raw_request(fake.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " +
                           b"a" * 40000 + b"\r\n\r\n")
    assert st == 431 and "32768" in error_of(body)["message"]
    many = b"".join(b"X-%d: %s\r\n" % (i, b"b" * 100) for i in range(400))
    st, body = raw_request(fake.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + many + b"\r\n")
    assert st == 431 and error_of(body)["code"] == "request_header_fields_too_large"
    st, body = raw_request(fake.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " +
                           b"a" * 20000 + b"\r\n\r\n")
    assert st == 200


# ---- smaller: n past --max-seqs names the parameter ----

def test_n_past_max_seqs_names_n(fake):
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "n": 128}).encode()
    st, resp = raw_request(fake.port, _post_head("/v1/chat/completions", len(body), extra="Connection: close\r\n") + body)
    assert st == 400 and error_of(resp)["param"] == "n"


# ---- smaller: reasoning_content only on reasoning output ----

def test_no_empty_reasoning_content(fake):
    st, resp = raw_request(fake.port, _post_head("/v1/chat/completions", len(CHAT), extra="Connection: close\r\n") + CHAT)
    assert st == 200
    msg = json.loads(resp)["choices"][0]["message"]
    assert "reasoning_content" not in msg, msg


# ---- row 4: admission counts sequences ----

def test_admission_counts_sequences(fake):
    # fake: --max-seqs 4, --max-queue 2 -> 6 sequences; 8 prompts x n 2 = 16 is past it
    body = json.dumps({"prompt": ["a"] * 8, "n": 2, "max_tokens": 2}).encode()
    st, resp = raw_request(fake.port, _post_head("/v1/completions", len(body), extra="Connection: close\r\n") + body)
    assert st == 429, resp
    assert "16 sequences" in error_of(resp)["message"]
    body = json.dumps({"prompt": ["a"] * 3, "n": 2, "max_tokens": 2}).encode()
    st, resp = raw_request(fake.port, _post_head("/v1/completions", len(body), extra="Connection: close\r\n") + body)
    assert st == 200 and len(json.loads(resp)["choices"]) == 6


# ---- row 3: bounded memory for JSON bodies ----

def _rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_nested_array_bodies_bounded(fake):
    body = b'{"x":[' + b",".join([b"[]"] * ((4 << 20) // 3 - 20)) + b'],"prompt":"hi"}'
    assert len(body) <= 4 << 20
    base = _rss_mb(fake.proc.pid)
    results = []

    def one():
        results.append(raw_request(fake.port, _post_head("/v1/completions", len(body), extra="Connection: close\r\n") + body))

    for _ in range(3):
        ts = [threading.Thread(target=one) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert len(results) == 24
    for st, resp in results:
        assert st == 413 and error_of(resp)["code"] == "request_too_complex", (st, resp[:200])
    time.sleep(0.5)
    after = _rss_mb(fake.proc.pid)
    assert after < base + 100, f"RSS {base:.0f} MB -> {after:.0f} MB"


# ---- row 6: header deadline, /health stays reachable ----

def test_slow_headers_cut_and_health_reachable():
    s = start_fake("--max-connections", "8", "--header-timeout", "2")
    socks = []
    try:
        for _ in range(8):
            c = _connect(s.port)
            c.sendall(b"GET /health HTTP/1.1\r\n")
            socks.append(c)
        t0 = time.monotonic()
        closed = set()
        ok = False
        while time.monotonic() - t0 < 12 and not ok:
            for i, c in enumerate(socks):  # one header line each, every 0.5 s
                if i in closed:
                    continue
                try:
                    c.sendall(b"X-Drip: 1\r\n")
                except OSError:
                    closed.add(i)
            try:
                with urllib.request.urlopen(s.base + "/health", timeout=1) as r:
                    ok = r.status == 200
            except OSError:
                time.sleep(0.5)
        elapsed = time.monotonic() - t0
        assert ok, "/health unreachable while slow-header clients held every slot"
        assert elapsed < 8, elapsed
    finally:
        for c in socks:
            c.close()
        s.stop()


def test_per_ip_connection_limit():
    s = start_fake("--max-connections-per-ip", "3")
    socks = []
    try:
        def held():
            # one accepted connection, answered and kept open; a slot may still
            # be held by a connection closed just before (cleanup is async)
            for _ in range(20):
                c = _connect(s.port)
                c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                if b" 200 " in _first_line(c):
                    return c
                c.close()
                time.sleep(0.1)
            raise AssertionError("could not hold a connection")

        socks = [held() for _ in range(3)]
        extra = _connect(s.port)
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_all(extra, limit=5) == b"", "a 4th connection from one address was served"
        extra.close()
        for c in socks:
            c.close()
        time.sleep(0.3)
        with urllib.request.urlopen(s.base + "/health", timeout=5) as r:
            assert r.status == 200
    finally:
        for c in socks:
            c.close()
        s.stop()


# ---- row 7: a stream nobody reads is cancelled, not buffered ----

def test_unread_streams_are_cancelled(fake):
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "stream": True,
                       "logprobs": True, "top_logprobs": 3}).encode()
    socks = []
    try:
        for _ in range(3):
            c = socket.socket()
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            c.connect(("127.0.0.1", fake.port))
            c.sendall(_post_head("/v1/chat/completions", len(body)) + body)
            socks.append(c)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and fake.metric("deepinfer:num_requests_running") > 0:
            time.sleep(0.2)
        assert fake.metric("deepinfer:num_requests_running") == 0
        # the reader now sees the end: an error event naming the stall, then [DONE]
        socks[0].setblocking(True)
        raw = _read_all(socks[0], limit=10)
        assert b"stream_stalled" in raw and b"data: [DONE]" in raw, raw[-400:]
    finally:
        for c in socks:
            c.close()
