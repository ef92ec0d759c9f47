"""The results writer: a RunRecord into summary.json and run.json, also for a run cut short
before anything was measured."""

import json
from pathlib import Path

import pytest

from bloatlab.experiment.record import BulkSummary, RunRecord, SimulatedDirection
from bloatlab.results.writer import record_from_document, run_document, summary
from bloatlab.specs.experiment import list_presets, load_preset
from bloatlab.testbed.datapath_stats import DatapathStats, DirectionStats, TimerOvershoot

# A stats file bloatlab-link wrote: cs244's two links, a cake queue and a capture on s0->h2.
STATS = json.loads((Path(__file__).parents[1] / "data" / "datapath-stats.json").read_text())
TIMER = {"sleep_ns": 50_000, "count": 400, "p50_ns": 40_000, "p99_ns": 60_000, "max_ns": 900_000, "cpu_ns": 3_000,
         "rt_priority": None}


def test_a_run_cut_short_before_its_probes_still_names_every_probed_queue():
    experiment = load_preset("cs244", ["duration=10s"])
    record = RunRecord(experiment, incomplete_reason="failed: bloatlab-link exited", backends=["userspace"] * 2)
    doc = summary(record).to_dict()
    assert doc["complete"] is False
    assert doc["queue"] == {"s0->h2": {"mean_pkts": None, "max_pkts": None, "mean_bytes": None, "max_bytes": None,
                                       "drops": None}}
    assert doc["rtt_ms"]["count"] == 0 and doc["rtt_ms"]["median"] is None
    meta = run_document(record)
    assert [link["backend"] for link in meta["links"]] == ["userspace", "userspace"]
    assert meta["probes"]["queue"] == {}  # nothing was measured, so by nothing
    # The queue as it ran: the discipline's every parameter, defaults filled in.
    assert meta["links"][1]["forward"]["queue"] == {"discipline": "droptail", "packets": 100, "bytes": None}


@pytest.mark.parametrize("preset", [name for name, _ in list_presets()])
def test_run_json_gives_back_the_experiment_and_the_record_that_wrote_it(preset):
    # What a killed run is recovered from: its run.json, as written at t0, and nothing else.
    experiment = load_preset(preset)
    record = RunRecord(experiment, started_at="2026-11-27T07:00:00+00:00", t0_real=1.79e9, t0_mono=5000.25,
                       owner={"pid": 4242, "starttime": 77}, network="run-abc123",
                       backends=["userspace"] * len(experiment.topology.links), tcp_probe="ss",
                       ports={w.name: 20000 + i for i, w in enumerate(experiment.workloads)},
                       timer=TimerOvershoot.from_json(TIMER), machine={"kernel": "6.1"}, tools={"iperf3": "3.12"})
    doc = json.loads(json.dumps(run_document(record)))
    back = record_from_document(doc)
    assert back.experiment == experiment  # repeat, params, preset and source included
    for name in ("started_at", "t0_real", "t0_mono", "owner", "network", "backends", "tcp_probe", "timer", "machine",
                 "tools"):
        assert getattr(back, name) == getattr(record, name), name
    # Ports come back for the flows that have a server to tell them apart by (not pings).
    assert back.ports == {name: port for name, port in record.ports.items() if name in doc["flows"]}
    assert back.collected.ping == [] and back.cwnd == []


def test_cakes_tins_go_into_the_summary_by_direction_and_name():
    experiment = load_preset("cs244", ["duration=10s"])
    tin = {"name": "Voice", "threshold_bps": 2_500_000, "target_us": 5000, "interval_us": 100000, "flow_quantum": 300,
           "packets": 120, "bytes": 180_000, "backlog_bytes": 0, "drops": 3, "ack_drops": 7, "marks": 1,
           "way_indirect_hits": 0,
           "way_misses": 2, "way_collisions": 0, "peak_delay_us": 2500, "avg_delay_us": 800, "base_delay_us": 40,
           "sparse_flows": 1, "bulk_flows": 0, "unresponsive_flows": 0, "max_len": 1514}
    record = RunRecord(experiment, datapath_stats={
        "s0->h2": DirectionStats.from_json({**STATS["links"]["s0-h2"]["forward"], "tins": [tin]}),
        "h2->s0": DirectionStats.from_json(STATS["links"]["s0-h2"]["reverse"])})
    assert summary(record).to_dict()["tins"] == {"s0->h2": {"Voice": {
        "threshold_mbps": 2.5, "target_ms": 5.0, "interval_ms": 100.0, "packets": 120, "bytes": 180_000,
        "backlog_bytes": 0, "drops": 3, "ack_drops": 7, "marks": 1, "avg_delay_ms": 0.8,
        "peak_delay_ms": 2.5, "base_delay_ms": 0.04, "sparse_flows": 1, "bulk_flows": 0, "unresponsive_flows": 0,
        "way_indirect_hits": 0, "way_misses": 2, "way_collisions": 0}}}
    assert summary(RunRecord(experiment)).tins is None and "tins" not in summary(RunRecord(experiment)).to_dict()


