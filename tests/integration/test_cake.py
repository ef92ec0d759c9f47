"""CAKE in real namespaces.

Host isolation: a 10 Mbit/s bottleneck between two switches, host A (h1) with one UDP flow to
h3 against host B (h2) with eight to h4, 28 Mbit/s offered in all. Under triple-isolate each
host gets half; per flow, A gets a ninth. A ping from A stays near the base RTT through the
overload. UDP, not TCP: isolation is the scheduler's work, and unresponsive flows keep every
queue backlogged, so nothing but the scheduler decides the shares. The host-isolation preset
does the same with TCP.

Tins: RRUL through diffserv4, with its own marks and with only its EF probe marked.

The ACK filter: a download whose ACKs return over a path too slow for them."""

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
def runs(tmp_path_factory, at_once):
    out = {}
    for mode, outcome in at_once({mode: {"spec": spec(mode)} for mode in ("triple-isolate", "flows")},
                                 tmp_path_factory.mktemp("cake")).items():
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
    drops = run.summary.queue["s0->s1"].drops_by_reason
    assert drops.get("cobalt", 0) > 0 and drops.get("blue", 0) > 0, drops  # and BLUE found the UDP


def test_each_tin_is_in_the_results_and_the_report(runs):
    run = runs["triple-isolate"]
    tins = run.meta["datapath_stats"]["s0->s1"]["tins"]
    assert [t["name"] for t in tins] == ["Bulk", "Best Effort", "Voice"]  # diffserv3, as tc lists them
    assert tins[1]["threshold_bps"] == 10_000_000 and tins[2]["threshold_bps"] == 2_500_000
    best_effort = run.summary.tins["s0->s1"]["Best Effort"]
    assert best_effort.packets > 10_000 and best_effort.drops > 1000 and best_effort.bulk_flows >= 1
    # The UDP floods stand in the 4 MiB buffer (BLUE thins them, slowly): long waits for them,
    # though the ping's flow is served at once.
    assert best_effort.peak_delay_ms >= best_effort.avg_delay_ms > 100, best_effort
    page = (run.path / "report.html").read_text()
    assert "Tins of s0-&gt;s1" in page and "Best Effort" in page


# RRUL through diffserv4 ---------------------------------------------------------------------

RRUL = ["aqm=cake", "diffserv=diffserv4", "duration=14s", "idle=2s", "cc=cubic"]
RRUL_BE = [*RRUL, "mark_bk=BE", "mark_cs5=BE", "mark_ef=BE"]  # Flent's rrul_be: only the EF probe marked


@pytest.fixture(scope="module")
def rrul_runs(tmp_path_factory, at_once):
    out = {}
    for name, outcome in at_once({"rrul": {"preset": "rrul", "sets": RRUL}, "rrul_be": {"preset": "rrul", "sets": RRUL_BE}},
                                 tmp_path_factory.mktemp("rrul")).items():
        assert outcome.complete, outcome.reason
        out[name] = load_run(outcome.run_dir)
    return out


def test_with_only_the_probe_in_it_the_voice_tin_waits_less_than_best_effort(rrul_runs):
    """diffserv4's Voice tin within its quarter of the link is chosen first: its frames wait
    less than Best Effort's, which hold every bulk flow."""
    for direction in ("s0->h2", "h2->s0"):
        tins = rrul_runs["rrul_be"].summary.tins[direction]
        voice, best = tins["Voice"], tins["Best Effort"]
        assert voice.packets > 100 and voice.bulk_flows == 0, voice  # the irtt probe alone
        assert voice.avg_delay_ms < best.avg_delay_ms / 2, (voice, best)
        assert voice.peak_delay_ms < best.peak_delay_ms, (voice, best)


def test_rrul_marks_hold_the_voice_tin_to_its_quarter_and_its_probe_waits_for_it(rrul_runs, summary_reads_back):
    """RRUL marks two bulk flows each way EF and CS5, both Voice in diffserv4. Over its
    threshold (a quarter of the link) the tin is served only on its own schedule, as sch_cake
    chooses tins, so its frames, the EF probe's included, wait longer than Best Effort's."""
    run = rrul_runs["rrul"]
    summary_reads_back(run.path)  # its tins, irtt's flows, the pings, the totals and the grade too
    flows = run.summary.flows
    voice_mbps = flows["up_ef"].goodput_mbps + flows["up_cs5"].goodput_mbps
    # 2.5 Mbit/s on the wire is 2.39 of TCP payload (1448 of 1514 bytes); slack for the edges of the load.
    assert 2.0 < voice_mbps < 2.8, voice_mbps
    assert flows["up_be"].goodput_mbps > 2 * voice_mbps, flows["up_be"]
    tins = run.summary.tins["s0->h2"]
    assert tins["Voice"].avg_delay_ms > tins["Best Effort"].avg_delay_ms, tins


