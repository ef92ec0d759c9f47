"""CAKE in real namespaces: a 10 Mbit/s bottleneck between two switches, host A (h1) with one
UDP flow to h3 against host B (h2) with eight to h4, 28 Mbit/s offered in all. Under
triple-isolate each host gets half; per flow, A gets a ninth. A ping from A stays near the base
RTT through the overload. UDP, not TCP: isolation is the scheduler's work, and unresponsive
flows keep every queue backlogged, so nothing but the scheduler decides the shares."""

import statistics
from pathlib import Path

import pytest

from bloatlab.lab.run import run_experiment
from bloatlab.results.reader import load_run
from bloatlab.specs.experiment import parse_experiment

pytestmark = pytest.mark.netns

BASE_RTT_MS = 20.0  # 10 ms each way on the bottleneck
SETTLE_S = 3.0  # the flows turning bulk, BLUE finding the unresponsive ones
B_FLOWS = 8


def spec(flow_mode: str) -> dict:
    fast = {"rate": "1gbit"}
    return {
        "name": f"cake-{flow_mode}",
        "duration": "12s",
        "topology": {
            "hosts": {"h1": {}, "h2": {}, "h3": {}, "h4": {}},
            "switches": {"s0": {}, "s1": {}},
            "links": [
                {"ends": ["h1", "s0"], **fast}, {"ends": ["h2", "s0"], **fast},
                {"ends": ["s0", "s1"], "rate": "10mbit", "delay": "10ms",
                 "queue": {"discipline": "cake", "flow_mode": flow_mode}},
                {"ends": ["s1", "h3"], **fast}, {"ends": ["s1", "h4"], **fast},
            ],
        },
        "workloads": [
            {"name": "a", "kind": "udp", "from": "h1", "to": "h3", "rate": "12mbit"},
            *({"name": f"b{k}", "kind": "udp", "from": "h2", "to": "h4", "rate": "2mbit"} for k in range(B_FLOWS)),
            {"kind": "ping", "from": "h1", "to": "h3", "interval": "100ms"},
        ],
        "probes": {"tcp": "off", "queue": ["s0->s1"]},
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for mode in ("triple-isolate", "flows"):
        exp = parse_experiment(spec(mode), [], base_dir=Path("."), source="test")
        outcome = run_experiment(exp, tmp_path_factory.mktemp("cake") / mode, progress=False)
        assert outcome.complete, outcome.reason
        out[mode] = load_run(outcome.run_dir)
    return out


def settled_mbps(run, flow: str) -> float:
    rows = run.series("throughput")
    rows = rows[(rows["flow"] == flow) & (rows["t_s"] > SETTLE_S)]
    return float(rows["mbps"].mean())


def host_a_share(run) -> float:
    a = settled_mbps(run, "a")
    b = sum(settled_mbps(run, f"b{k}") for k in range(B_FLOWS))
    assert a + b > 0.95 * 10 * 1470 / 1512, (a, b)  # the link stays full (UDP payload of 1512-byte frames)
    return a / (a + b)


def test_triple_isolate_gives_each_host_half_whatever_its_flows(runs):
    # Within 10% of equal shares: host A's between 45% and 55%.
    assert abs(host_a_share(runs["triple-isolate"]) - 0.5) <= 0.05


def test_per_flow_fairness_gives_the_host_with_one_flow_a_ninth(runs):
    assert abs(host_a_share(runs["flows"]) - 1 / 9) <= 0.03


def test_cake_holds_a_sparse_ping_near_base_rtt_through_the_overload(runs):
    run = runs["triple-isolate"]
    pings = run.series("ping")
    rtts = pings[pings["t_s"] > SETTLE_S]["rtt_ms"].tolist()
    # Served ahead of the bulk flows, it waits for at most a frame or two in service (1.2 ms
    # each at 10 Mbit/s), not behind the 5 ms of COBALT's standing queues.
    assert len(rtts) > 60 and statistics.median(rtts) < BASE_RTT_MS + 3.0, statistics.median(rtts)
    drops = run.summary["queue"]["s0->s1"]["drops_by_reason"]
    assert drops.get("cobalt", 0) > 0 and drops.get("blue", 0) > 0, drops  # and BLUE found the UDP


def test_each_tin_is_in_the_results_and_the_report(runs):
    run = runs["triple-isolate"]
    tins = run.meta["datapath_stats"]["s0->s1"]["tins"]
    assert [t["name"] for t in tins] == ["Bulk", "Best Effort", "Voice"]  # diffserv3, as tc lists them
    assert tins[1]["threshold_bps"] == 10_000_000 and tins[2]["threshold_bps"] == 2_500_000
    best_effort = run.summary["tins"]["s0->s1"]["Best Effort"]
    assert best_effort["packets"] > 10_000 and best_effort["drops"] > 1000 and best_effort["bulk_flows"] >= 1
    # The UDP floods stand in the 4 MiB buffer (BLUE thins them, slowly): long waits for them,
    # though the ping's flow is served at once.
    assert best_effort["peak_delay_ms"] >= best_effort["avg_delay_ms"] > 100, best_effort
    page = (run.path / "report.html").read_text()
    assert "Tins of s0-&gt;s1" in page and "Best Effort" in page