def test_run_json_holds_the_datapath_s_figures_as_it_wrote_them_and_gives_them_back():
    # What a killed run is recovered from carries the datapath's figures key for key, as the
    # stats file had them; a simulated run's directions hold what ns-3's driver counted.
    experiment = load_preset("cs244")
    stats = DatapathStats.from_json(STATS)
    directions = {"h1->s0": stats.links["h1-s0"].forward, "s0->h1": stats.links["h1-s0"].reverse,
                  "s0->h2": stats.links["s0-h2"].forward, "h2->s0": stats.links["s0-h2"].reverse}
    record = RunRecord(experiment, backends=["userspace"] * 2, datapath_stats=directions, datapath=stats.figures,
                       timer=TimerOvershoot.from_json(TIMER))
    doc = json.loads(json.dumps(run_document(record)))
    assert doc["datapath_stats"]["s0->h2"] == STATS["links"]["s0-h2"]["forward"]  # its capture and tins too
    assert doc["datapath"] == {key: STATS[key] for key in ("workers", "sentinel", "switches")}
    assert doc["timer"] == TIMER
    back = record_from_document(doc)
    assert (back.datapath_stats, back.datapath, back.timer) == (record.datapath_stats, record.datapath, record.timer)
    assert list(back.datapath_stats) == list(directions)
    # Kernel links: no datapath, no timer.
    bare = json.loads(json.dumps(run_document(RunRecord(experiment))))
    assert (bare["datapath_stats"], bare["datapath"], bare["timer"]) == ({}, {}, None)
    back = record_from_document(bare)
    assert (back.datapath_stats, back.datapath, back.timer) == ({}, None, None)
    simulated = RunRecord(experiment, simulated_stats={"s0->h2": SimulatedDirection(900, 1_300_000, 12)})
    assert run_document(simulated)["datapath_stats"] == {"s0->h2": {"departures": 900, "bytes_out": 1_300_000,
                                                                     "queue_drops": 12}}


def test_a_recovered_flow_without_its_clients_json_still_names_its_hosts_and_counts_in_the_totals(tmp_path):
    # A run killed outright: iperf3's client never printed its JSON, its server's intervals are
    # all there is. The flow's ends come from the spec, so the totals per pair still add up.
    from bloatlab.experiment.clock import Clock
    from bloatlab.experiment.workloads import BulkFlow

    experiment = load_preset("cs244", ["duration=10s"])
    bulk = next(w for w in experiment.workloads if w.kind == "bulk")
    (tmp_path / f"{bulk.name}.server.txt").write_text(
        "100.5 [  5]   0.00-1.00   sec  1.10 MBytes  9.00 Mbits/sec\n"
        "101.5 [  5]   1.00-2.00   sec  1.20 MBytes  11.0 Mbits/sec\n")
    running = BulkFlow(bulk, net=None, raw_dir=tmp_path, clock=Clock(t0_mono=100.0), port=5201)
    running.started = running.recovered = True
    got = running.collect()
    flow = got.flows[bulk.name]
    assert (flow.src, flow.dst, flow.cc, flow.goodput_mbps) == (bulk.src, bulk.dst, bulk.cc, 10.0)
    assert (flow.sender_mbps, flow.retransmits, flow.seconds) == (None, None, None)  # only iperf3's client says
    assert got.errors == [] and "interval reports" in got.warnings[0]
    record = RunRecord(experiment, incomplete_reason="recovered")
    record.collected.flows.update(got.flows, other=BulkSummary.from_json({"src": bulk.src, "dst": bulk.dst,
                                                                         "goodput_mbps": 2.0}))
    assert summary(record).totals_mbps == {f"{bulk.src}->{bulk.dst}": 12.0}