def test_the_host_isolation_preset_shows_cakes_host_fairness_with_tcp(tmp_path, at_once):
    """The preset's two points (side by side, at 10 Mbit/s): per flow, host a's one TCP flow
    gets about a ninth; under triple-isolate about half (a few points less with TCP:
    docs/queues.md)."""
    share = {}
    outcomes = at_once({mode: {"preset": "host-isolation", "sets": [f"isolation={mode}", "duration=12s"]}
                        for mode in ("flows", "triple-isolate")}, tmp_path)
    for mode, outcome in outcomes.items():
        assert outcome.complete, outcome.reason
        flows = outcome.summary.flows
        b = sum(flows[f"b{k}"].goodput_mbps for k in range(1, 9))
        share[mode] = flows["a"].goodput_mbps / (flows["a"].goodput_mbps + b)
    assert abs(share["flows"] - 1 / 9) < 0.04, share
    assert 0.36 < share["triple-isolate"] < 0.56, share


# The ACK filter ------------------------------------------------------------------------------
# Kept apart from drops (as tc shows them): counted per tin and as the drop reason ack_filter.

def ack_path_spec(ack_filter: str) -> dict:
    """h2 sends h1 a bulk TCP flow at 20 Mbit/s; h1's ACKs go back over 0.25 Mbit/s under
    cake, about half of what one ACK per two segments needs, so they queue there."""
    return {
        "name": f"ack-filter-{ack_filter}",
        "duration": "8s",
        "topology": {
            "hosts": {"h1": {}, "h2": {}},
            "switches": {"s0": {}},
            "links": [
                {"ends": ["h1", "s0"], "delay": "10ms", "forward": {"rate": "250kbit"}, "reverse": {"rate": "20mbit"},
                 "queue": {"discipline": "cake", "ack_filter": ack_filter}},
                {"ends": ["s0", "h2"], "rate": "1gbit"},
            ],
        },
        "workloads": [{"kind": "bulk", "from": "h2", "to": "h1", "cc": "cubic"}],
        "probes": {"tcp": "off", "queue": ["h1->s0"]},
    }


@pytest.fixture(scope="module")
def ack_runs(tmp_path_factory, at_once):
    out = {}
    three = at_once({mode: {"spec": ack_path_spec(mode)} for mode in ("off", "conservative", "aggressive")},
                    tmp_path_factory.mktemp("acks"), at_once=3)
    for mode, outcome in three.items():
        assert outcome.complete, outcome.reason
        out[mode] = outcome.summary.to_dict()
    return out


@pytest.mark.parametrize("ack_filter", ["conservative", "aggressive"])
def test_the_ack_filter_thins_a_slow_ack_path_and_frees_the_download(ack_runs, ack_filter):
    filtered, plain = ack_runs[ack_filter], ack_runs["off"]
    ack_drops = sum(t["ack_drops"] for t in filtered["tins"]["h1->s0"].values())
    assert ack_drops > 1000, filtered["tins"]
    # The queue's counts are of the run's window; the tin's of the datapath's whole life.
    assert 0.9 * ack_drops <= filtered["queue"]["h1->s0"]["drops_by_reason"]["ack_filter"] <= ack_drops
    assert sum(t["ack_drops"] for t in plain["tins"]["h1->s0"].values()) == 0
    goodput = {mode: ack_runs[mode]["flows"]["bulk"]["goodput_mbps"] for mode in ("off", ack_filter)}
    # Unfiltered, the ACKs set the pace: 250 kbit/s of 66-byte ACKs, each for two segments of
    # 1448 bytes, carry 10.97 Mbit/s (measured: 11.4). Thinned, the download nears its link's
    # 20 Mbit/s of 1514-byte frames, 19.1 of payload (measured: 18.5-18.6).
    ack_paced = 250e3 / (66 * 8) * 2 * 1448 * 8 / 1e6
    assert 0.9 * ack_paced < goodput["off"] < 1.15 * ack_paced, goodput
    assert goodput[ack_filter] > 0.85 * 20 * 1448 / 1514, goodput


# Against the kernel's sch_cake, where the machine has it -----------------------------------------

def test_the_kernels_cake_and_ours_share_the_bottleneck_alike(tmp_path):
    """The host-isolation traffic through the kernel's cake (tc) and through bloatlab's, on the
    same bottleneck without delay (netem would take the kernel's queue over): host A's share
    within 0.05 of each other, and the ping held near the base RTT by both."""
    from bloatlab.testbed.capabilities import kernel_qdiscs

    if not kernel_qdiscs(["cake"])["cake"]:
        pytest.skip("this kernel has no sch_cake (bloatlab doctor: queue_cake), so there is nothing to compare "
                    "bloatlab's cake with here")
    shares, pings = {}, {}
    for backend in ("kernel", "userspace"):
        doc = spec("triple-isolate")
        bottleneck = doc["topology"]["links"][2]
        del bottleneck["delay"]
        bottleneck["backend"] = backend
        doc["name"] = f"cake-{backend}"
        exp = parse_experiment(doc, [], base_dir=Path("."), source="test")
        outcome = run_experiment(exp, tmp_path / backend, progress=False)
        assert outcome.complete, outcome.reason
        run = load_run(outcome.run_dir)
        assert run.meta["links"][2]["backend"] == backend
        shares[backend] = host_a_share(run)
        rtts = run.series("ping")
        pings[backend] = statistics.median(rtts[rtts["t_s"] > SETTLE_S]["rtt_ms"].tolist())
    assert abs(shares["kernel"] - shares["userspace"]) <= 0.05, shares
    assert all(ms < 3.0 for ms in pings.values()), pings  # a frame or two in service at 10 Mbit/s
