"""The datapath's stats file (docs/datapath.md, "Stats file") and `bloatlab-link --timer`'s
report, as the typed records that cross into the rest of bloatlab, and their one reader.

Each record is read from its JSON by from_json, and to_dict gives back exactly what was read,
keys in the order serde_json writes them (sorted), so that run.json holds the file's own
figures; tests/integration/test_datapath_process.py holds the two equal, so a key the binary
adds that these records drop fails a test. Absent or null in the file is None here.
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Self

from bloatlab.errors import MachineError


def _in_key_order(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(sorted(doc.items()))


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """A record's fields' declared types (its annotations, evaluated)."""
    return typing.get_type_hints(cls)


def fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of the type a record's field declares: an int is one a 64-bit
    counter holds (numpy takes no other), a float takes such an int too, a bool is no number, a
    dict's values fit its value type; None fits an optional."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        kind = typing.get_origin(option) or option
        if option is type(None) and value is None:
            return True
        if isinstance(value, bool):
            if kind is bool:
                return True
        elif kind in (int, float) and isinstance(value, int):
            if -2**63 <= value < 2**64:
                return True
        elif kind is float and isinstance(value, float):
            return True
        elif kind is dict and isinstance(value, dict):
            args = typing.get_args(option)
            if not args or all(fits(v, args[1]) for v in value.values()):
                return True
        elif kind in (str, list, tuple) and isinstance(value, kind):
            return True
    return False


def finite_number(value: Any) -> float | None:
    """A JSON number as a finite float; None for anything else (NaN, an infinity, 10**400, true)."""
    return float(value) if fits(value, float) and math.isfinite(value) else None


class _Plain:
    """A record of plain values (numbers, flags, names), read and written key for key; a value
    not of its field's type is refused (TypeError), as a missing one is (KeyError)."""

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Self:
        hints = field_types(cls)
        values = {f.name: doc[f.name] for f in fields(cls)}
        for name, value in values.items():
            if not fits(value, hints[name]):
                raise TypeError(f"{cls.__name__}.{name} is {value!r}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return _in_key_order({f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Lateness(_Plain):
    """How late things came, in ns (the unit is in the name it goes by: `depart_error_ns`,
    `wakeups_late_ns`, `late_ns`): how many, and the quantiles of a histogram of 1 us buckets."""

    count: int
    p50: int
    p99: int
    max: int


@dataclass(frozen=True)
class LatenessAtRandom(_Plain):
    """How late something due at a moment taken at random would have been, in ns."""

    p50: int
    p99: int


@dataclass(frozen=True)
class LateArrivals(_Plain):
    """Frames a switch handed on after the direction's clock had passed their due time."""

    count: int
    max_ns: int


@dataclass(frozen=True)
class CaptureFile(_Plain):
    """One capture file: packets written, cut by its size limit, lost to a writer behind; its size."""

    written: int
    cut: int
    lost: int
    bytes: int


@dataclass(frozen=True)
class CaptureStats:
    """A captured direction's two files, and the writer's error if it met one."""

    departures: CaptureFile
    drops: CaptureFile
    error: str | None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CaptureStats:
        return cls(CaptureFile.from_json(doc["departures"]), CaptureFile.from_json(doc["drops"]), doc["error"])

    def to_dict(self) -> dict[str, Any]:
        return _in_key_order({"departures": self.departures.to_dict(), "drops": self.drops.to_dict(),
                              "error": self.error})


@dataclass(frozen=True)
class TinStats(_Plain):
    """One of CAKE's tins, as `tc -s qdisc` shows it: its parameters, counters, delays and flows."""

    name: str
    threshold_bps: int
    target_us: int
    interval_us: int
    flow_quantum: int
    packets: int  # arrived (counted at enqueue, as Linux does)
    bytes: int
    backlog_bytes: int
    drops: int  # by COBALT or to make room
    ack_drops: int  # by the ACK filter (not among drops)
    marks: int
    way_indirect_hits: int
    way_misses: int
    way_collisions: int
    peak_delay_us: int
    avg_delay_us: int
    base_delay_us: int
    sparse_flows: int
    bulk_flows: int
    unresponsive_flows: int
    max_len: int


@dataclass(frozen=True)
class DualPi2Stats(_Plain):
    """A dualpi2 queue as `tc -s qdisc` shows it: p' (the C queue's probability is its square,
    the L queue's coupling_factor times it), each queue's head delay when the stats were
    written, packets let into each queue, the most an arrival found queued (maxq), CE marks
    (ecn_mark: all of them, step_mark: the L queue's own), the scheduler's credit in bytes (at
    or below 0 the L queue goes next), and memory."""

    prob: float
    delay_c_us: int
    delay_l_us: int
    pkts_in_c: int
    pkts_in_l: int
    maxq: int
    ecn_mark: int
    step_mark: int
    credit: int
    memory_used_bytes: int
    max_memory_used_bytes: int
    memory_limit_bytes: int


@dataclass(frozen=True)
class EcnCounts(_Plain):
    """Departures per ECN codepoint (IP frames only), by the names the stats file writes."""

    not_ect: int
    ect1: int  # the L4S identifier (RFC 9331)
    ect0: int
    ce: int  # Congestion Experienced: marked here or upstream

    @property
    def total(self) -> int:
        return self.not_ect + self.ect1 + self.ect0 + self.ce

    def by_codepoint(self) -> dict[str, int]:
        """Each codepoint's count by name, in the order of their bits (00, 01, 10, 11)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class DirectionStats:
    """One link direction's counters since the datapath started."""

    arrivals: int
    departures: int
    bytes_in: int
    bytes_out: int
    enqueued: int
    dequeued: int
    backlog_pkts: int
    backlog_bytes: int
    max_backlog_pkts: int
    max_backlog_bytes: int
    drops: dict[str, int]  # by reason (DROP_REASONS' names, and rx_overrun, tx_error)
    marks: dict[str, int]  # CE marks by reason (MARK_REASONS' names)
    departures_by_dscp: dict[str, int]  # the codepoints seen, by number ("46")
    departures_by_ecn: EcnCounts  # every ECN codepoint
    ect1_rewritten: int  # arrivals turned from ECT(0) into ECT(1) here (the direction's ect1_rewrite)
    depart_error_ns: Lateness
    late_arrivals: LateArrivals
    worker: int  # its worker's index in the stats' workers
    capture: CaptureStats | None = None  # captured directions only
    tins: tuple[TinStats, ...] | None = None  # a discipline's classes (CAKE's tins) only
    dualpi2: DualPi2Stats | None = None  # a dualpi2 queue's own figures only

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DirectionStats:
        counters = {name: doc[name] for name in ("arrivals", "departures", "bytes_in", "bytes_out", "enqueued",
                                                 "dequeued", "backlog_pkts", "backlog_bytes", "max_backlog_pkts",
                                                 "max_backlog_bytes")}
        return cls(**counters, drops=dict(doc["drops"]), marks=dict(doc["marks"]),
                   departures_by_dscp=dict(doc["departures_by_dscp"]),
                   departures_by_ecn=EcnCounts.from_json(doc["departures_by_ecn"]),
                   ect1_rewritten=doc["ect1_rewritten"],
                   depart_error_ns=Lateness.from_json(doc["depart_error_ns"]),
                   late_arrivals=LateArrivals.from_json(doc["late_arrivals"]), worker=doc["worker"],
                   capture=CaptureStats.from_json(doc["capture"]) if "capture" in doc else None,
                   tins=tuple(TinStats.from_json(t) for t in doc["tins"]) if "tins" in doc else None,
                   dualpi2=DualPi2Stats.from_json(doc["dualpi2"]) if "dualpi2" in doc else None)

    def to_dict(self) -> dict[str, Any]:
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("capture", "tins", "dualpi2")}
        doc.update(drops=dict(self.drops), marks=dict(self.marks), departures_by_dscp=dict(self.departures_by_dscp),
                   departures_by_ecn=self.departures_by_ecn.to_dict(), depart_error_ns=self.depart_error_ns.to_dict(),
                   late_arrivals=self.late_arrivals.to_dict())
        if self.capture is not None:  # else absent, as in the file
            doc["capture"] = self.capture.to_dict()
        if self.tins is not None:
            doc["tins"] = [t.to_dict() for t in self.tins]
        if self.dualpi2 is not None:
            doc["dualpi2"] = self.dualpi2.to_dict()
        return _in_key_order(doc)


