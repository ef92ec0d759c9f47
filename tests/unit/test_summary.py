"""summary.json as typed records (results/summary.py): real runs' files, as the writer wrote them
before the summary was typed, read into RunSummary and given back by to_dict key for key and in
order; what the writer makes of a run's record reads back equal; files of earlier versions, with
keys they did not write, read with those as None; a nic run's summary is its own record."""

import json
from pathlib import Path

import pytest

from bloatlab.experiment.record import (BulkSummary, Collected, IrttSummary, QueueMeasure, QueueSummary,
                                        ResponsivenessResult, RunRecord, UdpSummary)
from bloatlab.results.reader import flatten, load_run
from bloatlab.results.summary import NicSummary, RunSummary, summary_from_json
from bloatlab.results.writer import summary
from bloatlab.specs.experiment import list_presets, load_preset
from bloatlab.testbed.datapath_stats import DatapathStats, DirectionStats, TimerOvershoot

DATA = Path(__file__).parents[1] / "data"
STATS = json.loads((DATA / "datapath-stats.json").read_text())
TIMER = {"sleep_ns": 50_000, "count": 400, "p50_ns": 40_000, "p99_ns": 60_000, "max_ns": 900_000, "cpu_ns": 3_000,
         "rt_priority": None}
# Real runs' summary.json, written by bloatlab 0.x before its summary was typed: cs244 (web
# fetches), RRUL through cake with a capture (tins, pcap, irtt, pings, totals, the grade, the
# lateness and CPU), the responsiveness test, UDP beside TCP, and cs244 simulated in ns-3.
GOLDEN = sorted((DATA / "summaries").glob("*.json"))


def in_order(doc) -> str:
    """The JSON as text: equal only with the same keys in the same order."""
    return json.dumps(doc)


def test_the_real_summaries_hold_every_section_and_kind_of_flow():
    docs = [json.loads(p.read_text()) for p in GOLDEN]
    sections = {key for doc in docs for key in doc}
    assert sections == {"complete", "duration_s", "flows", "rtt_ms", "fetch_s", "queue", "pings", "totals_mbps",
                        "responsiveness", "bufferbloat", "pcap", "lateness", "cpu", "tins"}
    assert {f["kind"] for doc in docs for f in doc["flows"].values()} == {"bulk", "udp", "irtt"}
    assert any("drops_by_reason" in q for doc in docs for q in doc["queue"].values())


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_a_real_summary_reads_into_its_record_and_back_key_for_key(path):
    doc = json.loads(path.read_text())
    record = RunSummary.from_json(doc)
    if path.stem == "sim":  # ns-3's bulk flows were written in an order of their own, now the emulated one's
        assert record.to_dict() == doc
    else:
        assert in_order(record.to_dict()) == in_order(doc)
    assert RunSummary.from_json(json.loads(json.dumps(record.to_dict()))) == record
    assert flatten(record.to_dict()) == flatten(doc)  # run.metrics() and aggregate.json as before


def test_the_records_read_their_sections_typed():
    doc = json.loads((DATA / "summaries" / "rrul-cake-pcap.json").read_text())
    s = RunSummary.from_json(doc)
    kinds = {type(f) for f in s.flows.values()}
    assert kinds == {BulkSummary, IrttSummary}
    assert s.rtt_ms.p95 == doc["rtt_ms"]["p95"] and s.bufferbloat.grade == doc["bufferbloat"]["grade"]
    assert s.queue["s0->h2"].drops_by_reason == doc["queue"]["s0->h2"]["drops_by_reason"]
    assert s.pcap["s0->h2"].departures.file == "pcap/s0_to_h2.pcapng"
    assert s.tins["s0->h2"]["Voice"].drops == doc["tins"]["s0->h2"]["Voice"]["drops"]
    test = RunSummary.from_json(json.loads((DATA / "summaries" / "responsiveness.json").read_text())).responsiveness
    assert isinstance(test, ResponsivenessResult) and test.rpm > 0 and set(test.goodput_mbps) == {"down"}


def full_record() -> RunRecord:
    """cs244 with every section but the responsiveness test's: flows of each kind (one whose
    tool wrote nothing), two probes, fetches, a queue with its reasons, the datapath's stats (a
    capture, cake's tins), the timer, CPU pressure."""
    experiment = load_preset("cs244", ["duration=10s"], pcap=("s0->h2", "h2->s0"))  # h2->s0 captured nothing
    stats = DatapathStats.from_json(STATS)
    tin = {"name": "Voice", "threshold_bps": 2_500_000, "target_us": 5000, "interval_us": 100000, "flow_quantum": 300,
           "packets": 120, "bytes": 180_000, "backlog_bytes": 0, "drops": 3, "ack_drops": 7, "marks": 1,
           "way_indirect_hits": 0, "way_misses": 2, "way_collisions": 0, "peak_delay_us": 2500, "avg_delay_us": 800,
           "base_delay_us": 40, "sparse_flows": 1, "bulk_flows": 0, "unresponsive_flows": 0, "max_len": 1514}
    forward = {**STATS["links"]["s0-h2"]["forward"], "tins": [tin]}
    record = RunRecord(experiment, duration_s=10.0, datapath_stats={
        "s0->h2": DirectionStats.from_json(forward), "h2->s0": stats.links["s0-h2"].reverse},
        datapath=stats.figures, timer=TimerOvershoot.from_json(TIMER), cpu_pressure=0.25, links_batching=0.5)
    record.collected = Collected(
        ping=[(0.5, "ping", 20.0), (2.0, "ping", 90.0), (3.0, "irtt", 95.5)], ping_lost=2,
        per_ping={"ping": ([20.0, 90.0], 1), "irtt": ([95.5], 1)},
        fetch=[(1.0, 0.5, "web", 1), (6.0, 0.75, "web", 1), (11.0, 2.0, "web", 0)],
        flows={"bulk": BulkSummary(9.1, "h1", "h2", "BE", "reno", 9.3, 12, 10.0),
               "udp": UdpSummary(2.9, "h1", "h2", "EF", 3.0, 1.5, 0.25, 10.0),
               "irtt": IrttSummary("h1", "h2", "EF", 100, 98, 1.0, 1.0, 0.5),
               "failed": BulkSummary.unmeasured()})
    record.queues["s0->h2"] = QueueMeasure("datapath", [], QueueSummary(
        12.5, 100, 18000.0, 151400, 7, drops_by_reason={"queue_full": 7}, marks={}))
    return record


