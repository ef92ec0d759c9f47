"""Following a run while it runs: what its tools have written so far, read from its directory.

A run writes run.json as it starts and again at t0 (the resolved spec, the ports, where each
queue is read, t0 on both clocks), and its tools append to raw/ as they go (experiment/raw.py
names the files; docs/live.md says when each line reaches its file):

    NAME.ping.txt       ping -D: a line per reply, wall-clock stamped
    NAME.client.txt     irtt: a line per reply ("seq=3 rtt=21.4ms ..."), sent every interval
    NAME.server.txt     iperf3's server: a line per 0.1 s report, stamped on CLOCK_MONOTONIC
    NAME.fetches.txt    a line per web fetch: its start (s since t0), its seconds, ok
    tcp_probe.txt       tcp:tcp_probe events (CLOCK_MONOTONIC): each sender's cwnd
    qlog/L.DIR.qlog     the datapath's queue log: every enqueue, dequeue, drop and mark
    qdisc.L.DIR.csv     a kernel qdisc's samples

and the datapath rewrites its stats file (lateness, CPU) every 200 ms under /run/bloatlab. A
`Follower` reads each from where it stopped, keeps whole lines and records only, and turns them
into points (seconds since t0, value), binned where a tool writes more often than a page can
draw. It only reads: the run neither knows nor waits for it. Whatever it finds malformed (a
file half written, another version's) it leaves for the next poll, never raising.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bloatlab import proc
from bloatlab.errors import BloatlabError
from bloatlab.experiment import raw
from bloatlab.experiment.parsers import parse_iperf3_intervals, parse_irtt_replies, parse_ping_replies, parse_tcp_probe
from bloatlab.testbed import state
from bloatlab.testbed.datapath import (DROP_REASONS, KIND_DEQUEUE, KIND_DROP, KIND_MARK, KIND_PROB,
                                       PRE_QUEUE_DROP_REASONS, QLOG_RECORD_BYTES, qlog_records)
from bloatlab.testbed.datapath_stats import (DatapathFigures, DirectionStats, TimerOvershoot, finite_number,
                                            read_stats_if_any)
from bloatlab.testbed.diagnostics import lag_warnings

BIN_S = 0.05  # the queue's and the cwnd's points: one per bin (the tools write far more often)
HOLD_S = 0.3  # the longest a tool holds an event before its file has it (qdisc samples 0.2 s, the queue log 0.1 s)
DATA_EVENTS = 50  # a bulk flow's connection with this many events is its data connection (the control one has ~10)
MAX_READ = 16 << 20  # bytes of one file per poll: a long finished run is caught up over a few polls
UNFINISHED = "unfinished"  # how run.json's incomplete_reason starts while the run goes on


class Tail:
    """A file another process appends to, read from where the last read stopped. A file
    replaced (another inode, or shorter) is read again from its start."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.rest = b""
        self.inode: tuple[int, int] | None = None
        self.head = b""  # its first bytes: a file made anew under a reused inode begins otherwise

    def read(self) -> bytes:
        """Up to MAX_READ bytes appended since the last read; none from a file not (yet) there."""
        try:
            with self.path.open("rb") as f:
                st = os.fstat(f.fileno())
                if ((st.st_dev, st.st_ino) != self.inode or st.st_size < self.offset
                        or (self.head and f.read(len(self.head)) != self.head)):
                    self.inode, self.offset, self.rest, self.head = (st.st_dev, st.st_ino), 0, b"", b""
                f.seek(self.offset)
                data = f.read(min(MAX_READ, st.st_size - self.offset))
        except OSError:
            return b""
        if self.offset == 0:
            self.head = data[:64]
        self.offset += len(data)
        return data

    def lines(self) -> list[str]:
        """The whole lines appended since the last call; a line still being written waits."""
        new = self.read()  # first: a replaced file drops what was left of the old one
        whole, _, self.rest = (self.rest + new).rpartition(b"\n")
        return whole.decode(errors="replace").splitlines() if whole else []

    def records(self, size: int) -> bytes:
        """The whole records of `size` bytes appended since the last call."""
        new = self.read()
        data = self.rest + new
        cut = len(data) - len(data) % size
        self.rest = data[cut:]
        return data[:cut]