@dataclass(frozen=True)
class LinkStats:
    """A link's two directions."""

    forward: DirectionStats
    reverse: DirectionStats

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LinkStats:
        return cls(DirectionStats.from_json(doc["forward"]), DirectionStats.from_json(doc["reverse"]))

    def to_dict(self) -> dict[str, Any]:
        return {"forward": self.forward.to_dict(), "reverse": self.reverse.to_dict()}


@dataclass(frozen=True)
class CpuTimes(_Plain):
    """A thread's CPU since it started, in its own code and in the kernel (split by the kernel's
    ticks), and its life so far."""

    user_ns: int
    kernel_ns: int
    wall_ns: int


@dataclass(frozen=True)
class WorkerStats:
    """A worker thread: the directions it serves, its CPU, how late its timed sleeps ended."""

    name: str
    tid: int
    directions: tuple[str, ...]  # "h1-s0.reverse"
    cpu: CpuTimes
    wakeups_late_ns: Lateness
    batch_sleeps: int  # sleeps past the spin share while batching
    handed_on: int  # frames for another worker's directions
    handoffs_lost: int  # and those lost to its full queue (also in tx_error)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> WorkerStats:
        return cls(doc["name"], doc["tid"], tuple(doc["directions"]), CpuTimes.from_json(doc["cpu"]),
                   Lateness.from_json(doc["wakeups_late_ns"]), doc["batch_sleeps"], doc["handed_on"],
                   doc["handoffs_lost"])

    def to_dict(self) -> dict[str, Any]:
        return _in_key_order({"name": self.name, "tid": self.tid, "directions": list(self.directions),
                              "cpu": self.cpu.to_dict(), "wakeups_late_ns": self.wakeups_late_ns.to_dict(),
                              "batch_sleeps": self.batch_sleeps, "handed_on": self.handed_on,
                              "handoffs_lost": self.handoffs_lost})


