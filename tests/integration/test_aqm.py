"""Active queue management in real namespaces at 10 Mbit/s with a saturating TCP flow: CoDel
and PIE hold the ping RTT near base + their target, tail drop with 1000 packets lets it climb
far above, every discipline (CAKE too, shaping at the link's rate) keeps the link busy, and FQ-CoDel isolates a ping from two bulk
flows. The `aqm` preset's sweep runs and is compared."""

import csv
import json
import statistics
from pathlib import Path

import pytest

from bloatlab.specs.experiment import sweep_axes

pytestmark = pytest.mark.netns

BASE_RTT_MS = 20.0  # 4 crossings of 5 ms
SERIALISATION_MS = 1514 * 8 / 10e6 * 1e3  # 1.21 ms per full frame at 10 Mbit/s
PAYLOAD_MBPS = 10 * 1448 / 1514  # what TCP can carry on 10 Mbit/s of 1514-byte frames
SETTLE_S = 8.0  # slow start's overshoot and the controllers' convergence come first
TARGET_MS = {"codel": 5.0, "pie": 15.0}


def spec(aqm: str, duration: str = "15s") -> dict:
    """The aqm preset's network with only the bulk flow and the ping: all capacity is the flow's."""
    return {
        "name": f"aqm-{aqm.replace('_', '-')}",
        "duration": duration,
        "topology": {
            "hosts": {"h1": {}, "h2": {}},
            "switches": {"s0": {}},
            "links": [
                {"ends": ["h1", "s0"], "rate": "1gbit", "delay": "5ms"},
                {"ends": ["s0", "h2"], "rate": "10mbit", "delay": "5ms",
                 "queue": {"discipline": aqm, "packets": 1000, "red": {"min": 15, "max": 45, "probability": 0.1}}},
            ],
        },
        "workloads": [
            {"kind": "bulk", "from": "h1", "to": "h2", "cc": "cubic"},
            # 20 a second: 140 settled RTTs in 15 s (the medians want 100), six runs 5 s shorter.
            {"kind": "ping", "from": "h1", "to": "h2", "interval": "50ms"},
        ],
        "probes": {"tcp": "off", "queue": ["s0->h2"]},
    }


def settled_rtts(run_dir: Path) -> list[float]:
    with open(run_dir / "series" / "ping.csv") as f:
        return [float(r["rtt_ms"]) for r in csv.DictReader(f) if float(r["t_s"]) > SETTLE_S]


def settled_mbps(run_dir: Path, flow: str = "bulk") -> float:
    """The flow's mean rate from SETTLE_S to the run's end: iperf3's intervals after it (the
    client waiting on the server's totals, 0 Mbit/s) are no part of the load."""
    end_s = json.loads((run_dir / "run.json").read_text())["spec"]["duration_s"]
    with open(run_dir / "series" / "throughput.csv") as f:
        rows = [float(r["mbps"]) for r in csv.DictReader(f) if r["flow"] == flow and SETTLE_S < float(r["t_s"]) <= end_s]
    return sum(rows) / len(rows)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, at_once):
    out = at_once({aqm: {"spec": spec(aqm)} for aqm in ("taildrop", "red", "codel", "pie", "fq_codel", "cake")},
                  tmp_path_factory.mktemp("aqm"), at_once=3)
    for aqm, outcome in out.items():
        assert outcome.complete, (aqm, outcome.reason)
    return out


@pytest.mark.parametrize("aqm", ["codel", "pie"])
def test_delay_controllers_hold_the_rtt_near_base_plus_target(runs, aqm):
    rtts = settled_rtts(runs[aqm].run_dir)
    assert len(rtts) >= 100
    median = statistics.median(rtts)
    # The standing queue sits at the target, give or take a few frames in service.
    want = BASE_RTT_MS + TARGET_MS[aqm]
    assert want - 4 * SERIALISATION_MS <= median <= want + 6 * SERIALISATION_MS, f"median {median:.1f} ms, want ~{want}"
    drops = runs[aqm].summary.queue["s0->h2"].drops
    assert drops > 0


def test_tail_drop_with_1000_packets_goes_far_above(runs):
    taildrop = statistics.median(settled_rtts(runs["taildrop"].run_dir))
    assert taildrop > 200, f"median {taildrop:.0f} ms: a long tail-drop queue holds hundreds of ms"
    for aqm in ("red", "codel", "pie", "fq_codel", "cake"):
        assert statistics.median(settled_rtts(runs[aqm].run_dir)) < taildrop / 4, aqm


@pytest.mark.parametrize("aqm", ["taildrop", "red", "codel", "pie", "fq_codel", "cake"])
def test_goodput_stays_at_90_percent_of_capacity(runs, aqm):
    assert settled_mbps(runs[aqm].run_dir) >= 0.9 * PAYLOAD_MBPS


def test_flent_opens_the_export_of_each_aqm_run(runs, flent_summary):
    for aqm, outcome in runs.items():
        shown = flent_summary(outcome.run_dir)
        assert "Summary of tcp_nup test run" in shown and "TCP upload::1" in shown, aqm


def test_red_keeps_the_average_between_its_thresholds(runs):
    # min 15 and max 45 packets: the median RTT sits between base + 15 and base + 45 frames.
    median = statistics.median(settled_rtts(runs["red"].run_dir))
    assert BASE_RTT_MS + 10 * SERIALISATION_MS < median < BASE_RTT_MS + 50 * SERIALISATION_MS, median


def test_fq_codel_isolates_a_ping_from_two_bulk_flows(tmp_path, at_once):
    medians = {}
    both = at_once({aqm: {"preset": "aqm-isolation", "sets": [f"aqm={aqm}", "duration=15s"]} for aqm in ("taildrop", "fq_codel")},
                   tmp_path)
    for aqm, outcome in both.items():
        assert outcome.complete, outcome.reason
        medians[aqm] = statistics.median(settled_rtts(outcome.run_dir))
        flows = outcome.summary.flows
        assert flows["bulk1"].goodput_mbps + flows["bulk2"].goodput_mbps > 0.85 * PAYLOAD_MBPS
    # The ping's own flow queue is served first: it waits for at most a frame or two.
    assert medians["fq_codel"] < BASE_RTT_MS + 3 * SERIALISATION_MS, medians
    assert medians["taildrop"] > 10 * medians["fq_codel"], medians


def test_the_aqm_preset_sweeps_every_discipline():
    assert sweep_axes("aqm", None, ["duration=5s"], []) == [("aqm", ["taildrop", "red", "codel", "pie", "fq_codel", "cake"])]
    assert sweep_axes("aqm", None, ["aqm=codel"], []) == []
    assert sweep_axes("aqm", None, [], ["maxq=20,100"]) == [("maxq", ["20", "100"]),
                                                          ("aqm", ["taildrop", "red", "codel", "pie", "fq_codel", "cake"])]


def test_run_sweeps_from_the_command_line(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "sweep"
    result = subprocess.run([sys.executable, "-m", "bloatlab", "run", "--preset", "aqm-isolation", "--set", "duration=3s",
                             "--set", "maxq=100", "--out", str(out), "--quiet", "--parallel", "2"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert {"aqm=codel", "aqm=fq_codel", "aqm=taildrop", "plots", "sweep.json"} <= {p.name for p in out.iterdir()}
    assert all((out / d / "rep1" / "summary.json").exists() for d in ("aqm=codel", "aqm=fq_codel", "aqm=taildrop"))
    assert (out / "plots" / "compare-rtt.png").exists()
    assert "aqm=taildrop" in result.stdout and "codel" in result.stdout