@dataclass
class Series:
    """Points of one line on one chart, and how many of them a client has already been sent."""

    points: list[tuple[float, float]] = field(default_factory=list)
    sent: int = 0

    def add(self, t: float, value: float) -> None:
        self.points.append((round(t, 4), round(value, 4)))

    def new(self) -> list[tuple[float, float]]:
        out, self.sent = self.points[self.sent:], len(self.points)
        return out


class Binned:
    """Points one per BIN_S, each at its bin's end: the last value in the bin (a window), its
    largest (a backlog) or its sum (a count)."""

    def __init__(self, how: str = "last"):
        self.how = how
        self.bins: dict[int, float] = {}
        self.done: Series = Series()
        self.open_from = 0  # bins before it are closed: their points are in `done`

    def add(self, t: float, value: float) -> None:
        if math.isfinite(k := t / BIN_S):  # a sample whose time is none ("nan"), or past 1e307 s, has no bin
            self.add_to(math.floor(k), value)

    def add_to(self, k: int, value: float) -> None:
        """Into bin k; a bin already closed (an event that came late) adds to the first open one."""
        k = max(k, self.open_from)
        if self.how == "max":
            self.bins[k] = max(self.bins.get(k, value), value)
        elif self.how == "sum":
            self.bins[k] = self.bins.get(k, 0.0) + value
        else:
            self.bins[k] = value

    def close_before(self, t: float) -> None:
        """Bins that end before t take no more points (every bin, t infinite: the run ended)."""
        upto = math.floor(t / BIN_S) if math.isfinite(t) else max(self.bins, default=-1) + 1
        for k in sorted(b for b in self.bins if b < upto):
            self.done.add((k + 1) * BIN_S, self.bins.pop(k))
        self.open_from = max(self.open_from, upto)

    def new(self) -> list[tuple[float, float]]:
        return self.done.new()


class _Window:
    """One connection's congestion window, per bin, and how far it grew."""

    def __init__(self) -> None:
        self.binned = Binned("last")
        self.largest = 0
        self.events = 0

    def add(self, t: float, cwnd: int) -> None:
        self.events += 1
        self.largest = max(self.largest, cwnd)
        self.binned.add(t, cwnd)


class _Queue:
    """A probed queue direction: its backlog, its packets' sojourn, its drops and marks per bin."""

    def __init__(self, discipline: str, tail: Tail, kernel: bool):
        self.discipline, self.tail, self.kernel = discipline, tail, kernel
        self.backlog, self.sojourn, self.drops, self.marks = Binned("max"), Binned("max"), Binned("sum"), Binned("sum")
        self.last_drops: float | None = None  # a qdisc's counter, cumulative
        self.last_backlog: int | None = None
        self.drops_total = self.marks_total = 0
        self.drops_by_reason: dict[str, int] = {}

    def charts(self) -> tuple[tuple[str, Binned], ...]:
        return (("backlog", self.backlog), ("sojourn", self.sojourn), ("drops", self.drops), ("marks", self.marks))


def _number(value: Any) -> float | None:
    return finite_number(value)  # 10**400 too is no number: math.isfinite() raised on it


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long, say, from a hand-edited sweep.json
        return False


def _meta(doc: Any) -> dict[str, Any] | None:
    """run.json as the follower reads it, or None for what is not one (another file, another
    version): a dict whose t0, when set, is a number on both clocks."""
    if not isinstance(doc, dict) or not isinstance(doc.get("spec"), dict):
        return None
    if doc.get("t0_realtime_s") is not None and (_number(doc["t0_realtime_s"]) is None
                                                 or _number(doc.get("t0_monotonic_s")) is None):
        return None
    return doc


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