@dataclass(frozen=True)
class SentinelStats:
    """The sentinels' wake-ups under the run's load (a CPU each): per sleep and at a moment taken
    at random over the time their sleeps took; their sleeps, CPU and real-time priority."""

    late_ns: Lateness
    late_at_random_ns: LatenessAtRandom
    span_ns: int
    sleep_p50_ns: int
    cpu_ns: int
    rt_priority: int | None  # None: refused, they slept as normal threads
    sentinels: int

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SentinelStats:
        return cls(Lateness.from_json(doc["late_ns"]), LatenessAtRandom.from_json(doc["late_at_random_ns"]),
                   doc["span_ns"], doc["sleep_p50_ns"], doc["cpu_ns"], doc["rt_priority"], doc["sentinels"])

    def to_dict(self) -> dict[str, Any]:
        return _in_key_order({"late_ns": self.late_ns.to_dict(), "late_at_random_ns": self.late_at_random_ns.to_dict(),
                              "span_ns": self.span_ns, "sleep_p50_ns": self.sleep_p50_ns, "cpu_ns": self.cpu_ns,
                              "rt_priority": self.rt_priority, "sentinels": self.sentinels})


@dataclass(frozen=True)
class SwitchStats(_Plain):
    """A switch inside the datapath: frames forwarded, flooded, filtered, blocked."""

    forwarded: int
    flooded: int
    filtered: int
    blocked: int


@dataclass(frozen=True)
class CpuLatency(_Plain):
    """The PM QoS request: the wake-up bound asked for (None: none), and whether it is held now."""

    bound_us: int | None
    held: bool


@dataclass(frozen=True)
class Batching(_Plain):
    """The last period's CPU pressure (PSI "some"; None before the first review or where it
    cannot be read), whether the threads batch, and the 200 ms periods so far, all and batching."""

    pressure: float | None
    active: bool
    periods: int
    periods_batching: int


def _switches(doc: dict[str, Any]) -> dict[str, SwitchStats]:
    return {name: SwitchStats.from_json(s) for name, s in doc.items()}


@dataclass(frozen=True)
class DatapathFigures:
    """The datapath's own figures, beside its links': its workers, its sentinel (None: none),
    its switches. What a run keeps of them (run.json's `datapath`)."""

    workers: tuple[WorkerStats, ...]
    sentinel: SentinelStats | None
    switches: dict[str, SwitchStats]

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DatapathFigures:
        return cls(tuple(WorkerStats.from_json(w) for w in doc["workers"]),
                   SentinelStats.from_json(doc["sentinel"]) if doc["sentinel"] is not None else None,
                   _switches(doc["switches"]))

    def to_dict(self) -> dict[str, Any]:
        return {"workers": [w.to_dict() for w in self.workers],
                "sentinel": self.sentinel.to_dict() if self.sentinel is not None else None,
                "switches": {name: s.to_dict() for name, s in self.switches.items()}}


