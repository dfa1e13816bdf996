"""The chat page at `/` of `deepinfer serve`, in a real headless browser
(Debian's chromium + chromium-driver + python3-selenium, installed by
scripts/setup.sh): the page names the model, a typed message gets a streamed
reply in a `msg assistant` element with its tokens/s, and the stop button ends
a long reply (the server cancels it). Skipped only outside CI when chromium is
absent; under CI=true a missing browser is a failure."""
import json
import os
import shutil
import sys
import time
import urllib.request

import pytest

from server_util import API_KEY, MODEL_NAME, start_real

try:
    import selenium  # noqa: F401
except ImportError:  # Debian's python3-selenium, seen from the test venv
    sys.path.append("/usr/lib/python3/dist-packages")

IN_CI = os.environ.get("CI", "") not in ("", "0", "false")


def browser_or_skip():
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    try:
        from selenium import webdriver  # noqa: F401
        have_selenium = True
    except ImportError:
        have_selenium = False
    if not chrome or not os.path.exists(driver) or not have_selenium:
        what = f"chromium={chrome}, chromedriver={os.path.exists(driver)}, selenium={have_selenium}"
        if IN_CI:
            pytest.fail(f"the chat page test needs a browser in CI ({what}); scripts/setup.sh installs it")
        pytest.skip(f"no headless browser ({what}): apt install chromium chromium-driver python3-selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
              "--disable-extensions", "--window-size=1000,800"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(driver), options=opts)


def wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out: {what}")


def _alert(d):
    from selenium.common.exceptions import NoAlertPresentException
    try:
        return d.switch_to.alert
    except NoAlertPresentException:
        return None


@pytest.fixture(scope="module")
def server():
    s = start_real("--max-seqs", "2", "--ctx", "320")  # bounds the first reply on a busy host
    yield s
    s.stop()


def test_page_is_self_contained(server):
    with urllib.request.urlopen(server.base + "/", timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
        html = r.read().decode()
    assert '<textarea id="prompt"' in html and '<button id="send"' in html
    for outside in ("http://", "https://", "src=\"", "<link"):
        assert outside not in html, f"outside asset: {outside}"


def test_chat_in_browser_send_and_stop(server):
    d = browser_or_skip()
    try:
        from selenium.webdriver.common.by import By
        d.get(server.base + "/")
        # The server wants a key: the page asks once and keeps it.
        alert = wait(lambda: _alert(d), 20, "the page asks for the API key")
        alert.send_keys(API_KEY)
        alert.accept()
        wait(lambda: d.find_element(By.ID, "model").text == MODEL_NAME, 30, "model name shown")

        d.find_element(By.ID, "prompt").send_keys("What is the capital of France?")
        d.find_element(By.ID, "send").click()
        replies = lambda: d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
        wait(lambda: len(replies()) == 1 and replies()[0].text.strip(), 60, "first reply streamed")
        wait(lambda: d.find_element(By.ID, "send").is_enabled(), 120, "first reply finished")
        assert "error" not in replies()[0].get_attribute("class")
        assert "tokens/s" in d.find_element(By.ID, "speed").text

        # A new chat, so the long reply's prompt cannot outgrow --ctx however long the first
        # (sampled) reply was.
        d.find_element(By.ID, "reset").click()
        wait(lambda: len(replies()) == 0, 10, "new chat")
        d.find_element(By.ID, "prompt").send_keys("Write a very long story about the sea, with many chapters.")
        d.find_element(By.ID, "send").click()
        wait(lambda: len(replies()) == 1 and len(replies()[0].text) > 20, 60, "long reply streaming")
        d.find_element(By.ID, "stop").click()
        wait(lambda: "[stopped]" in replies()[0].text, 10, "reply marked stopped")
        wait(lambda: d.find_element(By.ID, "send").is_enabled(), 10, "send enabled after stop")
        # The server cancelled the request: nothing keeps running.
        wait(lambda: server.metric("deepinfer:num_requests_running") == 0, 20, "server stopped generating")
        n = len(replies()[0].text)
        time.sleep(1.0)
        assert len(replies()[0].text) == n, "text kept arriving after stop"
        logs = [e for e in d.get_log("browser") if e.get("level") == "SEVERE" and "favicon" not in e["message"]
                and "401" not in e["message"]]  # the first, keyless call
        assert not logs, json.dumps(logs)
    finally:
        d.quit()


def test_reasoning_is_folded(tmp_path):
    """The fake-engine server (tests/unit/test_server_http.c) answers "THINK"
    with reasoning "plan" and content "answer": the page shows the answer and
    keeps the reasoning in a closed <details>."""
    from server_util import Server, fake_server_bin
    fake = fake_server_bin()
    if not fake.exists():
        pytest.skip(f"{fake} not built")
    s = Server([str(fake), "serve", "0"])
    d = browser_or_skip()
    try:
        from selenium.webdriver.common.by import By
        d.get(s.base + "/")
        wait(lambda: d.find_element(By.ID, "model").text not in ("", "…"), 20, "model name shown")
        d.find_element(By.ID, "prompt").send_keys("THINK")
        d.find_element(By.ID, "send").click()
        replies = lambda: d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
        wait(lambda: replies() and d.find_element(By.ID, "send").is_enabled(), 30, "reply finished")
        r = replies()[0]
        det = r.find_element(By.CSS_SELECTOR, "details.reasoning")
        assert det.get_attribute("open") is None  # folded
        assert det.get_attribute("textContent").endswith("plan")
        assert r.text.strip().endswith("answer") and "plan" not in r.text.replace("reasoning", "")
    finally:
        d.quit()
        s.stop()
