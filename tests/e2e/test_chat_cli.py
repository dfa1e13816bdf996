"""`deepinfer chat` in a pseudo-terminal, as a person would use it: replies
stream after the prompt, the history carries over (and the prefix cache serves
it: the second turn's new tokens are far fewer than its prompt), Ctrl-C stops a
long reply and the chat goes on, /reset forgets, /exit quits."""
import os
import pty
import re
import select
import signal
import subprocess
import time

import pytest

from server_util import MODEL, deepinfer_bin

STATS = re.compile(r"\[stats\] prompt (\d+) tokens \((\d+) cached, (\d+) new\), generated (\d+) tokens; "
                   r"prefill ([\d.]+) tok/s, decode ([\d.]+) tok/s")


class Chat:
    def __init__(self, *args):
        if not MODEL.exists():
            pytest.skip(f"model {MODEL} absent (run scripts/fetch-models)")
        argv = [str(deepinfer_bin()), "chat", "-m", str(MODEL), "--ctx", "2048", *args]
        # pty.fork: the child gets the terminal as its controlling tty, so ^C is SIGINT
        self.pid, self.master = pty.fork()
        if self.pid == 0:
            try:
                os.execv(argv[0], argv)
            finally:
                os._exit(127)
        self.status = None
        self.buf = b""

    def read_until(self, pattern, timeout=120):
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.buf.decode(errors="replace"))
            if m:
                return m
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {pattern!r}; got:\n{self.buf.decode(errors='replace')}"
            r, _, _ = select.select([self.master], [], [], min(left, 1.0))
            if r:
                try:
                    self.buf += os.read(self.master, 65536)
                except OSError:  # the child closed the terminal
                    m = rx.search(self.buf.decode(errors="replace"))
                    assert m, f"exited before {pattern!r}:\n{self.buf.decode(errors='replace')}"
                    return m

    def send(self, text):
        self.buf = b""
        os.write(self.master, text.encode() + b"\r")

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(st)
                return self.status
            try:  # keep the terminal drained
                if select.select([self.master], [], [], 0.2)[0]:
                    self.buf += os.read(self.master, 65536)
            except OSError:
                time.sleep(0.1)
        raise AssertionError("chat did not exit")

    def alive(self):
        return self.status is None and os.waitpid(self.pid, os.WNOHANG) == (0, 0)

    def close(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.master)


def test_chat_turns_history_cache_stop_reset_exit():
    c = Chat("--temp", "0", "--stats", "-n", "200", "--system", "You are a helpful assistant.")
    try:
        c.read_until(r"\n> $")
        c.send("What is the capital of France?")
        m = c.read_until(STATS.pattern + r".*\n> ")
        reply = c.buf.decode(errors="replace").split("\n", 1)[1].split("[stats]")[0]
        assert reply.strip(), c.buf
        p1, cached1, new1, gen1 = (int(x) for x in m.groups()[:4])
        assert new1 == p1 - cached1 and gen1 > 0 and float(m.group(6)) > 0

        # The second turn re-renders the whole history: the prefix cache serves
        # the first turn, so only the tail is computed.
        c.send("And of Italy?")
        m = c.read_until(STATS.pattern + r".*\n> ")
        p2, cached2, new2, gen2 = (int(x) for x in m.groups()[:4])
        assert p2 > p1 + gen1 - 2, (p1, gen1, p2)
        assert cached2 >= p1 - 16 and new2 < p2 - cached1 - 16, (p1, p2, cached2, new2)

        # Ctrl-C stops a long reply; the chat continues.
        c.send("/reset")
        c.read_until(r"\[new conversation\]\r?\n> ")
        t0 = time.monotonic()
        os.write(c.master, b"Write a very long story about the sea, with many chapters.\r")
        c.read_until(r"chapters\.\r?\n[^\n]{12,}", timeout=60)  # the reply is streaming
        os.write(c.master, b"\x03")  # the terminal turns this into SIGINT
        m = c.read_until(r"\[stopped\]\r?\n(?:\[stats\][^\n]*\n)?> ")
        assert time.monotonic() - t0 < 60
        assert c.alive()

        # After /reset the history is gone: the prompt is short again.
        c.send("/reset")
        c.read_until(r"\[new conversation\]\r?\n> ")
        c.send("Hi")
        m = c.read_until(STATS.pattern)
        assert int(m.group(1)) < p2
        c.read_until(r"\n> ")
        c.send("/exit")
        assert c.wait(30) == 0
    finally:
        c.close()


def test_chat_piped_stdin_and_errors(tmp_path):
    if not MODEL.exists():
        pytest.skip(f"model {MODEL} absent (run scripts/fetch-models)")
    p = subprocess.run([str(deepinfer_bin()), "chat", "-m", str(MODEL), "--temp", "0", "-n", "8", "--ctx", "1024"],
                       input="Say hello.\n/nonsense\n", capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "unknown command /nonsense" in p.stdout
    assert len(p.stdout.strip().splitlines()[0]) > 0
    p = subprocess.run([str(deepinfer_bin()), "chat", "-m", str(MODEL), "--temp", "-1"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "--temp" in p.stderr
    stories = MODEL.parent / "stories260K" / "stories260K.gguf"
    if stories.exists():
        p = subprocess.run([str(deepinfer_bin()), "chat", "-m", str(stories)], input="", capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and "chat template" in p.stderr, p.stderr
