"""What a run measured and knows about itself, as the experiment layer hands it on: the rows of
its series, the numbers its summary is made of, and the facts run.json records. bloatlab's
results layer writes it (results/writer.py); nothing here touches a file.

The sections of summary.json measured here are typed records (results/summary.py holds the
rest and the whole): each flow by its kind, a probed queue, the responsiveness test's result.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self

from bloatlab.specs.model import Experiment
from bloatlab.testbed.datapath_stats import (DatapathFigures, DirectionStats, DualPi2Stats, TimerOvershoot, field_types,
                                            fits)


class Plain:
    """A record of plain values (numbers, names, flags, maps of them) as summary.json holds it:
    read key for key, a key an older version did not write as None, and written in the order
    its fields are declared. A value not of its field's type (a damaged or hand-edited file) is
    read as None too: what the record hands on is always of the type it declares."""

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Self:
        hints = field_types(cls)
        return cls(**{f.name: _copied(v) if fits(v := doc.get(f.name), hints[f.name]) else None  # type: ignore[arg-type]
                      for f in fields(cls)})

    @classmethod
    def unmeasured(cls) -> Self:
        """Every figure null: nothing was measured."""
        return cls.from_json({})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _copied(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


def _copied(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


# A flow in summary.json "flows": bulk and udp as iperf3 (or ns-3) counted them, irtt's probes.
# Null where the tool said nothing (it failed, or a run was cut short before its totals).

class _Flow(Plain):
    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **super().to_dict()}


@dataclass(frozen=True)
class BulkSummary(_Flow):
    """A bulk TCP flow: goodput (Mbit/s) as its receiver counted it over the flow's active time,
    the sender's rate, its retransmitted segments, how long it ran (s)."""

    kind: ClassVar[str] = "bulk"
    goodput_mbps: float | None
    src: str | None
    dst: str | None
    dscp: str | None  # its packets' codepoint by name ("EF")
    cc: str | None
    sender_mbps: float | None
    retransmits: int | None
    seconds: float | None


@dataclass(frozen=True)
class UdpSummary(_Flow):
    """A UDP flow at a rate: goodput (Mbit/s), the sender's rate, loss (%) and jitter (ms) as the
    receiver saw them, how long it ran (s)."""

    kind: ClassVar[str] = "udp"
    goodput_mbps: float | None
    src: str | None
    dst: str | None
    dscp: str | None
    sender_mbps: float | None
    lost_percent: float | None
    jitter_ms: float | None
    seconds: float | None


@dataclass(frozen=True)
class IrttSummary(_Flow):
    """irtt's probes: requests sent, replies received, the loss each way (%), the mean
    round-trip IPDV (ms)."""

    kind: ClassVar[str] = "irtt"
    src: str | None
    dst: str | None
    dscp: str | None
    sent: int | None
    received: int | None
    loss_up_percent: float | None
    loss_down_percent: float | None
    jitter_ms: float | None


FlowSummary = BulkSummary | UdpSummary | IrttSummary
FLOW_KINDS: dict[str, type[FlowSummary]] = {"bulk": BulkSummary, "udp": UdpSummary, "irtt": IrttSummary}


def flow_from_json(doc: dict[str, Any]) -> FlowSummary:
    """A flow by its kind (a flow without one, of an early version, is a bulk flow)."""
    return FLOW_KINDS.get(doc.get("kind"), BulkSummary).from_json(doc)


@dataclass(frozen=True)
class QueueSummary(Plain):
    """A probed queue over the run (summary.json "queue"): time-weighted mean and the maximum
    backlog, in packets and bytes, and the queue's own drops; with the datapath's log, its drops
    and CE marks by reason; on a userspace link, its departures by ECN codepoint (CE marks
    included) over the datapath's life, the mix the next hop saw. Null where nothing was
    recorded."""

    mean_pkts: float | None
    max_pkts: int | None
    mean_bytes: float | None
    max_bytes: int | None
    drops: int | None
    drops_by_reason: dict[str, int] | None = None  # only the datapath's log says why
    marks: dict[str, int] | None = None
    departures_by_ecn: dict[str, int] | None = None  # not_ect, ect1, ect0, ce: the datapath's stats

    def to_dict(self) -> dict[str, Any]:
        numbers = super().to_dict()
        verdicts = {name: numbers.pop(name) for name in ("drops_by_reason", "marks", "departures_by_ecn")}
        return {**{name: v for name, v in verdicts.items() if v is not None}, **numbers}


@dataclass(frozen=True)
class ResponsivenessResult:
    """The responsiveness test's result (summary.json "responsiveness", docs/experiments.md):
    the figures bloatlab reads, typed, and the whole document as the test's client wrote it
    (its parameters, trimmed means, probes and intervals counted), which to_dict gives back
    key for key."""

    method: str | None
    direction: str | None
    cc: str | None
    rpm: float | None
    foreign_rpm: float | None
    loaded_rpm: float | None
    confidence: str | None  # high, medium, low
    band: str | None  # the draft's: poor, fair, good, excellent
    idle_latency_ms: float | None
    goodput_mbps: dict[str, float] | None  # by direction
    document: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ResponsivenessResult:
        hints = field_types(cls)  # a figure not of its type is read as None, as in Plain

        def get(name: str) -> Any:
            value = doc.get(name)
            return (dict(value) if isinstance(value, dict) else value) if fits(value, hints[name]) else None
        return cls(*(get(f.name) for f in fields(cls) if f.name != "document"), copy.deepcopy(doc))

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.document)


