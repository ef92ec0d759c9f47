"""report.html in a real browser: headless Chromium renders it, every figure decodes, nothing is
fetched from outside the file, and nothing lands on the console as an error.

The browser is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
messages ending in NUL on fds 3 and 4), with the standard library only. Without chromium these
tests skip, except under CI (CI=true), where a skipped browser test would hide a broken report.
"""

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from bloatlab.analysis.report import write_report

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--disable-background-networking", "--mute-audio"]


@pytest.fixture
def chromium():
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (apt-get install chromium; make test installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium, or make test)")
    return CHROMIUM


class Browser:
    """One headless Chromium over --remote-debugging-pipe; one page at a time."""

    def __init__(self, binary: str, profile: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The protocol's fds are 3 (commands in) and 4 (replies and events out); bash, as dash
        # redirects single-digit fds only.
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}', binary, *FLAGS,
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(to_browser_r, from_browser_w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (OSError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for event in self.events:
            if event.get("method") == method and event.get("sessionId") == session:
                return event
        while True:
            event = self._receive(deadline)
            self.events.append(event)
            if event.get("method") == method and event.get("sessionId") == session:
                return event

    def open(self, url: str) -> dict:
        """Load URL in a fresh page; what the page holds, and the errors and requests seen meanwhile."""
        self.events.clear()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)
        probe = """JSON.stringify({
            title: document.title,
            h1: [...document.querySelectorAll('h1')].map(e => e.textContent),
            h2: [...document.querySelectorAll('h2')].map(e => e.textContent),
            tables: document.querySelectorAll('table').length,
            headers: [...document.querySelectorAll('th')].map(e => e.textContent),
            scripts: document.querySelectorAll('script').length,
            images: [...document.images].map(i => ({complete: i.complete, natural: i.naturalWidth,
                                                    height: i.naturalHeight, width: +i.getAttribute('width'),
                                                    alt: i.alt})),
            captions: [...document.querySelectorAll('figcaption')].map(e => e.textContent),
            text: document.body.innerText})"""
        value = self.send("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=session)
        page = json.loads(value["result"]["value"])
        mine = [e for e in self.events if e.get("sessionId") == session]
        page["errors"] = (
            [e["params"]["exceptionDetails"].get("text", "exception") for e in mine
             if e["method"] == "Runtime.exceptionThrown"]
            + [str(e["params"].get("args")) for e in mine
               if e["method"] == "Runtime.consoleAPICalled" and e["params"].get("type") in ("error", "assert")]
            + [e["params"]["entry"].get("text", "") for e in mine
               if e["method"] == "Log.entryAdded" and e["params"]["entry"].get("level") == "error"]
            + [e["params"].get("errorText", "") for e in mine if e["method"] == "Network.loadingFailed"])
        page["requests"] = [e["params"]["request"]["url"] for e in mine if e["method"] == "Network.requestWillBeSent"]
        self.send("Target.closeTarget", {"targetId": target})
        return page


@pytest.fixture
def browser(chromium, tmp_path):
    b = Browser(chromium, tmp_path / "chromium-profile")
    yield b
    b.close()


def assert_renders_cleanly(page: dict, url: str, figures: int) -> None:
    assert page["errors"] == []
    assert page["scripts"] == 0
    # Nothing fetched but the file itself (data: URIs are no fetch, whether or not they are reported).
    assert [u for u in page["requests"] if not u.startswith("data:")] == [url]
    assert len(page["images"]) == figures
    for image in page["images"]:
        assert image["complete"] and image["natural"] > 0 and image["height"] > 0, image["alt"]
        assert image["natural"] == image["width"], image["alt"]  # drawn at its own size: the PNG is whole
    assert len(page["captions"]) == figures and all(page["captions"])


def test_a_sweep_report_renders_with_every_figure(browser, make_sweep, hostile):
    out = make_sweep(failed=("maxq=100/rep2",))
    report = write_report(out)
    url = report.as_uri()
    page = browser.open(url)
    assert_renders_cleanly(page, url, figures=13)
    assert page["title"] == "bloatlab sweep: cs244"  # the hostile name did not rewrite it
    assert page["h1"] == ["Sweep report: cs244"]
    assert page["h2"] == ["What was run", "Machine", "Topology", "Results per configuration", "Runs", "Figures"]
    assert {"point", "maxq", "n", "goodput bulk (Mbit/s)", "RTT median (ms)", "RTT p95 (ms)", "fetch mean (s)",
            "queue s0->h2 mean (packets)", "queue s0->h2 max (packets)", "queue s0->h2 drops"} <= set(page["headers"])
    assert hostile in page["text"]  # shown as text, run as nothing
    assert "iperf3 failed: <boom>" in page["text"]


def test_a_nic_sweep_report_renders(browser, make_sweep):
    report = write_report(make_sweep(axes=(("txqueuelen", (1, 1000, 100000)),), kind="nic"))
    page = browser.open(report.as_uri())
    assert_renders_cleanly(page, report.as_uri(), figures=7)
    assert {"TCP receiver (Mbit/s)", "ping avg (ms)", "ping mdev (ms)"} <= set(page["headers"])


def test_a_run_report_renders(browser, make_run):
    report = write_report(make_run())
    page = browser.open(report.as_uri())
    assert_renders_cleanly(page, report.as_uri(), figures=7)
    assert page["h1"] == ["Run report: cs244 " + '<script>document.title="pwned"</script>&<b>']
    assert page["h2"] == ["What was run", "Machine", "Topology", "Results", "Figures"]


def test_the_browser_check_sees_a_broken_image_and_a_script_error(browser, tmp_path):
    """The checks above can fail: a page with a truncated PNG and a throwing script is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><figure><img src="data:image/png;base64,iVBORw0KGgo=" width="10">'
                   "<figcaption>x</figcaption></figure><script>console.error('boom'); undefinedFunction();"
                   "</script></body></html>")
    page = browser.open(bad.as_uri())
    assert page["images"][0]["natural"] == 0
    assert any("boom" in e for e in page["errors"]) and any("Uncaught" in e or "exception" in e.lower()
                                                             for e in page["errors"])
    with pytest.raises(AssertionError):
        assert_renders_cleanly(page, bad.as_uri(), figures=1)


def test_dump_dom_shows_the_report(chromium, make_sweep, tmp_path):
    """The plain command line a user would try: chromium --headless --dump-dom."""
    report = write_report(make_sweep())
    result = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                             report.as_uri()], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "<h1>Sweep report: cs244</h1>" in result.stdout
    assert result.stdout.count("<figure>") == 13 and "<h2>Results per configuration</h2>" in result.stdout
