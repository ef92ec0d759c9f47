"""summary.json as typed records (docs/results.md, "summary.json"): a run's summary, section by
section (RunSummary), and a nic run's (NicSummary, docs/nic.md). What crosses from the writer
to the lab, the analysis and users' notebooks is these, never the JSON.

Each is read from its JSON by from_json, where a key that an older version did not write is None,
and to_dict gives back the JSON bloatlab writes, key for key and in its order; a test holds the
two equal over real runs' files. The sections measured below the results layer are typed where
they are measured: the flows, the queues and the responsiveness test's result in
experiment/record.py, the lateness verdict in testbed/datapath_stats.py (diagnostics.py makes it).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

from bloatlab.experiment.parsers import IperfResult, PingSummary
from bloatlab.experiment.record import FlowSummary, Plain, QueueSummary, ResponsivenessResult, flow_from_json
from bloatlab.results.stats import FETCH_STATS, GRADE_CONVENTION, RTT_STATS, describe, grade
from bloatlab.testbed.datapath_stats import (CaptureFile, DualPi2Stats, LatenessVerdict, TinStats, field_types,
                                            finite_number, fits)


@dataclass(frozen=True)
class RttStats(Plain):
    """Round trips in ms, over every reply (rtt_ms) or one probe's (pings.NAME); lost: requests
    with no reply."""

    count: int | None
    min: float | None
    mean: float | None
    median: float | None
    p95: float | None
    p99: float | None
    max: float | None
    lost: int | None

    @classmethod
    def of(cls, rtts: Sequence[float], lost: int) -> Self:
        return cls(**describe(rtts, RTT_STATS), lost=lost)


@dataclass(frozen=True)
class FetchStats(Plain):
    """Web fetches in s, over the successful ones; failed: the others."""

    count: int | None
    mean: float | None
    stddev: float | None
    median: float | None
    p95: float | None
    max: float | None
    failed: int | None

    @classmethod
    def of(cls, seconds: Sequence[float], failed: int) -> Self:
        return cls(**describe(seconds, FETCH_STATS), failed=failed)


@dataclass(frozen=True)
class Bufferbloat(Plain):
    """Latency idle and under load (ms), the increase and its grade by the convention named."""

    idle_ms: float | None
    loaded_ms: float | None
    increase_ms: float | None
    grade: str | None
    convention: str | None

    @classmethod
    def of(cls, idle_ms: float | None, loaded_ms: float | None) -> Self:
        increase = loaded_ms - idle_ms if idle_ms is not None and loaded_ms is not None else None
        return cls(idle_ms, loaded_ms, increase, grade(increase), GRADE_CONVENTION)


@dataclass(frozen=True)
class CaptureFileSummary(Plain):
    """One capture file, relative to the run: packets in it, past pcap_limit (cut), lost to a
    slow disk; its size in bytes. Null where the datapath said nothing of it."""

    file: str | None
    packets: int | None
    cut: int | None
    lost: int | None
    bytes: int | None

    @classmethod
    def of(cls, file: str, written: CaptureFile | None) -> Self:
        if written is None:
            return cls(file, None, None, None, None)
        return cls(file, written.written, written.cut, written.lost, written.bytes)


@dataclass(frozen=True)
class CaptureSummary:
    """A captured direction's two files."""

    departures: CaptureFileSummary
    drops: CaptureFileSummary

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CaptureSummary:
        return cls(CaptureFileSummary.from_json(doc.get("departures") or {}),
                   CaptureFileSummary.from_json(doc.get("drops") or {}))

    def to_dict(self) -> dict[str, Any]:
        return {"departures": self.departures.to_dict(), "drops": self.drops.to_dict()}


@dataclass(frozen=True)
class CpuShare(Plain):
    """How short of CPU the machine was while the schedule played (shares, 0 to 1): some task
    waiting for a CPU (PSI), and the datapath's report periods in which its links batched."""

    pressure: float | None
    links_batching: float | None


