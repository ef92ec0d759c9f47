"""ECN per flow on the wire: two DCTCP bulk flows (one table, count = 2) with ecn = "ect1"
through a 20 Mbit/s dualpi2 link.

This kernel's TCP sends ECT(0) even for DCTCP; bloatlab's datapath turns the flow's ECT(0) into
ECT(1) where it enters (the link direction leaving its sender), so that dualpi2's L queue
(ecn_mask l4s_ect) takes it and marks it at its 1 ms step. Pings with each ECN codepoint, and an
irtt probe, each from a host of its own, show on their host's first hop that Linux's ping and
irtt send the codepoint asked for: the datapath counts every departure by its codepoint.

    h1 (dctcp, ect1; ping ect1) --+             +-- 20 Mbit/s, 10 ms, dualpi2 -- h2
    pn, p1, p0, pc (pings)  ------+---- s0 -----+
    i1 (irtt)               ------+             +-- r0 (the probes' receiver)
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.experiment.parsers import parse_ping_summary
from bloatlab.lab.run import run_experiment
from bloatlab.specs.experiment import parse_experiment
from bloatlab.testbed import congestion

pytestmark = pytest.mark.netns

RATE_MBIT = 20
MSS = 1448  # with TCP timestamps, per full frame
PAYLOAD_MBPS = RATE_MBIT * MSS / 1514
BASE_RTT_MS = 20.0  # 10 ms each way on s0-h2; the other links have no delay
SETTLE_S = 4.0  # the flow starts at 1 s: past its slow start
BOTTLENECK = "s0->h2"
SCALABLE = ("scalable-1", "scalable-2")  # the flows of the table named scalable, count = 2
# The probes: host, ECN codepoint, DSCP (one carries both, to show they share the TOS byte).
PINGS = {"pn": ("not-ect", "BE"), "p1": ("ect1", "BE"), "p0": ("ect0", "BE"), "pc": ("ce", "EF")}
IRTT = ("i1", "ect1")
STATS_NAME = {"not-ect": "not_ect", "ect1": "ect1", "ect0": "ect0", "ce": "ce"}
# A host's own IPv6 neighbour discovery and MLD reports as its interface comes up: Not-ECT frames
# that are no probe's (4 per host here).
IPV6_CHATTER = 6


def spec() -> dict:
    hosts = ["h1", "h2", *PINGS, IRTT[0], "r0"]
    access = [{"ends": [host, "s0"], "backend": "userspace"} for host in hosts if host != "h2"]
    bottleneck = {"ends": ["s0", "h2"], "rate": f"{RATE_MBIT}mbit", "delay": "10ms", "backend": "userspace",
                  "queue": {"discipline": "dualpi2"}}
    pings = [{"kind": "ping", "name": f"ping_{host}", "from": host, "to": "r0", "interval": "20ms", "ecn": ecn,
              "dscp": mark} for host, (ecn, mark) in PINGS.items()]
    return {
        "name": "ecn-l4s",
        "duration": "12s",
        "topology": {"hosts": {host: {} for host in hosts}, "switches": {"s0": {}}, "links": [*access, bottleneck]},
        "workloads": [
            {"kind": "bulk", "name": "scalable", "from": "h1", "to": "h2", "cc": "dctcp", "ecn": "ect1",
             "start": "1s", "stop": "12s", "count": 2},
            # The flow's RTT: ECT(1), so that it waits in the L queue with the flow.
            {"kind": "ping", "name": "ping_l", "from": "h1", "to": "h2", "interval": "20ms", "ecn": "ect1"},
            *pings,
            {"kind": "irtt", "name": "irtt", "from": IRTT[0], "to": "r0", "interval": "20ms", "ecn": IRTT[1]},
        ],
        "probes": {"tcp": "off", "queue": [BOTTLENECK]},
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    try:
        binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built (make setup)")
    support = congestion.dctcp_support()
    if support.provider is None:
        pytest.skip(f"no dctcp here: {support.summary()}")
    exp = parse_experiment(spec(), [], base_dir=Path("."), source="test")
    outcome = run_experiment(exp, tmp_path_factory.mktemp("ecn") / "run", progress=False)
    assert outcome.complete, outcome.reason
    meta = json.loads((outcome.run_dir / "run.json").read_text())
    return outcome, meta, meta["datapath_stats"]


def rtts_after_settling(run_dir: Path, probe: str) -> list[float]:
    with open(run_dir / "series" / "ping.csv") as f:
        return [float(r["rtt_ms"]) for r in csv.DictReader(f) if r["probe"] == probe and float(r["t_s"]) > SETTLE_S]


def test_the_flow_enters_as_ect1_and_dualpi2s_l_queue_keeps_its_rtt_near_the_base(run, summary_reads_back):
    outcome, meta, stats = run
    first_hop, data, acks = stats["h1->s0"], stats[BOTTLENECK], stats["h2->s0"]
    # count = 2: two connections, each its own flow in the results, both rewritten.
    flows = [outcome.summary.flows[name] for name in SCALABLE]
    assert [w["group"] for w in meta["spec"]["workloads"] if w["name"] in SCALABLE] == ["scalable"] * 2
    assert meta["flows"][SCALABLE[0]]["port"] != meta["flows"][SCALABLE[1]]["port"]
    # Every segment of the flows was rewritten on arrival at their first hop (with the handshakes,
    # iperf3's control connections and h1's ACKs of them: a few more), and what left carries no ECT(0).
    segments = sum(f.goodput_mbps * 1e6 * f.seconds / (MSS * 8) + f.retransmits for f in flows)
    rewritten = first_hop["ect1_rewritten"]
    assert 0.98 * segments <= rewritten <= 1.05 * segments + 100, (rewritten, segments)
    assert first_hop["departures_by_ecn"]["ect0"] == 0 and first_hop["departures_by_ecn"]["ect1"] > rewritten
    # The bottleneck saw ECT(1) and marked some CE; no ECT(0), and nothing classic but the hosts'
    # IPv6 neighbour discovery, which the switch floods (a few frames per host). A wrong IPv4
    # checksum would have had h2 drop every packet: the link stayed full.
    by_ecn = data["departures_by_ecn"]
    assert by_ecn["ect0"] == 0 and by_ecn["ect1"] + by_ecn["ce"] > rewritten and by_ecn["ce"] > 100, by_ecn
    assert by_ecn["not_ect"] <= IPV6_CHATTER * len(spec()["topology"]["hosts"]), by_ecn
    assert data["ect1_rewritten"] == 0  # not rewritten twice
    dualpi2 = data["dualpi2"]
    # The C queue took the Not-ECT frames and those that are not IP (ARP): none of the flow's.
    assert dualpi2["pkts_in_l"] > rewritten and by_ecn["not_ect"] <= dualpi2["pkts_in_c"] <= by_ecn["not_ect"] + 20, \
        dualpi2
    assert dualpi2["step_mark"] > 100, dualpi2
    # The receiver's ACKs go back as the kernel sends them: DCTCP's ECT(0), not rewritten. Its
    # ECT(1) and CE are ping_l's echo replies, which carry the TOS byte their request arrived with.
    ping_l = parse_ping_summary((outcome.run_dir / "raw" / "ping_l.ping.txt").read_text())
    back = acks["departures_by_ecn"]
    assert back["ect0"] > rewritten / 3 and acks["ect1_rewritten"] == 0, acks  # an ACK per 2 segments, or more
    assert ping_l.received <= back["ect1"] + back["ce"] <= ping_l.transmitted, (back, ping_l)
    # DCTCP under the L queue's 1 ms step (under two frames at 20 Mbit/s, short of RFC 8257's
    # BDP / 7 = 5 packets for its threshold) leaves the link idle in part of each sawtooth: one
    # flow 11.0-13.3 of 19.1 Mbit/s in seven runs, with no retransmission (13.9 with ECT(0) left
    # alone and ecn_mask = "any_ect": the same L queue); two flows 15.5.
    goodput = sum(f.goodput_mbps for f in flows)
    assert goodput >= 0.5 * PAYLOAD_MBPS and min(f.goodput_mbps for f in flows) > 0.1 * PAYLOAD_MBPS, flows

    # ECT(1) pings wait with the flow in the L queue, which its step holds at about 1 ms.
    rtts = rtts_after_settling(outcome.run_dir, "ping_l")
    assert len(rtts) >= 200
    median, p95 = statistics.median(rtts), statistics.quantiles(rtts, n=20)[18]
    print(f"\nect1 through dualpi2: goodput {goodput:.2f} of {PAYLOAD_MBPS:.2f} Mbit/s; ping_l RTT median "
          f"{median:.2f}, "
          f"p95 {p95:.2f}, max {max(rtts):.2f} ms (base {BASE_RTT_MS}); {rewritten} rewritten at h1->s0 "
          f"({segments:.0f} segments); {BOTTLENECK} by ECN {by_ecn}; L {dualpi2['pkts_in_l']} C "
          f"{dualpi2['pkts_in_c']} packets, step marks {dualpi2['step_mark']}, ECN marks {dualpi2['ecn_mark']}; "
          f"ACKs by ECN {back}")
    assert median <= BASE_RTT_MS + 3, median
    assert p95 <= BASE_RTT_MS + 8, p95

    # What the run says of it: run.json's flow, and the bottleneck's codepoint mix in the summary.
    for name in SCALABLE:
        assert meta["flows"][name]["ecn"] == "ect1 (set where it enters the datapath, on h1->s0; the kernel sends ect0)"
    assert meta["flows"]["irtt"]["ecn"] == "ect1 (irtt --dscp)"
    queue = outcome.summary.queue[BOTTLENECK]
    assert queue.departures_by_ecn == {name: by_ecn[name] for name in ("not_ect", "ect1", "ect0", "ce")}
    assert sum(queue.marks.values()) > 100, queue.marks
    summary_reads_back(outcome.run_dir)


def test_ping_and_irtt_send_the_codepoint_they_are_asked_for(run):
    outcome, _, stats = run
    for host, (ecn, mark) in PINGS.items():
        sent = parse_ping_summary((outcome.run_dir / "raw" / f"ping_{host}.ping.txt").read_text()).transmitted
        by_ecn = stats[f"{host}->s0"]["departures_by_ecn"]
        by_dscp = stats[f"{host}->s0"]["departures_by_dscp"]
        print(f"ping -Q {ecn}, {mark}: {sent} sent; {host}->s0 by ECN {by_ecn}, by DSCP {by_dscp}; the echo replies "
              f"by ECN {stats[f's0->{host}']['departures_by_ecn']}")
        # Every request the host sent carried the codepoint and the DSCP; else only its own IPv6
        # chatter (Not-ECT, DSCP 0) left it.
        chatter = by_ecn["not_ect"] - (sent if ecn == "not-ect" else 0)
        assert sent > 400 and 0 <= chatter <= IPV6_CHATTER, (host, by_ecn)
        others = {c: n for c, n in by_ecn.items() if c != "not_ect"}
        assert others == {c: sent if c == STATS_NAME[ecn] else 0 for c in ("ce", "ect0", "ect1")}, (host, by_ecn)
        assert by_dscp == ({"0": sent + chatter} if mark == "BE" else {"0": chatter, "46": sent}), (host, by_dscp)
    host, ecn = IRTT
    irtt = json.loads((outcome.run_dir / "raw" / "irtt.irtt.json").read_text())["stats"]
    by_ecn = stats[f"{host}->s0"]["departures_by_ecn"]
    replies = stats[f"s0->{host}"]["departures_by_ecn"]
    print(f"irtt --dscp {ecn}: {irtt['packets_sent']} requests sent, {irtt['packets_received']} replies; {host}->s0 by "
          f"ECN {by_ecn}; s0->{host} {replies}")
    # Each request carried it; irtt's handshake (its open and close) and the host's chatter are Not-ECT.
    assert irtt["packets_sent"] > 400 and by_ecn[STATS_NAME[ecn]] == irtt["packets_sent"], by_ecn
    assert sum(by_ecn.values()) - by_ecn[STATS_NAME[ecn]] == by_ecn["not_ect"] <= IPV6_CHATTER + 2, by_ecn
