"""`bloatlab calibrate` in real namespaces: parameter recovery from a Flent file. A run made on a
known path (cs244's dumbbell: 10 Mbit/s, 20 ms base RTT, a 30-packet tail-drop queue; its reno
upload and its ping, not its web fetches, which Flent's test has no series for: traffic the
file does not describe would be fitted as part of the path) is exported with `export --flent`
(Flent's tcp_nup: one upload and a ping), and the Flent file alone is given to calibrate, which must give the path back: its rate within 3%, its base RTT within 1 ms, its
queue limit within 15% (issue 42). The search here is the smallest that goes through every stage
(screen, refine, one batch of the TPE search, two full-length runs side by side: the best short
run corrected by its residuals, and that run itself; a single short run's error is too noisy to
choose a limit by), for the suite's minutes;
`bloatlab bench calibrate` and docs/calibration.md have rrul's both ways, codel paths and 100
Mbit/s. test_cluster.py feeds a run directory back, its runs on a Ray cluster's nodes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bloatlab.specs.experiment import load_experiment
from bloatlab.specs.topology import load_topology
from bloatlab.testbed import netns

pytestmark = pytest.mark.netns

RATE_BPS = 10e6
BASE_RTT_MS = 20.0  # cs244's four link crossings of 5 ms
LIMIT = 30
MEASURED = f"""
duration = "8s"
[topology.hosts.h1]
[topology.hosts.h2]
[topology.switches.s0]
[[topology.links]]
ends = ["h1", "s0"]
rate = "1gbit"
delay = "5ms"
[[topology.links]]
ends = ["s0", "h2"]
rate = "10mbit"
delay = "5ms"
queue = {{ discipline = "droptail", packets = {LIMIT} }}
[[workloads]]
kind = "bulk"
from = "h1"
to = "h2"
cc = "reno"
[[workloads]]
kind = "ping"
from = "h1"
to = "h2"
interval = "100ms"
"""


def bloatlab(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bloatlab", *argv], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrate")
    (out / "measured.toml").write_text(MEASURED)
    made = bloatlab("run", str(out / "measured.toml"), "--quiet", "--out", str(out / "measured"))
    assert made.returncode == 0, made.stderr
    flent = out / "testbed.flent.gz"
    exported = bloatlab("export", "--flent", str(out / "measured"), "--out", str(flent))
    assert exported.returncode == 0, exported.stderr
    done = bloatlab("calibrate", str(flent), "--discipline", "taildrop", "--trials", "4", "--confirm", "2",
                    "--parallel", "2", "--short", "5s", "--out", str(out / "cal"), "--json")
    assert done.returncode == 0, done.stderr
    return out, json.loads(done.stdout)


def test_a_flent_file_alone_gives_back_the_paths_rate_base_rtt_and_limit(calibrated):
    _, doc = calibrated
    fitted = doc["fitted"]
    assert doc["measurements"][0]["test"] == "tcp_nup" and fitted["discipline"] == "droptail"
    assert fitted["rate_up_bps"] == pytest.approx(RATE_BPS, rel=0.03), doc["fitted_text"]
    assert fitted["rate_down_bps"] == fitted["rate_up_bps"]  # nothing measured the download's rate
    assert fitted["rtt_ms"] == pytest.approx(BASE_RTT_MS, abs=1.0), doc["fitted_text"]
    assert fitted["limit_pkts"] == pytest.approx(LIMIT, rel=0.15), doc["fitted_text"]
    assert doc["runs"] == 6 and [t["stage"] for t in doc["trials"]] == ["screen", "refine", "search", "search",
                                                                       "confirm", "confirm"]
    # The fit's own full-length run: the upload within 3%, the RTT under load within 15%.
    figures = {r["figure"]: r for r in doc["residuals"]}
    assert abs(figures["up.total.p50"]["relative_error"]) < 0.03, figures["up.total.p50"]
    assert abs(figures["probe.Ping (ms) ICMP.load.p50"]["relative_error"]) < 0.15, figures["probe.Ping (ms) ICMP.load.p50"]


def test_the_fitted_path_and_its_test_are_specs_any_run_takes(calibrated):
    out, doc = calibrated
    cal = out / "cal"
    topology = load_topology(cal / "path.toml")
    forward = topology.links[0].forward
    assert topology.links[0].ends == ("client", "server") and forward.queue.packets == doc["fitted"]["limit_pkts"]
    test = load_experiment(cal / "test.toml")
    assert test.topology == topology and sorted(w.kind for w in test.workloads) == ["bulk", "ping"]
    other = load_experiment(cal / "test.toml", ["discipline=fq_codel"])
    assert other.topology.links[0].reverse.queue.discipline == "fq_codel"
    assert (cal / "report.html").read_text().count("<img") == 2
    assert {p.split("/")[-1] for p in doc["plots"]} == {"latency_cdf.png", "throughput.png"}


def test_ctrl_c_stops_a_calibration_and_leaves_nothing_behind(calibrated):
    out, _ = calibrated
    before = set(netns.list_namespaces())
    child = subprocess.Popen([sys.executable, "-m", "bloatlab", "calibrate", str(out / "measured"), "--discipline",
                              "taildrop,codel", "--trials", "4", "--parallel", "2", "--short", "5s", "--out",
                              str(out / "stopped")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (set(netns.list_namespaces()) - before):
        time.sleep(0.2)
    assert set(netns.list_namespaces()) - before, "no trial's network came up"
    time.sleep(2)
    os.killpg(child.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr, stderr
    assert set(netns.list_namespaces()) - before == set()
