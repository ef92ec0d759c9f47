"""Writing a run's results (docs/results.md): the series, summary.json and run.json, from the
RunRecord the experiment layer hands on. Plots and reports come later, from these files alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bloatlab.experiment.record import BulkSummary, QueueSummary, RunRecord, SimulatedDirection, UdpSummary
from bloatlab.experiment.workloads import ecn_origins
from bloatlab.results.files import RunDir
from bloatlab.results.stats import describe
from bloatlab.results.summary import (Bufferbloat, CaptureFileSummary, CaptureSummary, CpuShare, DualPi2Summary,
                                      FetchStats, RttStats, RunSummary, TinSummary)
from bloatlab.specs import dscp
from bloatlab.specs.model import Experiment
from bloatlab.testbed.datapath_stats import DatapathFigures, DirectionStats, TimerOvershoot
from bloatlab.testbed.diagnostics import lateness
from bloatlab.testbed.links.base import capture_file
from bloatlab.version import __version__


def summary(record: RunRecord) -> RunSummary:
    """summary.json: the headline numbers, statistics over the samples."""
    collected = record.collected
    fetches = [s for _, s, _, ok in collected.fetch if ok]
    # Every probed direction, with null numbers where nothing was measured (a run cut short early),
    # and the ECN codepoints it sent on where the datapath counted them.
    queue = {name: with_ecn(record.queues[name].summary if name in record.queues else QueueSummary.unmeasured(),
                            record.datapath_stats.get(name))
             for name in record.experiment.probes.queue}
    pings = None
    if len(collected.per_ping) > 1:  # RTT per probe, or under each phase of load (txqueuelen)
        pings = {name: RttStats.of(rtts, lost) for name, (rtts, lost) in collected.per_ping.items()}
    totals: dict[str, float] = {}  # goodput per pair of hosts, where several flows share it (RRUL's totals)
    for flow in collected.flows.values():
        if isinstance(flow, (BulkSummary, UdpSummary)) and flow.goodput_mbps is not None:
            pair = f"{flow.src}->{flow.dst}"
            totals[pair] = totals.get(pair, 0.0) + flow.goodput_mbps
    latency = idle_and_loaded(record)
    return RunSummary(
        complete=record.complete, duration_s=record.duration_s, flows=dict(collected.flows),
        rtt_ms=RttStats.of([rtt for *_, rtt in collected.ping], collected.ping_lost),
        fetch_s=FetchStats.of(fetches, sum(1 for *_, ok in collected.fetch if not ok)), queue=queue, pings=pings,
        totals_mbps=totals if len(collected.flows) > 1 and totals else None,
        responsiveness=collected.responsiveness,
        bufferbloat=Bufferbloat.of(*latency) if latency is not None else None,
        pcap=captures(record) if record.experiment.probes.pcap else None,
        lateness=lateness(record.datapath_stats, record.timer, record.datapath),
        # How short of CPU the machine was while the run played.
        cpu=CpuShare(record.cpu_pressure, record.links_batching) if record.cpu_pressure is not None else None,
        tins=tins_of(record.datapath_stats) or None,
        dualpi2=dualpi2_of(record) or None)


def with_ecn(queue: QueueSummary, stats: DirectionStats | None) -> QueueSummary:
    """A probed queue's summary with its direction's departures by ECN codepoint, where it is a
    userspace one."""
    if stats is None:
        return queue
    return dataclasses.replace(queue, departures_by_ecn=stats.departures_by_ecn.by_codepoint())


def tins_of(datapath_stats: dict[str, DirectionStats]) -> dict[str, dict[str, TinSummary]]:
    """Per direction with classes (CAKE's tins), each tin by name: what tc -s shows of it, delays
    in ms and the threshold in Mbit/s."""
    out = {direction: {t.name: TinSummary.of(t) for t in stats.tins or ()}
           for direction, stats in datapath_stats.items()}
    return {d: t for d, t in out.items() if t}


def dualpi2_of(record: RunRecord) -> dict[str, DualPi2Summary]:
    """Per direction with a dualpi2 queue: what tc -s shows of it, delays in ms; from the
    datapath's stats, or from ns-3's driver's figures in a simulated run."""
    directions: dict[str, DirectionStats | SimulatedDirection] = {**record.datapath_stats, **record.simulated_stats}
    return {direction: DualPi2Summary.of(stats.dualpi2) for direction, stats in directions.items()
            if stats.dualpi2 is not None}


def captures(record: RunRecord) -> dict[str, CaptureSummary]:
    """Each captured direction's two files (relative to the run) and what the datapath wrote to
    them: packets, those past the size limit (cut) and those the disk was too slow for (lost)."""
    out = {}
    for direction in record.experiment.probes.pcap:
        stats = record.datapath_stats.get(direction)
        capture = stats.capture if stats is not None else None
        out[direction] = CaptureSummary(
            CaptureFileSummary.of(f"pcap/{capture_file(direction, drops=False)}",
                                  capture.departures if capture is not None else None),
            CaptureFileSummary.of(f"pcap/{capture_file(direction, drops=True)}",
                                  capture.drops if capture is not None else None))
    return out


LOADS = ("bulk", "udp")
SETTLE_S = 1.0  # after the first load starts, before its queue counts as loaded


def idle_and_loaded(record: RunRecord) -> tuple[float | None, float | None] | None:
    """The idle and the loaded latency (ms) the grade compares, or None when the run has no
    such comparison. A responsiveness test measures its own: idle probes, then the round trip
    its RPM stands for (60000 / RPM). Otherwise the latency probes' mean before the first bulk
    or UDP flow starts, against their mean while one runs (from SETTLE_S after the first start),
    as the DSLReports and Waveform tests average."""
    collected = record.collected
    test = collected.responsiveness
    if test is not None:
        return test.idle_latency_ms, (60000 / test.rpm if test.rpm else None)
    loads = [w for w in record.experiment.workloads if w.kind in LOADS]
    if not loads or not collected.ping:
        return None
    first = min(w.start_ns for w in loads) / 1e9

    def loaded(t: float) -> bool:
        return t >= first + SETTLE_S and any(w.start_ns / 1e9 <= t < w.stop_ns / 1e9 for w in loads)

    idle = [rtt for t, _, rtt in collected.ping if 0 <= t < first]
    busy = [rtt for t, _, rtt in collected.ping if loaded(t)]
    mean = describe(idle, ("mean",))["mean"], describe(busy, ("mean",))["mean"]
    return mean[0], mean[1]


def run_document(record: RunRecord) -> dict[str, Any]:
    """run.json: what ran, where and with what, so the run describes itself."""
    exp = record.experiment
    links = []
    for index, link in enumerate(exp.topology.links):
        entry: dict[str, Any] = {"name": link.name, "ends": list(link.ends),
                                 "backend": record.backends[index] if index < len(record.backends) else None}
        for which in ("forward", "reverse"):
            direction = getattr(link, which)
            # The queue as it ran: every parameter of its discipline, defaults included.
            entry[which] = {"direction": link.direction_name(which), **direction.to_dict(),
                            "queue": direction.queue.config(direction.rate_bps),
                            "seed": exp.topology.direction_seed(index, which)}
        links.append(entry)
    flows = {}
    ecn = ecn_origins(exp)  # the ECN codepoint each flow's packets carry, and who sets it
    for w in exp.workloads:
        if w.kind in ("bulk", "udp", "irtt"):
            flows[w.name] = {"kind": w.kind, "src": w.src, "dst": w.dst, "port": record.ports.get(w.name),
                             "cc": getattr(w, "cc", None), "dscp": dscp.name(w.dscp), "ecn": ecn[w.name]}
        elif w.kind in ("web", "responsiveness"):
            # src is the server (downloads' sender); the run's RPM test may load both ways.
            flows[w.name] = {"kind": w.kind, "src": w.server, "dst": w.client, "port": record.ports.get(w.name),
                             "cc": w.cc, "ecn": ecn[w.name]}
    return {
        "bloatlab_version": __version__, "name": exp.name, "preset": exp.preset, "source": exp.source,
        "params": exp.params, "spec": exp.to_dict(),
        "started_at": record.started_at, "ended_at": record.ended_at,
        "t0_realtime_s": record.t0_real or None, "t0_monotonic_s": record.t0_mono or None,
        "owner": record.owner,
        "complete": record.complete, "incomplete_reason": record.incomplete_reason, "errors": record.errors,
        "warnings": record.warnings,
        "machine": record.machine, "tools": record.tools,
        "network": record.network,
        # A socket that names no congestion control gets its host's (a workload names its own).
        "hosts": [{"name": h, "address": exp.topology.address(h), "cc": record.host_cc.get(h)}
                  for h in exp.topology.hosts],
        "links": links,
        # Per direction: the datapath's stats as it wrote them, or ns-3's driver's counters.
        "datapath_stats": {**{name: d.to_dict() for name, d in record.datapath_stats.items()},
                           **{name: d.to_dict() for name, d in record.simulated_stats.items()}},
        "datapath": record.datapath.to_dict() if record.datapath is not None else {},
        "timer": record.timer.to_dict() if record.timer is not None else None,
        "flows": flows,
        "probes": {"tcp": record.tcp_probe, "queue": {name: q.source for name, q in record.queues.items()},
                   "tcp_lost_events": record.tcp_lost_events},
        "snapshots": record.snapshots,
    }


def record_from_document(doc: dict[str, Any]) -> RunRecord:
    """What run_document wrote, back into a RunRecord, its measurements empty: how a killed run
    is recovered from what it wrote as it started (lab/run.py recover_run)."""
    exp = Experiment.from_dict(doc["spec"], params=doc.get("params"), preset=doc.get("preset"),
                               source=doc.get("source"))
    flows = doc.get("flows") or {}
    directions = doc.get("datapath_stats") or {}
    simulated = exp.backend == "ns3"
    return RunRecord(
        exp, started_at=doc.get("started_at"), ended_at=doc.get("ended_at"), t0_real=doc.get("t0_realtime_s"),
        t0_mono=doc.get("t0_monotonic_s"), owner=doc.get("owner"), incomplete_reason=doc.get("incomplete_reason"),
        errors=list(doc.get("errors") or []), warnings=list(doc.get("warnings") or []), network=doc.get("network"),
        backends=[link.get("backend") for link in doc.get("links", [])],
        host_cc={h["name"]: h["cc"] for h in doc.get("hosts", []) if h.get("cc")},
        ports={name: flow["port"] for name, flow in flows.items() if flow.get("port")},
        tcp_probe=(doc.get("probes") or {}).get("tcp") or "none",
        datapath_stats={} if simulated else {name: DirectionStats.from_json(d) for name, d in directions.items()},
        simulated_stats={name: SimulatedDirection(**d) for name, d in directions.items()} if simulated else {},
        datapath=DatapathFigures.from_json(doc["datapath"]) if doc.get("datapath") else None,
        timer=TimerOvershoot.from_json(doc["timer"]) if doc.get("timer") is not None else None,
        snapshots=doc.get("snapshots") or {}, machine=doc.get("machine") or {}, tools=doc.get("tools") or {})


def write_run(run_dir: RunDir, record: RunRecord) -> RunSummary:
    """Every series, then summary.json, then run.json (last: its `complete` vouches for the
    rest); returns the summary."""
    collected = record.collected
    run_dir.write_series("ping", sorted(collected.ping))
    run_dir.write_series("fetch", sorted(collected.fetch))
    run_dir.write_series("throughput", sorted(collected.throughput, key=lambda r: (r[1], r[0])))
    run_dir.write_series("cwnd", record.cwnd)
    run_dir.write_series("queue", [row for q in record.queues.values() for row in q.rows])
    written = summary(record)
    run_dir.write_json("summary.json", written.to_dict())
    run_dir.write_json("run.json", run_document(record))
    return written
