"""report.html in a real browser: headless Chromium renders it, every figure decodes, nothing is
fetched from outside the file, nothing lands on the console as an error, and the page fits a
phone's, a laptop's and a wide window (the browser: conftest.py's, over the DevTools protocol).
"""

import subprocess

import pytest

from bloatlab.analysis.report import write_report

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


def test_dump_dom_shows_the_report(chromium_argv, make_sweep, tmp_path):
    """The plain command line a user would try: chromium --headless --dump-dom."""
    report = write_report(make_sweep())
    result = subprocess.run([*chromium_argv, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                             report.as_uri()], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "<h1>Sweep report: cs244</h1>" in result.stdout
    assert result.stdout.count("<figure>") == 13 and "<h2>Results per configuration</h2>" in result.stdout


def test_the_reports_fit_a_phone_a_laptop_and_a_wide_window(browser, make_sweep, make_run):
    for report in (write_report(make_sweep()), write_report(make_run())):
        page = browser.page(report.as_uri())
        for width in (390, 1300, 1920):
            page.resize(width)
            assert page.overflow() == 0, (report, width)
            # Every figure within the window, scaled down where it is narrower than the PNG.
            assert page.eval("[...document.images].every(i => i.getBoundingClientRect().right <= "
                             "window.innerWidth + 0.5)"), (report, width)
        page.close()
