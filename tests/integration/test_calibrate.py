"""`bloatlab calibrate` in real namespaces: parameter recovery. An rrul run made on a known path
(10 Mbit/s each way, 20 ms base RTT, a 40-packet tail-drop queue each way) is exported with
`export --flent`, and the Flent file alone is given to calibrate, which must give the path back:
its rates within 3%, its base RTT within 1 ms, its queue limit within 15% (issue 42). The
search here is the smallest that holds (5 short runs three at a time, one full-length run), for
the suite's minutes; docs/calibration.md has the figures of longer ones, and of codel paths.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bloatlab.specs.experiment import load_experiment
from bloatlab.specs.topology import load_topology

pytestmark = pytest.mark.netns

RATE_BPS = 10e6
BASE_RTT_MS = 20.0  # rrul's four link crossings of 5 ms
LIMIT = 40


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrate")
    run = subprocess.run([sys.executable, "-m", "bloatlab", "run", "--preset", "rrul", "--quiet", "--out", str(out / "measured"),
                          "--set", "duration=16s", "--set", "idle=3s", "--set", "bw=10mbit", "--set", f"maxq={LIMIT}"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    flent = out / "testbed.flent.gz"
    export = subprocess.run([sys.executable, "-m", "bloatlab", "export", "--flent", str(out / "measured"), "--out", str(flent)],
                            capture_output=True, text=True, timeout=60)
    assert export.returncode == 0, export.stderr
    cal = subprocess.run([sys.executable, "-m", "bloatlab", "calibrate", str(flent), "--discipline", "taildrop", "--trials", "5",
                          "--confirm", "1", "--parallel", "3", "--short", "5s", "--out", str(out / "cal"), "--json"],
                         capture_output=True, text=True, timeout=600)
    assert cal.returncode == 0, cal.stderr
    return out / "cal", json.loads(cal.stdout)


def test_a_flent_file_alone_gives_back_the_paths_rate_base_rtt_and_limit(calibrated):
    _, doc = calibrated
    fitted = doc["fitted"]
    assert fitted["discipline"] == "droptail"
    for direction in ("rate_up_bps", "rate_down_bps"):
        assert fitted[direction] == pytest.approx(RATE_BPS, rel=0.03), doc["fitted_text"]
    assert fitted["rtt_ms"] == pytest.approx(BASE_RTT_MS, abs=1.0), doc["fitted_text"]
    assert fitted["limit_pkts"] == pytest.approx(LIMIT, rel=0.15), doc["fitted_text"]
    assert doc["runs"] == 6 and [t["stage"] for t in doc["trials"]] == ["screen"] + ["search"] * 4 + ["confirm"]
    # The fit's own full-length run: the totals each way within 5%, the RTT under load within 15%.
    figures = {r["figure"]: r for r in doc["residuals"]}
    for name in ("up.total.p50", "down.total.p50"):
        assert abs(figures[name]["relative_error"]) < 0.05, figures[name]
    assert abs(figures["probe.Ping (ms) ICMP.load.p50"]["relative_error"]) < 0.15, figures["probe.Ping (ms) ICMP.load.p50"]


def test_the_fitted_path_and_its_test_are_specs_any_run_takes(calibrated):
    out, doc = calibrated
    topology = load_topology(out / "path.toml")
    forward = topology.links[0].forward
    assert topology.links[0].ends == ("client", "server") and forward.queue.packets == doc["fitted"]["limit_pkts"]
    test = load_experiment(out / "test.toml")
    assert test.topology == topology
    assert sorted(w.kind for w in test.workloads) == ["bulk"] * 8 + ["irtt", "irtt", "ping"]
    other = load_experiment(out / "test.toml", ["discipline=fq_codel"])
    assert other.topology.links[0].reverse.queue.discipline == "fq_codel"
    assert (out / "report.html").read_text().count("<img") == 2
    assert {p.split("/")[-1] for p in doc["plots"]} == {"latency_cdf.png", "throughput.png"}