@dataclass
class Collected:
    """What the workloads measured (one workload's, or all of them merged)."""

    flows: dict[str, FlowSummary] = field(default_factory=dict)  # summary.json "flows"
    throughput: list[tuple[float, str, float]] = field(default_factory=list)  # t_s, flow, mbps
    ping: list[tuple[float, str, float]] = field(default_factory=list)  # t_s, probe, rtt_ms: every latency probe's
    ping_lost: int = 0
    per_ping: dict[str, tuple[list[float], int]] = field(default_factory=dict)  # probe: rtts, lost
    responsiveness: ResponsivenessResult | None = None  # the responsiveness test's result (one per run)
    fetch: list[tuple[float, float, str, int]] = field(default_factory=list)  # t_s, s, workload, ok
    errors: list[str] = field(default_factory=list)  # the workload failed: the run is incomplete
    warnings: list[str] = field(default_factory=list)  # worth saying, but measurements (a failed fetch)

    def merge(self, other: Collected) -> None:
        self.flows.update(other.flows)
        self.throughput += other.throughput
        self.ping += other.ping
        self.ping_lost += other.ping_lost
        self.per_ping.update(other.per_ping)
        self.responsiveness = other.responsiveness if other.responsiveness is not None else self.responsiveness
        self.fetch += other.fetch
        self.errors += other.errors
        self.warnings += other.warnings


@dataclass
class QueueMeasure:
    """One probed link direction's queue over the run: series rows and its summary numbers."""

    source: str  # "datapath" (bloatlab-link's queue log) or "tc" (a kernel qdisc's counters)
    rows: list[tuple[float, str, int, int, int]] = field(default_factory=list)  # t_s, link, pkts, bytes, drops
    summary: QueueSummary = field(default_factory=QueueSummary.unmeasured)


@dataclass(frozen=True)
class SimulatedDirection:
    """A link direction's counters in a simulated run, as ns-3's driver wrote them
    (directions.csv): what run.json's datapath_stats holds there. A dualpi2 queue's figures
    (dualpi2.csv) go into summary.json's dualpi2, as the datapath's do."""

    departures: int
    bytes_out: int
    queue_drops: int
    dualpi2: DualPi2Stats | None = None  # a dualpi2 queue's own figures only

    def to_dict(self) -> dict[str, int]:
        return {"departures": self.departures, "bytes_out": self.bytes_out, "queue_drops": self.queue_drops}


@dataclass
class RunRecord:
    """A run, whole or cut short, ready to be written."""

    experiment: Experiment
    started_at: str | None = None  # ISO 8601, wall clock
    ended_at: str | None = None
    t0_real: float | None = None  # t0 on the wall clock; None when the schedule never started
    t0_mono: float | None = None  # and on CLOCK_MONOTONIC, which the tools' stamps and the queue logs use
    owner: dict[str, int | None] | None = None  # the process running it: {"pid", "starttime"}
    duration_s: float = 0.0  # what ran of the schedule
    incomplete_reason: str | None = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    network: str | None = None
    backends: list[str] = field(default_factory=list)  # per link, as built
    host_cc: dict[str, str] = field(default_factory=dict)  # each host's default congestion control, as built
    ports: dict[str, int] = field(default_factory=dict)  # per workload: its server's port
    collected: Collected = field(default_factory=Collected)
    cwnd: list[tuple] = field(default_factory=list)  # t_s, flow, cwnd_pkts, ssthresh_pkts, srtt_ms
    queues: dict[str, QueueMeasure] = field(default_factory=dict)  # per probed direction ("s0->h2")
    tcp_probe: str = "none"  # tracepoint, ss or none
    tcp_lost_events: int | None = None
    datapath_stats: dict[str, DirectionStats] = field(default_factory=dict)  # per userspace direction
    simulated_stats: dict[str, SimulatedDirection] = field(default_factory=dict)  # per direction, simulated
    # The datapath's own figures at the end: its workers, its sentinel, its switches (None: no datapath).
    datapath: DatapathFigures | None = None
    # The machine's timer as the datapath met it at the start (testbed.diagnostics.timer_overshoot).
    timer: TimerOvershoot | None = None
    # The share of the played schedule in which some task waited for a CPU (the kernel's PSI),
    # and the share of the datapath's report periods its links batched in (None: no such figure).
    cpu_pressure: float | None = None
    links_batching: float | None = None
    snapshots: dict[str, Any] = field(default_factory=dict)  # per node: qdiscs and sysctls at the start
    machine: dict[str, Any] = field(default_factory=dict)
    tools: dict[str, str | None] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.incomplete_reason is None
