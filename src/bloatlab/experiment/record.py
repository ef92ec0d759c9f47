"""What a run measured and knows about itself, as the experiment layer hands it on: the rows of
its series, the numbers its summary is made of, and the facts run.json records. bloatlab's
results layer writes it (results/writer.py); nothing here touches a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bloatlab.specs.model import Experiment
from bloatlab.testbed.datapath_stats import DatapathFigures, DirectionStats, TimerOvershoot


@dataclass
class Collected:
    """What the workloads measured (one workload's, or all of them merged)."""

    flows: dict[str, dict[str, Any]] = field(default_factory=dict)  # summary.json "flows"
    throughput: list[tuple[float, str, float]] = field(default_factory=list)  # t_s, flow, mbps
    ping: list[tuple[float, str, float]] = field(default_factory=list)  # t_s, probe, rtt_ms: every latency probe's
    ping_lost: int = 0
    per_ping: dict[str, tuple[list[float], int]] = field(default_factory=dict)  # probe: rtts, lost
    responsiveness: dict[str, Any] | None = None  # the responsiveness test's result (one per run)
    fetch: list[tuple[float, float, str, int]] = field(default_factory=list)  # t_s, s, workload, ok
    errors: list[str] = field(default_factory=list)  # the workload failed: the run is incomplete
    warnings: list[str] = field(default_factory=list)  # worth saying, but measurements (a failed fetch)

    def merge(self, other: Collected) -> None:
        self.flows.update(other.flows)
        self.throughput += other.throughput
        self.ping += other.ping
        self.ping_lost += other.ping_lost
        self.per_ping.update(other.per_ping)
        self.responsiveness = other.responsiveness or self.responsiveness
        self.fetch += other.fetch
        self.errors += other.errors
        self.warnings += other.warnings


# A probed queue's numbers in summary.json (null where nothing was recorded).
QUEUE_NUMBERS = ("mean_pkts", "max_pkts", "mean_bytes", "max_bytes", "drops")


@dataclass
class QueueMeasure:
    """One probed link direction's queue over the run: series rows and its summary numbers."""

    source: str  # "datapath" (bloatlab-link's queue log) or "tc" (a kernel qdisc's counters)
    rows: list[tuple[float, str, int, int, int]] = field(default_factory=list)  # t_s, link, pkts, bytes, drops
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SimulatedDirection:
    """A link direction's counters in a simulated run, as ns-3's driver wrote them
    (directions.csv): what run.json's datapath_stats holds there."""

    departures: int
    bytes_out: int
    queue_drops: int

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