@dataclass(frozen=True)
class TinSummary(Plain):
    """One of a cake queue's tins as `tc -s qdisc` shows it: delays in ms, the threshold in Mbit/s."""

    threshold_mbps: float | None
    target_ms: float | None
    interval_ms: float | None
    packets: int | None
    bytes: int | None
    backlog_bytes: int | None
    drops: int | None
    ack_drops: int | None
    marks: int | None
    avg_delay_ms: float | None
    peak_delay_ms: float | None
    base_delay_ms: float | None
    sparse_flows: int | None
    bulk_flows: int | None
    unresponsive_flows: int | None
    way_indirect_hits: int | None
    way_misses: int | None
    way_collisions: int | None

    @classmethod
    def of(cls, t: TinStats) -> Self:
        return cls(threshold_mbps=t.threshold_bps / 1e6, target_ms=t.target_us / 1e3, interval_ms=t.interval_us / 1e3,
                   packets=t.packets, bytes=t.bytes, backlog_bytes=t.backlog_bytes, drops=t.drops,
                   ack_drops=t.ack_drops, marks=t.marks, avg_delay_ms=t.avg_delay_us / 1e3,
                   peak_delay_ms=t.peak_delay_us / 1e3, base_delay_ms=t.base_delay_us / 1e3,
                   sparse_flows=t.sparse_flows, bulk_flows=t.bulk_flows, unresponsive_flows=t.unresponsive_flows,
                   way_indirect_hits=t.way_indirect_hits, way_misses=t.way_misses, way_collisions=t.way_collisions)


@dataclass(frozen=True)
class DualPi2Summary(Plain):
    """A dualpi2 queue as `tc -s qdisc` shows it at the run's end: p' (the classic queue's
    probability is its square), the queues' head delays in ms, packets into each queue, the most
    an arrival found queued, CE marks (all, and the L queue's step marks), the scheduler's credit
    in bytes (at or below 0 the L queue goes next), memory in bytes."""

    prob: float | None
    delay_c_ms: float | None
    delay_l_ms: float | None
    pkts_in_c: int | None
    pkts_in_l: int | None
    maxq: int | None
    ecn_mark: int | None
    step_mark: int | None
    credit: int | None
    memory_used_bytes: int | None
    max_memory_used_bytes: int | None
    memory_limit_bytes: int | None

    @classmethod
    def of(cls, d: DualPi2Stats) -> Self:
        return cls(prob=d.prob, delay_c_ms=d.delay_c_us / 1e3, delay_l_ms=d.delay_l_us / 1e3, pkts_in_c=d.pkts_in_c,
                   pkts_in_l=d.pkts_in_l, maxq=d.maxq, ecn_mark=d.ecn_mark, step_mark=d.step_mark, credit=d.credit,
                   memory_used_bytes=d.memory_used_bytes, max_memory_used_bytes=d.max_memory_used_bytes,
                   memory_limit_bytes=d.memory_limit_bytes)


def _numbers(doc: dict[str, Any]) -> dict[str, float]:
    """A map of numbers, without what is not one."""
    return {name: value for name, value in doc.items() if fits(value, float)}