@dataclass(frozen=True)
class DatapathStats:
    """The whole stats file: the process, its scheduling, its workers, sentinel and switches,
    and its links' directions by link name."""

    pid: int
    running: bool  # False in the final report, written once every worker has stopped
    clock: str  # "monotonic": what its times are read on
    realtime_offset_ns: int  # CLOCK_REALTIME - CLOCK_MONOTONIC at its start
    cpu_latency: CpuLatency
    batching: Batching | None  # None: batching off, or a kernel without PSI
    workers: tuple[WorkerStats, ...]
    sentinel: SentinelStats | None  # None: none
    switches: dict[str, SwitchStats]
    links: dict[str, LinkStats]

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DatapathStats:
        figures = DatapathFigures.from_json(doc)
        return cls(doc["pid"], doc["running"], doc["clock"], doc["realtime_offset_ns"],
                   CpuLatency.from_json(doc["cpu_latency"]),
                   Batching.from_json(doc["batching"]) if doc["batching"] is not None else None,
                   figures.workers, figures.sentinel, figures.switches,
                   {name: LinkStats.from_json(link) for name, link in doc["links"].items()})

    @property
    def figures(self) -> DatapathFigures:
        return DatapathFigures(self.workers, self.sentinel, self.switches)

    def to_dict(self) -> dict[str, Any]:
        return _in_key_order({"pid": self.pid, "running": self.running, "clock": self.clock,
                              "realtime_offset_ns": self.realtime_offset_ns, "cpu_latency": self.cpu_latency.to_dict(),
                              "batching": self.batching.to_dict() if self.batching is not None else None,
                              **self.figures.to_dict(),
                              "links": {name: link.to_dict() for name, link in self.links.items()}})


@dataclass(frozen=True)
class TimerOvershoot(_Plain):
    """How late this machine wakes a sleeping thread, as a worker sleeps (`bloatlab-link --timer`):
    COUNT sleeps of sleep_ns, how late they ended, and the CPU one took."""

    sleep_ns: int
    count: int
    p50_ns: int
    p99_ns: int
    max_ns: int
    cpu_ns: int
    rt_priority: int | None  # the real-time priority it slept at; None: asked for none, or refused


@dataclass(frozen=True)
class LatenessVerdict:
    """What these stats say of a run's punctuality (diagnostics.lateness), as summary.json's
    "lateness" holds it, in us: the userspace direction whose departures were latest at p99 (its
    p99 and max), beside what the machine allows (the sentinel's p99 wake-up lateness
    under the run's load, per sleep and at a random moment, and its sleeps' length; or the idle
    timer's p99 at the start; plus TIMER_ALLOWANCE_US), whether it stayed within, and what it
    added beyond. Null where there was no figure to judge by; a key an older version did not
    write is None."""

    direction: str | None
    p99_us: float | None
    max_us: float | None
    timer_p99_us: float | None
    sentinel_p99_us: float | None
    sentinel_at_random_p99_us: float | None
    sentinel_sleep_us: float | None
    allowed_us: float | None
    within: bool | None
    added_us: float | None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LatenessVerdict:
        hints = field_types(cls)  # a figure not of its type is no figure: None, as one not written
        return cls(**{f.name: v if fits(v := doc.get(f.name), hints[f.name]) else None for f in fields(cls)})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def read_stats(path: str | Path) -> DatapathStats:
    stats = read_stats_if_any(path)
    if stats is None:
        raise MachineError(f"no datapath stats at {path}; is the network up?")
    return stats


def read_stats_if_any(path: str | Path) -> DatapathStats | None:
    doc = read_json_if_any(Path(path))
    if doc is None:
        return None
    try:
        return DatapathStats.from_json(doc)
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # not what this bloatlab's binary writes
        raise MachineError(f"{path} is not a stats file of this bloatlab's datapath (at {e!r})") from None


def read_json_if_any(path: Path) -> dict[str, Any] | None:
    """A JSON file the datapath replaces atomically, or None while it is not there yet."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError, RecursionError):  # ValueError: not JSON (not UTF-8, a 4300-digit number)
        return None  # not there yet; the datapath replaces it atomically, so no torn reads
