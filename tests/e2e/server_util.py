"""Starts a real `deepinfer serve` (or, for raw-HTTP cases, the fake-backend
server built from tests/unit/test_server_http.c) on a free loopback port and
stops it when the test module ends. Nothing here talks to anything but
127.0.0.1."""
import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODELS = Path(os.environ.get("DI_MODELS_DIR", Path.home() / ".cache/deepinfer/models"))
MODEL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
API_KEY = "sk-test-key"
MODEL_NAME = "smollm2"


def deepinfer_bin() -> Path:
    return Path(os.environ.get("DEEPINFER_BIN", REPO / "build" / "deepinfer"))


def fake_server_bin() -> Path:
    """The unit-test binary that can serve the HTTP layer over a fake engine."""
    if os.environ.get("DEEPINFER_FAKE_SERVER"):
        return Path(os.environ["DEEPINFER_FAKE_SERVER"])
    return deepinfer_bin().parent / "test_server_http"


class Server:
    def __init__(self, argv, ready_path="/health", timeout=120.0):
        self.log = []
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.port = None
        got_port = threading.Event()

        def pump():
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    got_port.set()
            got_port.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        got_port.wait(timeout)
        if self.port is None:
            self.stop()
            raise RuntimeError("server did not start:\n" + "\n".join(self.log))
        self.base = f"http://127.0.0.1:{self.port}"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + "\n".join(self.log))
            try:
                with urllib.request.urlopen(self.base + ready_path, timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("server not ready in time:\n" + "\n".join(self.log))

    def metrics(self) -> str:
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as r:
            return r.read().decode()

    def metric(self, name: str, labels: str = "") -> float:
        text = self.metrics()
        m = re.search(r"^" + re.escape(name + labels) + r" (\S+)$", text, re.M)
        assert m, f"{name}{labels} missing from /metrics"
        return float(m.group(1))

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # the fake server exits on EOF
            except OSError:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        time.sleep(0.2)  # let the stderr pump see the last lines
        bad = [l for l in self.log if "Sanitizer" in l or "runtime error:" in l]
        assert not bad, "sanitizer report from the server:\n" + "\n".join(self.log[-60:])


def start_real(*extra) -> Server:
    if not MODEL.exists():
        pytest.skip(f"model {MODEL} absent (run scripts/fetch-models)")
    if not deepinfer_bin().exists():
        pytest.skip(f"{deepinfer_bin()} not built (set DEEPINFER_BIN)")
    argv = [str(deepinfer_bin()), "serve", "-m", str(MODEL), "--port", "0", "--api-key", API_KEY,
            "--served-model-name", MODEL_NAME, "--ctx", "1024", *extra]
    return Server(argv)


def start_any(*extra) -> Server:
    """The real server when the model is there, otherwise the fake-backend one
    (the HTTP layer is the same code)."""
    if MODEL.exists() and deepinfer_bin().exists():
        return start_real(*extra)
    fake = fake_server_bin()
    if not fake.exists():
        pytest.skip(f"neither the model nor {fake} is available")
    argv = [str(fake), "serve", "0", "--api-key", API_KEY, *extra]
    return Server(argv)


def raw_request(port, data: bytes, timeout=30.0) -> tuple[int, bytes]:
    """Sends bytes as they are and returns (status, body) of a Connection: close answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            chunks.append(b)
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.\d (\d+)", head)
    return (int(m.group(1)) if m else 0), body


def post_bytes(port, path, body: bytes, key=API_KEY) -> tuple[int, bytes]:
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return raw_request(port, head + body)


def error_of(body: bytes) -> dict:
    j = json.loads(body)
    assert set(j) == {"error"}, j
    assert {"message", "type", "param", "code"} <= set(j["error"]), j
    return j["error"]
