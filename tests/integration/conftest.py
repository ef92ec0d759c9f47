"""Fixtures shared by the integration tests: names, the datapath binary, summaries read back,
runs side by side, and a headless Chromium driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: JSON messages ending in NUL on fds 3 and 4), with the standard library
only. Without chromium the browser tests skip, except under CI (CI=true), where a skipped
browser test would hide a broken page."""

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.testbed.network import leftovers, remove_network


@pytest.fixture
def names():
    """Network names for one test; whatever the test leaves of them is removed afterwards."""
    used: list[str] = []

    def new(name: str) -> str:
        used.append(name)
        return name

    yield new
    for name in used:
        if leftovers(name):
            remove_network(name)
        assert not leftovers(name), f"network {name} left traces behind"


@pytest.fixture
def datapath_binary():
    try:
        return binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built (make setup)")


@pytest.fixture
def summary_reads_back():
    """summary.json as a run wrote it, once held equal, key for key and in order, to what its
    record (RunSummary) gives back."""
    return _summary_reads_back


def _summary_reads_back(run_dir: Path) -> dict:
    from bloatlab.results.summary import RunSummary

    text = (run_dir / "summary.json").read_text()
    doc = json.loads(text)
    assert json.dumps(RunSummary.from_json(doc).to_dict()) == json.dumps(doc)
    return doc


@pytest.fixture
def flent_summary():
    """`bloatlab export --flent RUN`, then Flent's own summary of the file it wrote."""
    return _flent_summary


def _flent_summary(run_dir: Path) -> str:
    export = subprocess.run([sys.executable, "-m", "bloatlab", "export", "--flent", str(run_dir), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert export.returncode == 0, export.stderr
    (exported,) = json.loads(export.stdout)["files"]
    flent = Path(sys.executable).parent / "flent"
    shown = subprocess.run([str(flent), "-i", exported["file"], "-f", "summary"], capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout



@pytest.fixture(scope="session")
def at_once():
    """run_at_once (below), for module fixtures."""
    return run_at_once


# One experiment in a child process: {"spec": a spec as a dict} or {"preset": NAME, "sets": [...]},
# and "out"; it prints the outcome as `bloatlab run --json` does.
_CHILD = """
import json, sys
from pathlib import Path
from bloatlab.lab.run import run_experiment
from bloatlab.specs.experiment import load_preset, parse_experiment
job = json.loads(sys.argv[1])
exp = (load_preset(job["preset"], job["sets"]) if "preset" in job
       else parse_experiment(job["spec"], [], base_dir=Path("."), source="test"))
print(json.dumps(run_experiment(exp, Path(job["out"]), progress=False).to_dict()))
"""


def run_at_once(jobs: dict[str, dict], out: Path, at_once: int = 2) -> dict:
    """Independent experiments, `at_once` of them side by side (each its own network and
    datapath), into out/NAME: their Outcomes by name. For fixtures whose runs are judged by
    medians, means and counts at 10-20 Mbit/s, which two or three runs sharing two cores leave
    as they are; the suite's minutes are the reason."""
    from bloatlab.lab.outcome import Outcome
    from bloatlab.results.summary import RunSummary

    waiting = list(jobs.items())
    running: dict[str, subprocess.Popen] = {}
    done: dict[str, Outcome] = {}
    try:
        while waiting or running:
            while waiting and len(running) < at_once:
                name, job = waiting.pop(0)
                running[name] = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps({**job, "out": str(out / name)})],
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            name = next(iter(running))
            stdout, stderr = running.pop(name).communicate(timeout=300)
            assert stdout.strip(), f"{name}: {stderr}"
            doc = json.loads(stdout.strip().splitlines()[-1])
            done[name] = Outcome(Path(doc["run_dir"]), RunSummary.from_json(doc["summary"]), doc["complete"],
                                 doc["reason"], doc["warnings"], [Path(p) for p in doc["plots"]], doc["interrupted"],
                                 Path(doc["report"]) if doc["report"] else None)
    finally:
        for child in running.values():  # a failed fixture stops the rest, which end as Ctrl-C ends a run
            child.terminate()
            child.communicate(timeout=60)
    return done


# A browser -------------------------------------------------------------------------------------

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

    def page(self, url: str, width: int = 1300, height: int = 900) -> "Page":
        """A page kept open at URL, `width` CSS pixels wide, for a test to read as it changes."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        page = Page(self, target, session)
        page.resize(width, height)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)
        return page

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


class Page:
    """An open page: evaluate in it, resize it, photograph it, read its errors."""

    def __init__(self, browser: Browser, target: str, session: str):
        self.browser, self.target, self.session = browser, target, session

    def eval(self, expression: str, timeout: float = 30):
        value = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                  session=self.session, timeout=timeout)
        if "exceptionDetails" in value:
            raise RuntimeError(f"{expression}: {value['exceptionDetails'].get('text')}")
        return value["result"].get("value")

    def wait(self, expression: str, timeout: float = 60, every: float = 0.2):
        """The expression's value once it is truthy (a TimeoutError after `timeout` s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := self.eval(expression):
                return value
            time.sleep(every)
        raise TimeoutError(f"{expression} did not hold within {timeout} s")

    def resize(self, width: int, height: int = 900) -> None:
        self.browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                                 "deviceScaleFactor": 1, "mobile": width < 600},
                          session=self.session)

    def overflow(self) -> int:
        """How many CSS pixels the page is wider than its window (0: it fits)."""
        return self.eval("Math.max(0, document.documentElement.scrollWidth - window.innerWidth)")

    def screenshot(self, path: Path) -> Path:
        shot = self.browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                                 session=self.session)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def errors(self) -> list[str]:
        mine = [e for e in self.browser.events if e.get("sessionId") == self.session]
        return ([e["params"]["exceptionDetails"].get("text", "exception") for e in mine
                 if e["method"] == "Runtime.exceptionThrown"]
                + [e["params"]["entry"].get("text", "") for e in mine
                   if e["method"] == "Log.entryAdded" and e["params"]["entry"].get("level") == "error"])

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})


@pytest.fixture
def chromium_argv(chromium) -> list[str]:
    """The browser and the flags it runs with here: headless, and no call home."""
    return [chromium, *FLAGS]


@pytest.fixture
def browser(chromium, tmp_path):
    b = Browser(chromium, tmp_path / "chromium-profile")
    yield b
    b.close()