def _each(read: Callable[[Any], Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda doc: {name: read(value) for name, value in doc.items()}


def _json(value: Any) -> Any:
    """A section as JSON: a record's to_dict, a map of them, or a plain value."""
    if isinstance(value, dict):
        return {name: _json(v) for name, v in value.items()}
    return value.to_dict() if hasattr(value, "to_dict") else value


class _Sections:
    """A summary of sections, each absent (None) or there: read by its reader, written in the
    order the fields are declared, an absent one left out."""

    READERS: ClassVar[dict[str, Callable[[Any], Any]]] = {}  # by section: how its JSON is read

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Self:
        hints = field_types(cls)

        def read(name: str) -> Any:
            value = doc.get(name)
            reader = cls.READERS.get(name)
            if reader is None:  # a plain value (complete, duration_s): None if not of its type
                return value if fits(value, hints[name]) else None
            return reader(value) if value is not None else None
        return cls(**{f.name: read(f.name) for f in fields(cls)})  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _json(value) for f in fields(self)  # type: ignore[arg-type]
                if (value := getattr(self, f.name)) is not None}


@dataclass(frozen=True)
class RunSummary(_Sections):
    """A run's summary.json (docs/results.md): whether it completed and how much of its schedule
    ran, then its measurements. A section the run has no such measurement for is None (and
    absent from the file): pings with one latency probe, totals with one flow, bufferbloat
    without a load to compare, and so on."""

    complete: bool | None = None
    duration_s: float | None = None
    flows: dict[str, FlowSummary] | None = None  # bulk, udp and irtt flows by name
    rtt_ms: RttStats | None = None
    fetch_s: FetchStats | None = None
    queue: dict[str, QueueSummary] | None = None  # by probed link direction ("s0->h2")
    pings: dict[str, RttStats] | None = None  # by latency probe, when the run has several
    totals_mbps: dict[str, float] | None = None  # goodput by pair of hosts ("h1->h2"), several flows
    responsiveness: ResponsivenessResult | None = None
    bufferbloat: Bufferbloat | None = None
    pcap: dict[str, CaptureSummary] | None = None  # by captured direction
    lateness: LatenessVerdict | None = None  # with a userspace direction that sent anything
    cpu: CpuShare | None = None  # with PSI, once the schedule began
    tins: dict[str, dict[str, TinSummary]] | None = None  # by direction, then tin name (cake)
    dualpi2: dict[str, DualPi2Summary] | None = None  # by direction with a dualpi2 queue

    READERS = {"flows": _each(flow_from_json), "rtt_ms": RttStats.from_json, "fetch_s": FetchStats.from_json,
               "queue": _each(QueueSummary.from_json), "pings": _each(RttStats.from_json), "totals_mbps": _numbers,
               "responsiveness": ResponsivenessResult.from_json, "bufferbloat": Bufferbloat.from_json,
               "pcap": _each(CaptureSummary.from_json), "lateness": LatenessVerdict.from_json,
               "cpu": CpuShare.from_json, "tins": _each(_each(TinSummary.from_json)),
               "dualpi2": _each(DualPi2Summary.from_json)}


# A nic run (docs/nic.md) ----------------------------------------------------------------------

def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


@dataclass(frozen=True)
class NicTcp(Plain):
    """The TCP test: sender and receiver throughput (Mbit/s), retransmits, and the sender's cwnd
    (KB) and RTT (ms) over iperf3's intervals."""

    sender_mbps: float | None
    receiver_mbps: float | None
    retransmits: int | None
    cwnd_kb_mean: float | None
    cwnd_kb_max: float | None
    rtt_ms_mean: float | None
    rtt_ms_max: float | None

    @classmethod
    def of(cls, result: IperfResult, doc: dict[str, Any]) -> Self:
        """From iperf3's result and its JSON: cwnd and RTT averaged over its intervals (one
        sample each, from TCP_INFO)."""
        # What iperf3 did not fill in (an interval cut short) is left out, whatever stands there.
        streams = [s for i in _dicts(doc.get("intervals")) for s in _dicts(i.get("streams"))[:1] if not s.get("omitted")]
        cwnd = [v / 1000 for s in streams if (v := finite_number(s.get("snd_cwnd"))) is not None]
        rtt = [v / 1000 for s in streams if (v := finite_number(s.get("rtt")))]
        return cls(result.sender_bps / 1e6, result.receiver_bps / 1e6, result.retransmits, _mean(cwnd),
                   max(cwnd, default=None), _mean(rtt), max(rtt, default=None))


@dataclass(frozen=True)
class NicUdp(Plain):
    """The UDP test: sender and receiver throughput (Mbit/s), jitter (ms) and loss (%) as the
    receiver saw them."""

    sender_mbps: float | None
    receiver_mbps: float | None
    jitter_ms: float | None
    lost_percent: float | None

    @classmethod
    def of(cls, result: IperfResult) -> Self:
        return cls(result.sender_bps / 1e6, result.receiver_bps / 1e6, result.jitter_ms, result.lost_percent)


@dataclass(frozen=True)
class NicPing(Plain):
    """ping beside the tests, in ms as ping states it, the median over its replies, how many
    there were and the requests lost."""

    min_ms: float | None
    avg_ms: float | None
    max_ms: float | None
    mdev_ms: float | None
    median_ms: float | None
    count: int | None
    lost: int | None

    @classmethod
    def of(cls, stated: PingSummary, rtts: Sequence[float], lost: int) -> Self:
        return cls(stated.min_ms, stated.avg_ms, stated.max_ms, stated.mdev_ms,
                   statistics.median(rtts) if rtts else None, len(rtts), lost)


@dataclass(frozen=True)
class NicSummary(_Sections):
    """A nic run's summary.json: whether it completed, and each test it ran (null figures where
    the test failed)."""

    complete: bool | None = None
    tcp: NicTcp | None = None
    udp: NicUdp | None = None
    ping: NicPing | None = None

    READERS = {"tcp": NicTcp.from_json, "udp": NicUdp.from_json, "ping": NicPing.from_json}


Summary = RunSummary | NicSummary


def summary_from_json(doc: dict[str, Any], kind: str | None = None) -> Summary:
    """summary.json's record: a nic run's (run.json's kind "nic") or any other run's."""
    return NicSummary.from_json(doc) if kind == "nic" else RunSummary.from_json(doc)
