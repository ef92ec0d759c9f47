"""What the ns-3 driver wrote (cxx/bloatlab_ns3.cc), read into the RunRecord an emulated run
fills: the same series, flows, queue numbers and dualpi2 figures, so the results layer writes both
alike.

Times are seconds since the simulation's start, which is the run's t0.
"""

from __future__ import annotations

import csv
from dataclasses import fields
from pathlib import Path

from bloatlab.errors import BloatlabError
from bloatlab.experiment.probes.queue import from_qlog
from bloatlab.experiment.record import BulkSummary, Collected, QueueMeasure, RunRecord, SimulatedDirection
from bloatlab.specs import dscp
from bloatlab.specs.model import Bulk, Ping
from bloatlab.testbed.datapath_stats import DualPi2Stats


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return [row for row in csv.reader(f) if row]


def _table(path: Path) -> dict[str, dict[str, str]]:
    """A CSV with a header, by its first column."""
    with open(path, newline="") as f:
        return {row[next(iter(row))]: row for row in csv.DictReader(f)}


def collect(out: Path, record: RunRecord) -> None:
    """Fill `record` from the driver's files in `out`; a BloatlabError (the run is written
    incomplete, with it as the reason) where a file is not what the driver writes."""
    try:
        _collect(out, record)
    # A file cut short, a cell not a number, or a count no float holds.
    except (OSError, ValueError, KeyError, TypeError, IndexError, OverflowError) as e:
        raise BloatlabError(f"the ns-3 driver's files in {out} are not what it writes "
                            f"({type(e).__name__}: {' '.join(str(e).split())})", field="ns3") from None


def _collect(out: Path, record: RunRecord) -> None:
    exp = record.experiment
    got = Collected()
    got.ping = sorted((float(t), name, float(rtt)) for t, name, rtt in _rows(out / "ping.csv"))
    pings = _table(out / "pings.csv")
    for w in exp.workloads:
        if isinstance(w, Ping):
            sent, received = (int(pings[w.name][k]) for k in ("sent", "received")) if w.name in pings else (0, 0)
            # The request sent just before the end may still be on its way: not lost (as with ping).
            lost = max(0, sent - received - 1)
            got.ping_lost += lost
            got.per_ping[w.name] = ([rtt for _, name, rtt in got.ping if name == w.name], lost)
    flows = _table(out / "flows.csv")
    for w in exp.workloads:
        if isinstance(w, Bulk):
            f = flows.get(w.name, {})
            got.flows[w.name] = bulk_summary(w, f)
    got.throughput = [(float(t), name, float(mbps)) for t, name, mbps in _rows(out / "throughput.csv")]
    got.fetch = sorted((float(t), float(s), name, int(ok)) for t, s, name, ok in _rows(out / "fetch.csv"))
    failed = [row for row in got.fetch if not row[3]]
    if failed:
        got.warnings.append(f"{failed[0][2]}: {len(failed)} fetches did not finish before the run ended")
    record.collected = got
    record.cwnd = [(float(t), name, float(cwnd), float(ssthresh) if ssthresh else None, float(srtt) or None)
                   for t, name, cwnd, ssthresh, srtt in _rows(out / "cwnd.csv")]
    for link in exp.topology.links:
        for which in ("forward", "reverse"):
            name = link.direction_name(which)
            path = out.parent / "qlog" / f"{link.name}.{which}.qlog"
            if name in exp.probes.queue and path.exists():
                trace = from_qlog(path, 0.0)
                record.queues[name] = QueueMeasure("ns3", trace.rows(name, record.duration_s),
                                                   trace.summary(record.duration_s))
    dualpi2 = _table(out / "dualpi2.csv")
    record.simulated_stats = {name: SimulatedDirection(int(row["departures"]), int(row["bytes_out"]),
                                                       int(row["queue_drops"]),
                                                       dualpi2_stats(dualpi2[name]) if name in dualpi2 else None)
                              for name, row in _table(out / "directions.csv").items()}


def dualpi2_stats(row: dict[str, str]) -> DualPi2Stats:
    """A dualpi2 direction's figures at the end (dualpi2.csv), which the driver writes in the
    names of the datapath's stats: p' a fraction, the rest whole numbers."""
    return DualPi2Stats.from_json({f.name: (float if f.name == "prob" else int)(row[f.name])
                                   for f in fields(DualPi2Stats)})


def bulk_summary(w: Bulk, f: dict[str, str]) -> BulkSummary:
    """A bulk flow's summary.json entry, as iperf3's would be: goodput over the flow's window."""
    received = int(f.get("bytes_received", 0) or 0)
    sent = int(f.get("bytes_sent", 0) or 0)
    window = w.window_s
    return BulkSummary(goodput_mbps=received * 8 / window / 1e6 if f else None, src=w.src, dst=w.dst,
                       dscp=dscp.name(w.dscp), cc=w.cc, sender_mbps=sent * 8 / window / 1e6 if f else None,
                       retransmits=int(f["retransmits"]) if f else None, seconds=window)
