"""The live view for real: `bloatlab run --live` of a 20 s cs244 run, its page open in headless
Chromium (conftest.py's), whose numbers change while the run goes on and, once it ends, are the
run's summary.json's; a screenshot of it lands in the test's directory. (A sweep followed while
it runs, stopped and resumed: test_faults.py; a finished run's page, path traversal, the token
and the Host: tests/unit/test_live.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bloatlab.testbed import netns

pytestmark = pytest.mark.netns

SHOTS = os.environ.get("BLOATLAB_TEST_SHOTS")  # where to keep the screenshot beyond the test's tmp dir


def _url_from(child: subprocess.Popen, prefix: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = child.stderr.readline()
        if line.startswith(prefix):
            return line.removeprefix(prefix).strip()
        if not line and child.poll() is not None:
            break
    raise AssertionError(f"no {prefix!r} line from {child.args}")


def test_a_live_run_in_a_browser_shows_the_run_as_it_goes_and_its_summary_at_the_end(browser, tmp_path):
    out = tmp_path / "live"
    before = set(netns.list_namespaces())
    run = subprocess.Popen([sys.executable, "-m", "bloatlab", "run", "--preset", "cs244", "--set", "duration=20s",
                            "--out", str(out), "--live", "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = _url_from(run, "live view: ")
        assert urlsplit(url).hostname == "127.0.0.1" and "token" not in url
        page = browser.page(url, width=1300)
        page.wait("document.body.dataset.phase === 'running'", timeout=60)
        # The numbers change while it runs: round trips counted, a queue that fills.
        seen = []
        while page.eval("document.body.dataset.phase") == "running" and len(seen) < 200:
            seen.append((page.eval("document.querySelector('[data-figure=\"rtt.ping.count\"]')?.textContent"),
                         page.eval("document.querySelector('[data-figure=\"queue.s0->h2.backlog\"]')?.textContent"),
                         page.eval("document.body.dataset.latencyMs")))
            time.sleep(0.5)
        counts = [int(c) for c, _, _ in seen if c not in (None, "-")]
        assert len(set(counts)) >= 5 and counts == sorted(counts), seen
        assert max(int(b) for _, b, _ in seen if b not in (None, "-")) > 10, seen  # the queue filled
        latencies = sorted(int(ms) for *_, ms in seen if ms)
        print(f"\nlive view: a ping's sample reached the page after {latencies[len(latencies) // 2]} ms at the "
              f"median, {latencies[-1]} ms at most ({len(latencies)} readings)")
        assert latencies[len(latencies) // 2] < 2000
        # At the end: the page says so, links the report, and its numbers are the summary's.
        page.wait("document.body.dataset.phase === 'complete' && !document.getElementById('report').hidden",
                  timeout=90)
        summary = json.loads((out / "summary.json").read_text())
        figure = lambda key: page.eval(f"document.querySelector('[data-figure=\"{key}\"]').textContent")  # noqa: E731
        page.wait(f"document.querySelector('[data-figure=\"rtt.ping.count\"]').textContent === "
                  f"'{summary['rtt_ms']['count']}'", timeout=10)
        assert float(figure("rtt.ping.median")) == pytest.approx(summary["rtt_ms"]["median"], abs=0.051)
        assert int(figure("queue.s0->h2.drops")) == summary["queue"]["s0->h2"]["drops"]
        assert page.eval("document.getElementById('report').getAttribute('href')") == "files/report.html"
        assert page.errors() == []
        shot = page.screenshot(tmp_path / "live.png")
        if SHOTS:
            page.screenshot(Path(SHOTS) / "live.png")
        assert shot.stat().st_size > 20_000
        for width in (390, 1920):  # a phone, a wide window
            page.resize(width)
            time.sleep(0.3)
            assert page.overflow() == 0, width
        page.close()
        # The report it links is served, and the view stays until Ctrl-C: then the run's status.
        report = browser.page(url.rstrip("/") + "/files/report.html", width=1300)
        assert report.eval("document.querySelectorAll('figure img').length") == 7
        report.close()
        assert run.poll() is None
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=30) == 0, run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert set(netns.list_namespaces()) - before == set()
