"""Writing a run's results (docs/results.md): the series, summary.json and run.json, from the
RunRecord the experiment layer hands on. Plots and reports come later, from these files alone.
"""

from __future__ import annotations

from typing import Any

from bloatlab.experiment.record import QUEUE_NUMBERS, RunRecord
from bloatlab.results.files import RunDir
from bloatlab.results.stats import FETCH_STATS, RTT_STATS, describe
from bloatlab.version import __version__


def summary(record: RunRecord) -> dict[str, Any]:
    """summary.json: the headline numbers, statistics over the samples."""
    collected = record.collected
    rtts = [rtt for _, rtt in collected.ping]
    fetches = [s for _, s, _, ok in collected.fetch if ok]
    rtt = describe(rtts, RTT_STATS)
    rtt["lost"] = collected.ping_lost
    fetch = describe(fetches, FETCH_STATS)
    fetch["failed"] = sum(1 for *_, ok in collected.fetch if not ok)
    # Every probed direction, with null numbers where nothing was measured (a run cut short early).
    queue = {name: record.queues[name].summary if name in record.queues else dict.fromkeys(QUEUE_NUMBERS)
             for name in record.experiment.probes.queue}
    doc = {"complete": record.complete, "duration_s": record.duration_s, "flows": collected.flows,
           "rtt_ms": rtt, "fetch_s": fetch, "queue": queue}
    if len(collected.per_ping) > 1:  # RTT under each phase of load (txqueuelen: TCP, then UDP)
        doc["pings"] = {name: {**describe(rtts, RTT_STATS), "lost": lost}
                        for name, (rtts, lost) in collected.per_ping.items()}
    return doc


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
    for w in exp.workloads:
        if w.kind in ("bulk", "udp"):
            flows[w.name] = {"kind": w.kind, "src": w.src, "dst": w.dst, "port": record.ports.get(w.name),
                             "cc": getattr(w, "cc", None)}
        elif w.kind == "web":
            flows[w.name] = {"kind": "web", "src": w.server, "dst": w.client, "port": record.ports.get(w.name),
                             "cc": w.cc}
    return {
        "bloatlab_version": __version__, "name": exp.name, "preset": exp.preset, "source": exp.source,
        "params": exp.params, "spec": exp.to_dict(),
        "started_at": record.started_at, "ended_at": record.ended_at,
        "t0_realtime_s": record.t0_real or None,
        "complete": record.complete, "incomplete_reason": record.incomplete_reason, "errors": record.errors,
        "warnings": record.warnings,
        "machine": record.machine, "tools": record.tools,
        "network": record.network,
        # A socket that names no congestion control gets its host's (a workload names its own).
        "hosts": [{"name": h, "address": exp.topology.address(h), "cc": record.host_cc.get(h)}
                  for h in exp.topology.hosts],
        "links": links,
        "datapath_stats": record.datapath_stats,
        "flows": flows,
        "probes": {"tcp": record.tcp_probe, "queue": {name: q.source for name, q in record.queues.items()},
                   "tcp_lost_events": record.tcp_lost_events},
        "snapshots": record.snapshots,
    }


def write_run(run_dir: RunDir, record: RunRecord) -> dict[str, Any]:
    """Every series, then summary.json, then run.json (last: its `complete` vouches for the
    rest); returns the summary."""
    collected = record.collected
    run_dir.write_series("ping", sorted(collected.ping))
    run_dir.write_series("fetch", sorted(collected.fetch))
    run_dir.write_series("throughput", sorted(collected.throughput, key=lambda r: (r[1], r[0])))
    run_dir.write_series("cwnd", record.cwnd)
    run_dir.write_series("queue", [row for q in record.queues.values() for row in q.rows])
    doc = summary(record)
    run_dir.write_json("summary.json", doc)
    run_dir.write_json("run.json", run_document(record))
    return doc