def test_everything_the_writer_makes_reads_back_equal():
    written = summary(full_record())
    doc = json.loads(json.dumps(written.to_dict()))
    assert list(doc) == ["complete", "duration_s", "flows", "rtt_ms", "fetch_s", "queue", "pings", "totals_mbps",
                         "bufferbloat", "pcap", "lateness", "cpu", "tins"]  # responsiveness: the presets' test
    assert doc["pcap"]["h2->s0"]["drops"] == {"file": "pcap/h2_to_s0.drops.pcapng", "packets": None, "cut": None,
                                              "lost": None, "bytes": None}
    back = RunSummary.from_json(doc)
    assert back == written and in_order(back.to_dict()) == in_order(doc)
    assert doc["flows"]["failed"] == {"kind": "bulk", **dict.fromkeys(
        ("goodput_mbps", "src", "dst", "dscp", "cc", "sender_mbps", "retransmits", "seconds"))}


@pytest.mark.parametrize("preset", [name for name, _ in list_presets()])
def test_a_preset_cut_short_writes_a_summary_that_reads_back_equal(preset):
    record = RunRecord(load_preset(preset), incomplete_reason="cut short")
    if preset == "responsiveness":
        record.collected = Collected(responsiveness=ResponsivenessResult.from_json(
            {"method": "draft", "rpm": 400.0, "idle_latency_ms": 20.0, "tm_ms": {"tcp_f": 5.0}}))
    written = summary(record)
    doc = json.loads(json.dumps(written.to_dict()))
    back = RunSummary.from_json(doc)
    assert back == written and in_order(back.to_dict()) == in_order(doc)


def test_a_summary_of_an_earlier_version_reads_with_what_it_lacks_as_none():
    old = {"complete": True, "duration_s": 60.0, "flows": {"bulk": {"goodput_mbps": 9.5, "retransmits": 3}},
           "rtt_ms": {"count": 3, "median": 20.0}, "queue": {"s0->h2": {"mean_pkts": 3.0, "max_pkts": 9}},
           "lateness": {"direction": "s0->h2", "p99_us": 40.0, "within": True}}
    s = RunSummary.from_json(old)
    flow = s.flows["bulk"]
    assert isinstance(flow, BulkSummary) and flow.goodput_mbps == 9.5 and flow.dscp is None
    assert s.rtt_ms.median == 20.0 and s.rtt_ms.lost is None and s.fetch_s is None and s.pings is None
    assert s.queue["s0->h2"].drops is None and s.queue["s0->h2"].drops_by_reason is None
    assert s.lateness.within is True and s.lateness.sentinel_at_random_p99_us is None
    assert flatten(s.to_dict()) == flatten(old)
    assert RunSummary.from_json({}).to_dict() == {}


def test_a_nic_runs_summary_is_its_own_record(make_run):
    doc = {"complete": True,
           "tcp": {"sender_mbps": 940.1, "receiver_mbps": 939.5, "retransmits": 12, "cwnd_kb_mean": 410.2,
                   "cwnd_kb_max": 620.0, "rtt_ms_mean": 1.2, "rtt_ms_max": 3.4},
           "udp": {"sender_mbps": 100.0, "receiver_mbps": 99.1, "jitter_ms": 0.01, "lost_percent": 0.9},
           "ping": {"min_ms": 0.1, "avg_ms": 0.2, "max_ms": 0.9, "mdev_ms": 0.1, "median_ms": 0.2, "count": 50,
                    "lost": 0}}
    s = summary_from_json(doc, "nic")
    assert isinstance(s, NicSummary) and s.tcp.retransmits == 12 and s.ping.count == 50
    assert in_order(s.to_dict()) == in_order(doc)
    run = load_run(make_run(kind="nic"))
    assert isinstance(run.summary, NicSummary) and run.summary.udp.receiver_mbps > 0
    assert run.metrics() == flatten(json.loads((run.path / "summary.json").read_text()))


def test_a_runs_metrics_are_every_number_of_its_file(make_run):
    run = load_run(make_run())
    assert isinstance(run.summary, RunSummary) and run.summary.rtt_ms.p95 > 0
    assert run.metrics() == flatten(json.loads((run.path / "summary.json").read_text()))
    (run.path / "summary.json").unlink()
    assert load_run(run.path).summary is None and load_run(run.path).metrics() == {}
