"""Raw-HTTP cases against `deepinfer serve` with a plain client: malformed
bodies, limits, slow clients, many idle connections, disconnects, and a real
Prometheus scraping /metrics. Runs against the fake-backend server when the
model has not been fetched (same HTTP code)."""
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from server_util import API_KEY, error_of, post_bytes, raw_request, start_any

TIMEOUT = 4  # --request-timeout for this module's server


@pytest.fixture(scope="module")
def srv():
    s = start_any("--request-timeout", str(TIMEOUT), "--max-body", str(4 << 20))
    yield s
    s.stop()


def test_malformed_json(srv):
    st, body = post_bytes(srv.port, "/v1/chat/completions", b'{"messages": [')
    assert st == 400
    e = error_of(body)
    assert e["type"] == "invalid_request_error" and "JSON" in e["message"]


def test_wrong_types_name_the_param(srv):
    st, body = post_bytes(srv.port, "/v1/chat/completions",
                          b'{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}')
    assert st == 400 and error_of(body)["param"] == "temperature"
    st, body = post_bytes(srv.port, "/v1/chat/completions", b'{"messages":[{"role":"robot","content":"hi"}]}')
    assert st == 400 and error_of(body)["param"] == "messages[0].role"


def test_invalid_utf8(srv):
    body = b'{"prompt":"abc\xc3\x28","max_tokens":1}'
    st, resp = post_bytes(srv.port, "/v1/completions", body)
    assert st == 400
    assert "UTF-8" in error_of(resp)["message"] and "offset 14" in error_of(resp)["message"]
    # invalid bytes outside strings, and an escaped lone surrogate
    assert post_bytes(srv.port, "/v1/completions", b'{"prompt":"a",\xff"max_tokens":1}')[0] == 400
    assert post_bytes(srv.port, "/v1/completions", b'{"prompt":"\\udc00","max_tokens":1}')[0] == 400


def test_10mb_body_is_413(srv):
    body = b'{"prompt":"' + b"a" * (10 << 20) + b'"}'
    st, resp = post_bytes(srv.port, "/v1/completions", body)
    assert st == 413
    assert error_of(resp)["code"] == "request_too_large"
    assert post_bytes(srv.port, "/v1/completions", b"{}")[0] == 400  # still serving


def test_unknown_path_and_method(srv):
    st, body = raw_request(srv.port, b"GET /v2/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert st == 404 and error_of(body)
    st, body = raw_request(srv.port, b"DELETE /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert st == 405 and error_of(body)


def test_missing_key_is_401(srv):
    st, body = post_bytes(srv.port, "/v1/completions", b'{"prompt":"x"}', key="wrong")
    assert st == 401 and error_of(body)["code"] == "invalid_api_key"


def _closed_within(sock, seconds, drip=None):
    """True when the server closes sock within seconds (dripping a byte per
    second meanwhile when drip is set)."""
    deadline = time.monotonic() + seconds
    sock.settimeout(1.0)
    while time.monotonic() < deadline:
        if drip:
            try:
                sock.send(drip)
            except OSError:
                return True
        try:
            data = sock.recv(4096)
            if data == b"" or b"HTTP/1.1" in data:
                return True
        except socket.timeout:
            pass
        except OSError:
            return True
    return False


def test_slowloris_body_times_out(srv):
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() +
              b"\r\nContent-Length: 100000\r\n\r\n{")
    t0 = time.monotonic()
    assert _closed_within(s, TIMEOUT + 8, drip=b" "), "slow-drip body kept the connection open"
    assert time.monotonic() - t0 < TIMEOUT + 8
    s.close()


def test_idle_connection_times_out(srv):
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # headers never finish
    assert _closed_within(s, TIMEOUT + 8)
    s.close()


def test_300_idle_connections(srv):
    socks = []
    try:
        for _ in range(300):
            socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=10))
        # a keep-alive request on half of them, the rest stay silent
        for s in socks[::2]:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        for s in socks[::2]:
            assert b"200" in s.recv(4096).split(b"\r\n")[0]
        with urllib.request.urlopen(srv.base + "/health", timeout=10) as r:
            assert r.status == 200
    finally:
        for s in socks:
            s.close()


def test_prometheus_scrapes_metrics(srv, tmp_path):
    if not shutil.which("prometheus"):
        pytest.skip("prometheus not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        pport = s.getsockname()[1]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: deepinfer
    static_configs:
      - targets: ['127.0.0.1:{srv.port}']
""")
    proc = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{pport}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        q = urllib.parse.quote('deepinfer:kv_cache_usage_perc')
        deadline = time.monotonic() + 60
        result = []
        while time.monotonic() < deadline and not result:
            time.sleep(1)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{pport}/api/v1/query?query={q}", timeout=5) as r:
                    result = json.load(r)["data"]["result"]
            except OSError:
                pass
        assert result, "Prometheus never stored deepinfer:kv_cache_usage_perc"
        assert result[0]["metric"]["job"] == "deepinfer"
        with urllib.request.urlopen(f"http://127.0.0.1:{pport}/api/v1/targets", timeout=5) as r:
            targets = json.load(r)["data"]["activeTargets"]
        assert targets and targets[0]["health"] == "up"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_promtool_check_metrics(srv):
    if not shutil.which("promtool"):
        pytest.skip("promtool not installed")
    text = srv.metrics()
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    # Exit 3 = lint findings only; the one accepted finding is the ':' that
    # vLLM-style names carry (docs/METRICS.md). A parse error exits 1.
    assert p.returncode in (0, 3), p.stdout + p.stderr
    problems = [l for l in (p.stdout + p.stderr).splitlines() if l.strip()]
    assert all("should not contain ':'" in l for l in problems), problems
    for name in ["num_requests_running", "num_requests_waiting", "request_success_total",
                 "prompt_tokens_total", "generation_tokens_total", "time_to_first_token_seconds_bucket",
                 "time_per_output_token_seconds_bucket", "e2e_request_latency_seconds_bucket",
                 "request_queue_time_seconds_bucket", "kv_cache_usage_perc", "kv_cache_usage_high_water_perc",
                 "prefix_cache_queries_total", "prefix_cache_hits_total", "num_preemptions_total",
                 "http_requests_total"]:
        assert f"deepinfer:{name}" in text, name