class Follower:
    """What one run has measured so far, as charts' points since t0."""

    def __init__(self, run_dir: Path, clock: Callable[[], float] = time.time):
        self.dir = Path(run_dir)
        self.clock = clock  # the wall clock (a replay's own, in tests)
        self._reset()

    def _reset(self) -> None:
        self.meta: dict[str, Any] | None = None
        self._meta_stamp: tuple[int, int, int] | None = None
        self.started: Any = None  # run.json's started_at: another one is another run in this directory
        self.t0_real: float | None = None
        self.t0_mono: float | None = None
        self.workloads: dict[str, dict[str, Any]] = {}
        self.charts: dict[str, dict[str, Series]] = {"rtt": {}, "goodput": {}, "fetch": {}}
        self.queues: dict[str, _Queue] = {}
        self.tails: dict[str, Tail] = {}
        self.ports: dict[int, str] = {}  # a bulk flow's server port -> its name
        self.windows: dict[str, dict[int, _Window]] = {}  # a bulk flow -> its sender's connections by port
        self.datapath: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.last_sample_real: float | None = None  # the wall-clock time of the latest probe sample read

    # run.json --------------------------------------------------------------------------------

    def _read_meta(self) -> bool:
        """run.json anew if it changed (the run rewrites it whole: at its start, at t0, at its
        end). True when it did; a run started anew in the directory starts the follower anew."""
        path = self.dir / "run.json"
        try:
            st = path.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp == self._meta_stamp:
                return False
            meta = _meta(json.loads(path.read_text()))
        except (OSError, ValueError, RecursionError):
            return False  # not there yet, or replaced under us: the next poll reads it
        if meta is None:
            return False
        if self.meta is not None and meta.get("started_at") != self.started:
            self._reset()  # --resume ran it again
        self.meta, self._meta_stamp, self.started = meta, stamp, meta.get("started_at")
        if self.t0_real is None and meta.get("t0_realtime_s") is not None:
            self.t0_real, self.t0_mono = float(meta["t0_realtime_s"]), float(meta["t0_monotonic_s"])
            self._start_following(meta)
        return True

    def _start_following(self, meta: dict[str, Any]) -> None:
        raw_dir = self.dir / "raw"
        flows = meta.get("flows") if isinstance(meta.get("flows"), dict) else {}
        for w in _dicts(meta["spec"].get("workloads")):
            name, kind = str(w.get("name")), w.get("kind")
            self.workloads[name] = w
            if kind in ("ping", "irtt"):
                self.charts["rtt"][name] = Series()
                self.tails[f"{kind}:{name}"] = Tail(raw.ping(raw_dir, name) if kind == "ping"
                                                    else raw.irtt_client(raw_dir, name))
            elif kind in ("bulk", "udp"):
                self.charts["goodput"][name] = Series()
                self.tails[f"iperf:{name}"] = Tail(raw.server(raw_dir, name))
                port = (flows.get(name) or {}).get("port") if isinstance(flows.get(name), dict) else None
                if kind == "bulk" and isinstance(port, int):
                    self.ports[port] = name
                    self.windows[name] = {}
            elif kind == "web":
                self.charts["fetch"][name] = Series()
                self.tails[f"fetch:{name}"] = Tail(raw.fetches(raw_dir, name))
        probes = meta.get("probes") if isinstance(meta.get("probes"), dict) else {}
        if self.ports and probes.get("tcp") == "tracepoint":
            self.tails["tcp_probe:"] = Tail(raw.tcp_probe(raw_dir, "tracepoint"))  # type: ignore[arg-type]
        directions = {}
        for link in _dicts(meta.get("links")):
            for which in ("forward", "reverse"):
                d = link.get(which) if isinstance(link.get(which), dict) else {}
                queue = d.get("queue") if isinstance(d.get("queue"), dict) else {}
                if isinstance(d.get("direction"), str):
                    directions[d["direction"]] = (str(link.get("name")), which, queue.get("discipline"))
        sources = probes.get("queue") if isinstance(probes.get("queue"), dict) else {}
        for direction, source in sources.items():
            if direction in directions:
                link, which, discipline = directions[direction]
                kernel = source != "datapath"
                self.queues[direction] = _Queue(str(discipline or "?"), Tail(raw.queue(raw_dir, link, which, kernel)),
                                                kernel)

    # the tools' files ------------------------------------------------------------------------

    def _read_tools(self) -> None:
        assert self.t0_real is not None and self.t0_mono is not None
        for key, tail in self.tails.items():
            kind, _, name = key.partition(":")
            lines = tail.lines()
            if not lines:
                continue
            text = "\n".join(lines)
            if kind == "ping":
                for reply in parse_ping_replies(text):
                    if reply.t_s is not None:
                        self._rtt(name, reply.t_s - self.t0_real, reply.rtt_ms, reply.t_s)
            elif kind == "irtt":
                # irtt sends on its schedule: reply N was sent at the workload's start + N intervals.
                w = self.workloads.get(name) or {}
                start, interval = _number(w.get("start_ns")), _number(w.get("interval_ns"))
                if start is not None and interval is not None:
                    for seq, rtt_ms in parse_irtt_replies(text):
                        self._rtt(name, (start + seq * interval) / 1e9, rtt_ms, None)
            elif kind == "iperf":
                for t, mbps in parse_iperf3_intervals(lines):
                    self.charts["goodput"][name].add(t - self.t0_mono, mbps)
            elif kind == "fetch":
                for line in lines:
                    parts = line.split()
                    try:
                        start, seconds, ok = float(parts[0]), float(parts[1]), parts[2] == "1"
                    except (IndexError, ValueError):
                        continue
                    if ok:
                        self.charts["fetch"][name].add(start + seconds, seconds)
            elif kind == "tcp_probe":
                for e in parse_tcp_probe(text):  # each bulk flow's sender: its events toward the server's port
                    if (flow := self.ports.get(e.dport)) is not None:
                        self.windows[flow].setdefault(e.sport, _Window()).add(e.t_s - self.t0_mono, e.snd_cwnd_pkts)

    def _rtt(self, name: str, t: float, rtt_ms: float, stamp_real: float | None) -> None:
        self.charts["rtt"][name].add(t, rtt_ms)
        if stamp_real is not None:
            self.last_sample_real = max(self.last_sample_real or 0.0, stamp_real)

    def _data_connection(self, flow: str, ended: bool) -> _Window | None:
        """The flow's data connection, chosen as the run's series choose it (the one whose
        window grew most: experiment/probes' cwnd_rows; iperf3's control connection carries a
        few segments): shown once it is clear, after DATA_EVENTS events, or the run ended."""
        conns = self.windows.get(flow) or {}
        if not conns:
            return None
        best = max(conns.values(), key=lambda w: (w.largest, w.events))
        return best if ended or best.events >= DATA_EVENTS else None

    def _read_queues(self) -> None:
        assert self.t0_mono is not None
        for q in self.queues.values():
            if q.kernel:  # a kernel qdisc's samples: t_s (mono), iface, kind, qlen_pkts, backlog_bytes, drops
                for line in q.tail.lines():
                    parts = line.split(",")
                    try:
                        t, pkts, drops = float(parts[0]) - self.t0_mono, int(parts[3]), int(parts[5])
                    except (IndexError, ValueError):
                        continue  # the header, or a line cut short
                    q.backlog.add(t, pkts)
                    q.last_backlog = pkts
                    if q.last_drops is not None and drops > q.last_drops and t > 0:
                        q.drops.add(t, drops - q.last_drops)
                        q.drops_total += int(drops - q.last_drops)
                    q.last_drops = drops
                continue
            records = qlog_records(q.tail.records(QLOG_RECORD_BYTES))
            if len(records):
                self._queue_bins(q, records["t_ns"] / 1e9 - self.t0_mono, records)

    @staticmethod
    def _queue_bins(q: _Queue, t: np.ndarray, records: np.ndarray) -> None:
        """A batch of queue-log records into the queue's bins: the backlog's largest (from the
        queue's changes: a probability record is none), the longest sojourn of a packet dequeued,
        the queue's own drops and its marks from t0 on (as the run's summary counts them)."""
        kind, reason = records["kind"], records["reason"]
        keys, inverse = np.unique(np.floor(t / BIN_S).astype(np.int64), return_inverse=True)

        def largest(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
            out = np.full(len(keys), -1.0)
            np.maximum.at(out, inverse[mask], values[mask].astype(float))
            return out

        changes = kind != KIND_PROB
        backlog = largest(changes, records["backlog_pkts"])
        sojourn = largest(kind == KIND_DEQUEUE, records["value"] / 1e6)
        dropped = (kind == KIND_DROP) & ~np.isin(reason, PRE_QUEUE_DROP_REASONS) & (t > 0)
        marked = (kind == KIND_MARK) & (t > 0)
        drops = np.bincount(inverse[dropped], minlength=len(keys))
        marks = np.bincount(inverse[marked], minlength=len(keys))
        for i, k in enumerate(keys.tolist()):
            if backlog[i] >= 0:
                q.backlog.add_to(k, backlog[i])
            if sojourn[i] >= 0:
                q.sojourn.add_to(k, sojourn[i])
            if drops[i]:
                q.drops.add_to(k, float(drops[i]))
            if marks[i]:
                q.marks.add_to(k, float(marks[i]))
        if changes.any():
            q.last_backlog = int(records["backlog_pkts"][changes][-1])
        q.drops_total += int(dropped.sum())
        q.marks_total += int(marked.sum())
        for code, n in zip(*np.unique(reason[dropped], return_counts=True)):
            name = DROP_REASONS.get(int(code), str(int(code)))
            q.drops_by_reason[name] = q.drops_by_reason.get(name, 0) + int(n)

    def _read_datapath(self) -> None:
        """Lateness and CPU: from the datapath's stats file while its network is up (on this
        machine), from run.json once the run ended; and the warnings the run would print of them."""
        meta = self.meta or {}
        directions: dict[str, DirectionStats] = {}
        figures: DatapathFigures | None = None
        try:
            stats = read_stats_if_any(state.state_dir(str(meta["network"])) / "datapath-stats.json") \
                if meta.get("network") and not meta.get("ended_at") else None
            if stats is not None:
                for link in _dicts(meta.get("links")):
                    if (s := stats.links.get(link.get("name"))) is not None:
                        directions[str((link.get("forward") or {}).get("direction"))] = s.forward
                        directions[str((link.get("reverse") or {}).get("direction"))] = s.reverse
                figures = stats.figures
            elif isinstance(meta.get("datapath_stats"), dict) and isinstance(meta.get("datapath"), dict):
                directions = {d: DirectionStats.from_json(s) for d, s in meta["datapath_stats"].items()}
                figures = DatapathFigures.from_json(meta["datapath"])
        except (OSError, BloatlabError, KeyError, TypeError, ValueError):
            return  # not this bloatlab's, or gone meanwhile: the last figures stand
        if figures is None:
            return
        self.datapath = {
            "lateness_us": {name: {"p99": d.depart_error_ns.p99 / 1e3, "max": d.depart_error_ns.max / 1e3}
                            for name, d in directions.items()},
            "workers": [{"name": w.name, "busy_percent": round(100 * (w.cpu.user_ns + w.cpu.kernel_ns) / w.cpu.wall_ns, 1)
                         if w.cpu.wall_ns else None, "woke_late_p99_us": w.wakeups_late_ns.p99 / 1e3}
                        for w in figures.workers],
        }
        timer = meta.get("timer")
        try:
            self.warnings = lag_warnings(directions, TimerOvershoot.from_json(timer) if isinstance(timer, dict) else None,
                                         figures)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            self.warnings = []

    # what a page is sent -----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Where the run is: waiting (no run.json yet), starting (no t0 yet), running, complete,
        incomplete (why) or stopped (its process gone before it ended); elapsed and remaining s."""
        meta = self.meta or {}
        duration = _number((meta.get("spec") or {}).get("duration_s"))
        reason = str(meta.get("incomplete_reason") or "")
        if not meta:
            phase = "waiting"
        elif meta.get("complete") is True:
            phase = "complete"
        elif reason.startswith(UNFINISHED):
            if proc.owner_alive(meta.get("owner")) is False:
                phase = "stopped"
            else:
                phase = "running" if self.t0_real is not None else "starting"
        else:
            phase = "incomplete"
        elapsed = None
        if phase == "running" and self.t0_real is not None:
            elapsed = max(0.0, min(duration or math.inf, self.clock() - self.t0_real))
        elif phase == "complete":
            elapsed = duration
        report = phase not in ("running", "starting") and _exists(self.dir / "report.html")
        warnings = [str(w) for w in meta.get("warnings") or []] if isinstance(meta.get("warnings"), list) else []
        return {"phase": phase, "reason": reason or None if phase in ("incomplete", "stopped") else None,
                "elapsed_s": elapsed, "duration_s": duration,
                "remaining_s": max(0.0, duration - elapsed) if duration and elapsed is not None else None,
                "report": "report.html" if report else None, "warnings": warnings}

    def poll(self) -> dict[str, Any]:
        """Read what is new; the update for a page that has every earlier one (with "fresh":
        true, a page that must start over: the directory holds a run started anew)."""
        started = self.started
        meta_changed = self._read_meta()
        fresh = meta_changed and started is not None and self.started != started
        status = self.status()
        if self.t0_real is not None:
            self._read_tools()
            self._read_queues()
            self._read_datapath()
            horizon = math.inf if status["phase"] not in ("running", "starting") else \
                self.clock() - self.t0_real - HOLD_S
            for q in self.queues.values():
                for _, b in q.charts():
                    b.close_before(horizon)
            for conns in self.windows.values():
                for w in conns.values():
                    w.binned.close_before(horizon)
        update: dict[str, Any] = {"status": status, "series": self._new_points(status), "datapath": self.datapath,
                                  "warnings": self.warnings, "figures": self.figures()}
        if meta_changed:
            update["run"] = self.describe()
        if fresh:
            update["fresh"] = True
        if self.last_sample_real is not None:
            update["last_sample_real_s"] = self.last_sample_real
        return update

    def figures(self) -> dict[str, Any]:
        """The numbers so far, as the run's summary will count them: each probe's round trips
        (count, least: the idle baseline, median, p95), each flow's goodput (its last report and
        the mean of its reports), each queue's backlog now, drops and marks."""
        rtt = {}
        for name, s in self.charts["rtt"].items():
            values = np.array([v for _, v in s.points], dtype=float)
            rtt[name] = {"count": len(values), "least": float(values.min()) if len(values) else None,
                         "median": float(np.median(values)) if len(values) else None,
                         "p95": float(np.percentile(values, 95)) if len(values) else None}
        goodput = {}
        for name, s in self.charts["goodput"].items():
            values = [v for _, v in s.points]
            goodput[name] = {"last": values[-1] if values else None,
                             "mean": sum(values) / len(values) if values else None}
        queues = {d: {"discipline": q.discipline, "backlog": q.last_backlog, "drops": q.drops_total,
                      "marks": q.marks_total, "drops_by_reason": q.drops_by_reason} for d, q in self.queues.items()}
        return {"rtt": rtt, "goodput": goodput, "queue": queues}

    def _charts(self, ended: bool) -> list[tuple[str, str, Series]]:
        """(chart, line, its points) of everything drawn."""
        out = [(chart, name, s) for chart, lines in self.charts.items() for name, s in lines.items()]
        out += [(chart, d, b.done) for d, q in self.queues.items() for chart, b in q.charts()]
        for flow in self.windows:
            if (w := self._data_connection(flow, ended)) is not None:
                out.append(("cwnd", flow, w.binned.done))
        return out

    def _new_points(self, status: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for chart, name, s in self._charts(status["phase"] not in ("running", "starting")):
            if pts := s.new():
                out.setdefault(chart, {})[name] = pts
        return out

    def describe(self) -> dict[str, Any]:
        """The run at a glance: its name, hosts, links (rates, delays, queues), flows, probes."""
        meta = self.meta or {}
        links = []
        for link in _dicts(meta.get("links")):
            for which in ("forward", "reverse"):
                d = link.get(which) if isinstance(link.get(which), dict) else {}
                q = d.get("queue") if isinstance(d.get("queue"), dict) else {}
                links.append({"direction": d.get("direction"), "rate_bps": _number(d.get("rate_bps")),
                              "delay_ms": (_number(d.get("delay_ns")) or 0.0) / 1e6, "loss": _number(d.get("loss")),
                              "discipline": q.get("discipline"), "packets": q.get("packets"),
                              "bytes": q.get("bytes"),
                              "probed": isinstance(d.get("direction"), str) and d["direction"] in self.queues})
        flows = meta.get("flows") if isinstance(meta.get("flows"), dict) else {}
        return {"name": meta.get("name"), "preset": meta.get("preset"),
                "params": meta.get("params") if isinstance(meta.get("params"), dict) else {},
                "hosts": [f"{h.get('name')} {h.get('address')}" for h in _dicts(meta.get("hosts"))],
                "links": links, "t0_realtime_s": self.t0_real,
                "flows": [{"name": n, **{k: f.get(k) for k in ("kind", "src", "dst", "cc", "dscp", "ecn")}}
                          for n, f in flows.items() if isinstance(f, dict)],
                "queues": {d: q.discipline for d, q in self.queues.items()}}

    def snapshot(self) -> dict[str, Any]:
        """Everything so far, for a page that has nothing yet."""
        update = self.poll()
        series: dict[str, Any] = {}
        for chart, name, s in self._charts(update["status"]["phase"] not in ("running", "starting")):
            s.sent = len(s.points)
            if s.points:
                series.setdefault(chart, {})[name] = list(s.points)
        return {**update, "series": series, "run": self.describe(), "fresh": True}


class SweepFollower:
    """A sweep while it runs: its points' runs (complete, running, waiting, failed) from
    sweep.json and each run's own run.json, each finished run's headline figures, and a Follower
    on the run that is going on (the first of them, with --parallel). Runs on a Ray cluster's
    nodes come back whole: each waits in the table until it is complete."""

    def __init__(self, out: Path, clock: Callable[[], float] = time.time):
        self.dir = Path(out)
        self.clock = clock
        self.doc: dict[str, Any] = {}
        self.finished: dict[str, dict[str, Any]] = {}  # a run's dir -> its headline
        self.current: Follower | None = None

    def _inside(self, relative: Any) -> Path | None:
        """A run's directory as sweep.json names it, if it is inside the sweep's."""
        try:
            path = (self.dir / str(relative)).resolve()
            path.relative_to(self.dir.resolve())
            return path
        except (OSError, ValueError):
            return None

    def poll(self) -> dict[str, Any]:
        try:
            doc = json.loads((self.dir / "sweep.json").read_text())
            if isinstance(doc, dict):
                self.doc = doc
        except (OSError, ValueError, RecursionError):
            pass  # not yet, or replaced under us: the last one read stands
        doc = self.doc
        status = str(doc.get("status") or "")
        if status == "running" and proc.owner_alive(doc.get("owner")) is False:
            status = "stopped"
        runs, running = [], []
        for point in _dicts(doc.get("points")):
            for r in _dicts(point.get("runs")):
                where = str(r.get("dir"))
                run_dir = self._inside(where)
                said = str(r.get("status") or "pending")
                now = _pending_state(run_dir) if said == "pending" and run_dir is not None else said
                if now == "running" and run_dir is not None:
                    running.append((where, run_dir))
                row = {"label": point.get("label"), "rep": r.get("rep"), "dir": where,
                       "status": "waiting" if now == "pending" else now, "reason": r.get("reason"),
                       "elapsed_s": _number(r.get("elapsed_s"))}
                if now == "complete" and run_dir is not None:
                    if where not in self.finished:
                        self.finished[where] = _headline(run_dir)
                    row.update(self.finished[where])
                    row["report"] = f"{where}/report.html" if _exists(run_dir / "report.html") else None
                runs.append(row)
        report = status not in ("running", "") and _exists(self.dir / "report.html")
        update: dict[str, Any] = {
            "sweep": {"name": doc.get("name"), "status": status,
                      "axes": [{"name": a.get("name"), "values": a.get("values")} for a in _dicts(doc.get("axes"))],
                      "repeat": doc.get("repeat"), "runs": runs, "report": "report.html" if report else None}}
        if running and (self.current is None or self.current.dir != running[0][1]):
            self.current = Follower(running[0][1], self.clock)
            update["current"] = {**self.current.snapshot(), "dir": running[0][0]}
        elif self.current is not None:
            where = next((w for w, d in running if d == self.current.dir), None) or \
                str(self.current.dir.relative_to(self.dir.resolve()))
            update["current"] = {**self.current.poll(), "dir": where}
        return update

    def snapshot(self) -> dict[str, Any]:
        self.current = None  # a new page gets the running run's every point
        return self.poll()


def _pending_state(run_dir: Path) -> str:
    """A run sweep.json still calls pending: running (its run.json says unfinished and its
    process lives; or says it ended, while it writes its plots and sweep.json catches up) or
    waiting."""
    try:
        meta = _meta(json.loads((run_dir / "run.json").read_text()))
    except (OSError, ValueError, RecursionError):
        return "waiting"
    if meta is None:
        return "waiting"
    if not str(meta.get("incomplete_reason") or "").startswith(UNFINISHED):
        return "running"  # ended: its process finishes its files, then sweep.json says how it went
    return "running" if proc.owner_alive(meta.get("owner")) else "waiting"


def _headline(run_dir: Path) -> dict[str, Any]:
    """A finished run's line for a sweep's table, its figures and its grade."""
    from bloatlab.analysis.compare import headline_numbers  # pandas, matplotlib: loaded when needed
    from bloatlab.analysis.summary import headline
    from bloatlab.results.reader import read_summary

    summary = read_summary(run_dir)
    bloat = getattr(summary, "bufferbloat", None)
    return {"headline": headline(summary), "figures": headline_numbers(summary),
            "grade": getattr(bloat, "grade", None) if bloat is not None else None}
