"""Following a run while it runs: what its tools have written so far, read from its directory.

A run writes run.json as it starts and again at t0 (the resolved spec, the ports, where each
queue is read, t0 on both clocks), and its tools append to raw/ as they go (docs/results.md):

    raw/NAME.ping.txt       ping -D: a line per reply, wall-clock stamped
    raw/NAME.client.txt     irtt: a line per reply ("seq=3 rtt=21.4ms ..."), sent every interval
    raw/NAME.server.txt     iperf3's server: a line per 0.1 s report, stamped on CLOCK_MONOTONIC
    raw/NAME.fetches.txt    a line per web fetch: its start (s since t0), its seconds, ok
    raw/tcp_probe.txt       tcp:tcp_probe events (CLOCK_MONOTONIC): each sender's cwnd
    raw/qlog/L.DIR.qlog     the datapath's queue log: every enqueue, dequeue, drop and mark
    raw/qdisc.L.DIR.csv     a kernel qdisc's samples

and the datapath rewrites its stats file (lateness, CPU) every 200 ms under /run/bloatlab. A
`Follower` reads each from where it stopped, keeps whole lines and records only, and turns them
into points (seconds since t0, value), binned where a tool writes more often than a page can
draw. It only reads: the run neither knows nor waits for it.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bloatlab import proc
from bloatlab.analysis.compare import headline_numbers
from bloatlab.analysis.summary import headline
from bloatlab.errors import MachineError
from bloatlab.experiment.parsers import parse_iperf3_intervals, parse_ping_replies, parse_tcp_probe
from bloatlab.results.reader import read_summary
from bloatlab.testbed import state
from bloatlab.testbed.datapath import (DROP_REASONS, KIND_DEQUEUE, KIND_DROP, KIND_MARK, PRE_QUEUE_DROP_REASONS,
                                       QLOG_RECORD_BYTES, qlog_records)
from bloatlab.testbed.datapath_stats import TimerOvershoot, read_stats_if_any
from bloatlab.testbed.diagnostics import lag_warnings

BIN_S = 0.05  # the queue's and the cwnd's points: one per bin (the tools write far more often)
HOLD_S = 0.3  # the longest a tool holds an event before its file has it (the queue log: 0.1 s; tcp_probe: 0.05 s)
DATA_EVENTS = 50  # a bulk flow's connection with this many events is its data connection (the control one has ~10)
UNFINISHED = "unfinished"  # how run.json's incomplete_reason starts while the run goes on
_IRTT_REPLY = re.compile(r"^seq=(?P<seq>\d+) rtt=(?P<rtt>[\d.]+)(?P<unit>ns|µs|us|ms|s)\b")
_UNIT_MS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}


class Tail:
    """A file another process appends to, read from where the last read stopped."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.rest = b""

    def read(self) -> bytes:
        """The bytes appended since the last read (all of them, from a file that was replaced
        by a shorter one)."""
        try:
            with self.path.open("rb") as f:
                f.seek(0, 2)
                size = f.tell()
                if size < self.offset:  # rewritten: start over
                    self.offset, self.rest = 0, b""
                f.seek(self.offset)
                data = f.read(size - self.offset)
        except FileNotFoundError:
            return b""
        self.offset += len(data)
        return data

    def lines(self) -> list[str]:
        """The whole lines appended since the last call; a line still being written waits."""
        data = self.rest + self.read()
        whole, _, self.rest = data.rpartition(b"\n")
        return whole.decode(errors="replace").splitlines() if whole else []

    def records(self, size: int) -> bytes:
        """The whole records of `size` bytes appended since the last call."""
        data = self.rest + self.read()
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
    """Points one per BIN_S: the last value in a bin (a window, a backlog's maximum, a count)."""

    def __init__(self, how: str = "last"):
        self.how = how
        self.bins: dict[int, float] = {}
        self.done: Series = Series()
        self.open_from = 0  # bins before it are closed: their points are in `done`

    def add(self, t: float, value: float) -> None:
        k = math.floor(t / BIN_S)
        if k < self.open_from:
            k = self.open_from  # late (a trace's CPUs out of order): into the open bin
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

    def __init__(self, discipline: str, tail: Tail, csv: bool):
        self.discipline, self.tail, self.csv = discipline, tail, csv
        self.backlog, self.sojourn, self.drops, self.marks = Binned("max"), Binned("max"), Binned("sum"), Binned("sum")
        self.last_drops: float | None = None  # a qdisc's counter, cumulative
        self.last_backlog: int | None = None
        self.drops_total = self.marks_total = 0
        self.drops_by_reason: dict[str, int] = {}

    def charts(self) -> tuple[tuple[str, Binned], ...]:
        return (("backlog", self.backlog), ("sojourn", self.sojourn), ("drops", self.drops), ("marks", self.marks))


class Follower:
    """What one run has measured so far, as charts' points since t0."""

    def __init__(self, run_dir: Path, clock: Callable[[], float] = time.time):
        self.dir = Path(run_dir)
        self.clock = clock  # the wall clock (a replay's own, in tests)
        self.meta: dict[str, Any] | None = None
        self._meta_stamp: tuple[int, int] | None = None
        self.t0_real: float | None = None
        self.t0_mono: float | None = None
        self.charts: dict[str, dict[str, Series]] = {"rtt": {}, "goodput": {}, "fetch": {}}
        self.queues: dict[str, _Queue] = {}
        self.tails: dict[str, Tail] = {}
        self.ports: dict[int, str] = {}  # a bulk flow's server port -> its name
        self.windows: dict[str, dict[int, _Window]] = {}  # a bulk flow -> its sender's connections by port
        self.least_rtt: dict[str, float] = {}
        self.datapath: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.last_sample_real: float | None = None  # the wall-clock time of the latest probe sample read

    # run.json --------------------------------------------------------------------------------

    def _read_meta(self) -> bool:
        """run.json anew if it changed (the run rewrites it whole: at its start, at t0, at its end)."""
        path = self.dir / "run.json"
        try:
            st = path.stat()
        except FileNotFoundError:
            return False
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._meta_stamp:
            return False
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            return False  # not there yet, or replaced under us: the next poll reads it
        self.meta, self._meta_stamp = meta, stamp
        if self.t0_real is None and meta.get("t0_realtime_s") is not None:
            self.t0_real, self.t0_mono = float(meta["t0_realtime_s"]), float(meta["t0_monotonic_s"])
            self._start_following(meta)
        return True

    def _start_following(self, meta: dict[str, Any]) -> None:
        raw = self.dir / "raw"
        for w in (meta.get("spec") or {}).get("workloads") or []:
            name, kind = w.get("name"), w.get("kind")
            if kind == "ping":
                self.charts["rtt"][name] = Series()
                self.tails[f"ping:{name}"] = Tail(raw / f"{name}.ping.txt")
            elif kind == "irtt":
                self.charts["rtt"][name] = Series()
                self.tails[f"irtt:{name}"] = Tail(raw / f"{name}.client.txt")
            elif kind in ("bulk", "udp"):
                self.charts["goodput"][name] = Series()
                self.tails[f"iperf:{name}"] = Tail(raw / f"{name}.server.txt")
                port = ((meta.get("flows") or {}).get(name) or {}).get("port")
                if kind == "bulk" and port:
                    self.ports[int(port)] = name
                    self.windows[name] = {}
            elif kind == "web":
                self.charts["fetch"][name] = Series()
                self.tails[f"fetch:{name}"] = Tail(raw / f"{name}.fetches.txt")
        if self.ports and (meta.get("probes") or {}).get("tcp") == "tracepoint":
            self.tails["tcp_probe"] = Tail(raw / "tcp_probe.txt")
        directions = {}
        for link in meta.get("links") or []:
            for which in ("forward", "reverse"):
                d = link.get(which) or {}
                directions[d.get("direction")] = (link.get("name"), which, (d.get("queue") or {}).get("discipline"))
        for direction, source in ((meta.get("probes") or {}).get("queue") or {}).items():
            if direction not in directions:
                continue
            link, which, discipline = directions[direction]
            if source == "datapath":
                self.queues[direction] = _Queue(discipline or "?", Tail(raw / "qlog" / f"{link}.{which}.qlog"), False)
            else:
                self.queues[direction] = _Queue(discipline or "?", Tail(raw / f"qdisc.{link}.{which}.csv"), True)

    # the tools' files ------------------------------------------------------------------------

    def _read_tools(self) -> None:
        assert self.t0_real is not None and self.t0_mono is not None
        for key, tail in self.tails.items():
            kind, _, name = key.partition(":")
            lines = tail.lines()
            if not lines:
                continue
            if kind == "ping":
                for reply in parse_ping_replies("\n".join(lines)):
                    if reply.t_s is not None:
                        self._rtt(name, reply.t_s - self.t0_real, reply.rtt_ms, reply.t_s)
            elif kind == "irtt":
                w = self._workload(name)
                for line in lines:
                    if (m := _IRTT_REPLY.match(line.strip())) and w is not None:
                        sent = w["start_ns"] / 1e9 + int(m["seq"]) * w["interval_ns"] / 1e9
                        self._rtt(name, sent, float(m["rtt"]) * _UNIT_MS[m["unit"]], None)
            elif kind == "iperf":
                for t, mbps in parse_iperf3_intervals(lines):
                    self.charts["goodput"][name].add(t - self.t0_mono, mbps)
            elif kind == "fetch":
                for line in lines:
                    parts = line.split()
                    if len(parts) >= 3:
                        try:
                            start, seconds, ok = float(parts[0]), float(parts[1]), parts[2] == "1"
                        except ValueError:
                            continue
                        if ok:
                            self.charts["fetch"][name].add(start + seconds, seconds)
            elif kind == "tcp_probe":
                self._cwnd(lines)

    def _workload(self, name: str) -> dict[str, Any] | None:
        return next((w for w in ((self.meta or {}).get("spec") or {}).get("workloads") or [] if w.get("name") == name),
                    None)

    def _rtt(self, name: str, t: float, rtt_ms: float, stamp_real: float | None) -> None:
        self.charts["rtt"][name].add(t, rtt_ms)
        self.least_rtt[name] = min(self.least_rtt.get(name, rtt_ms), rtt_ms)
        if stamp_real is not None:
            self.last_sample_real = max(self.last_sample_real or 0.0, stamp_real)

    def _cwnd(self, lines: list[str]) -> None:
        """Each bulk flow's sender: its sockets' events toward the server's port, per connection."""
        assert self.t0_mono is not None
        for e in parse_tcp_probe("\n".join(lines)):
            flow = self.ports.get(e.dport)
            if flow is not None:
                self.windows[flow].setdefault(e.sport, _Window()).add(e.t_s - self.t0_mono, e.snd_cwnd_pkts)

    def _data_connection(self, flow: str, ended: bool) -> _Window | None:
        """The flow's data connection, as the run will name it (the one whose window grew most;
        iperf3's control connection carries a few segments, its window near its first): shown
        once it is clear, when it has had DATA_EVENTS acknowledgements, or the run ended."""
        conns = self.windows.get(flow) or {}
        if not conns:
            return None
        best = max(conns.values(), key=lambda w: (w.largest, w.events))
        return best if ended or best.events >= DATA_EVENTS else None

    def _read_queues(self) -> None:
        assert self.t0_mono is not None
        for q in self.queues.values():
            if q.csv:  # a kernel qdisc's samples: t_s (mono), ..., qlen_pkts, backlog_bytes, drops
                for line in q.tail.lines():
                    parts = line.split(",")
                    if len(parts) != 6 or parts[0] == "t_s":
                        continue
                    try:
                        t, pkts, drops = float(parts[0]) - self.t0_mono, float(parts[3]), float(parts[5])
                    except ValueError:
                        continue
                    q.backlog.add(t, pkts)
                    q.last_backlog = int(pkts)
                    if q.last_drops is not None and drops > q.last_drops:
                        q.drops.add(t, drops - q.last_drops)
                        q.drops_total += int(drops - q.last_drops)
                    q.last_drops = drops
                continue
            records = qlog_records(q.tail.records(QLOG_RECORD_BYTES))
            if not len(records):
                continue
            self._queue_bins(q, records["t_ns"] / 1e9 - self.t0_mono, records)

    def _queue_bins(self, q: _Queue, t: np.ndarray, records: np.ndarray) -> None:
        bins = np.floor(t / BIN_S).astype(np.int64)
        kind, reason = records["kind"], records["reason"]
        q.last_backlog = int(records["backlog_pkts"][-1])
        for k in np.unique(bins):
            inside = bins == k
            at = k * BIN_S
            q.backlog.add(at, float(records["backlog_pkts"][inside].max()))
            dequeued = inside & (kind == KIND_DEQUEUE)
            if dequeued.any():
                q.sojourn.add(at, float(records["value"][dequeued].max()) / 1e6)
            # The queue's own drops from t0 on, as the run's summary counts them.
            dropped = inside & (kind == KIND_DROP) & ~np.isin(reason, PRE_QUEUE_DROP_REASONS) & (t > 0)
            if dropped.any():
                q.drops.add(at, float(dropped.sum()))
                q.drops_total += int(dropped.sum())
                for code, n in zip(*np.unique(reason[dropped], return_counts=True)):
                    name = DROP_REASONS.get(int(code), str(int(code)))
                    q.drops_by_reason[name] = q.drops_by_reason.get(name, 0) + int(n)
            marked = inside & (kind == KIND_MARK) & (t > 0)
            if marked.any():
                q.marks.add(at, float(marked.sum()))
                q.marks_total += int(marked.sum())

    def _read_datapath(self) -> None:
        """Lateness and CPU from the datapath's stats file (a network on this machine only), and
        the warnings the run would print from them now."""
        network = (self.meta or {}).get("network")
        if not network:
            return
        try:
            stats = read_stats_if_any(state.state_dir(network) / "datapath-stats.json")
        except MachineError:
            return
        if stats is None:
            return
        directions = {}
        for link in (self.meta or {}).get("links") or []:
            if (s := stats.links.get(link.get("name"))) is not None:
                directions[(link.get("forward") or {}).get("direction")] = s.forward
                directions[(link.get("reverse") or {}).get("direction")] = s.reverse
        self.datapath = {
            "lateness_us": {name: {"p99": d.depart_error_ns.p99 / 1e3, "max": d.depart_error_ns.max / 1e3}
                            for name, d in directions.items() if name},
            "workers": [{"name": w.name, "busy_percent": round(100 * (w.cpu.user_ns + w.cpu.kernel_ns) / w.cpu.wall_ns, 1)
                         if w.cpu.wall_ns else None, "woke_late_p99_us": w.wakeups_late_ns.p99 / 1e3}
                        for w in stats.workers],
        }
        timer = (self.meta or {}).get("timer")
        try:
            self.warnings = lag_warnings({k: v for k, v in directions.items() if k},
                                         TimerOvershoot.from_json(timer) if isinstance(timer, dict) else None,
                                         stats.figures)
        except (KeyError, TypeError, ZeroDivisionError):
            self.warnings = []

    # what a page is sent -----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Where the run is: waiting (no t0 yet), running, complete, incomplete (why) or stopped
        (its process gone before it ended); elapsed and remaining seconds."""
        meta = self.meta or {}
        duration = (meta.get("spec") or {}).get("duration_s")
        reason = meta.get("incomplete_reason") or ""
        if not meta:
            phase = "waiting"
        elif meta.get("complete"):
            phase = "complete"
        elif reason.startswith(UNFINISHED):
            owner = meta.get("owner") or {}
            alive = proc.alive(owner.get("pid"), owner.get("starttime")) if owner.get("pid") else True
            phase = ("running" if self.t0_real is not None else "starting") if alive else "stopped"
        else:
            phase = "incomplete"
        elapsed = None
        if phase == "running" and self.t0_real is not None:
            elapsed = min(duration or math.inf, self.clock() - self.t0_real)
        elif phase == "complete":
            elapsed = duration
        report = (self.dir / "report.html").exists() and phase != "running"
        return {"phase": phase, "reason": None if phase in ("running", "complete", "starting") else reason or None,
                "elapsed_s": elapsed, "duration_s": duration,
                "remaining_s": max(0.0, duration - elapsed) if duration and elapsed is not None else None,
                "report": "report.html" if report else None, "warnings": list(meta.get("warnings") or [])}

    def poll(self) -> dict[str, Any]:
        """Read what is new; the update for a page that has every earlier one."""
        meta_changed = self._read_meta()
        if self.t0_real is not None:
            self._read_tools()
            self._read_queues()
            self._read_datapath()
            horizon = self._horizon()
            for q in self.queues.values():
                for _, b in q.charts():
                    b.close_before(horizon)
            for conns in self.windows.values():
                for w in conns.values():
                    w.binned.close_before(horizon)
        update: dict[str, Any] = {"status": self.status(), "series": self._new_points(),
                                  "datapath": self.datapath, "warnings": self.warnings, "figures": self.figures()}
        if meta_changed:
            update["run"] = self.describe()
        if self.last_sample_real is not None:
            update["last_sample_real_s"] = self.last_sample_real
        return update

    def figures(self) -> dict[str, Any]:
        """The numbers so far, as the run's summary will count them: each probe's round trips
        (count, least: the idle baseline, median, p95), each flow's goodput (its last report and
        the mean of its reports), each queue's drops and marks."""
        rtt = {}
        for name, s in self.charts["rtt"].items():
            values = np.array([v for _, v in s.points]) if s.points else np.zeros(0)
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

    def _horizon(self) -> float:
        """The time (s since t0) before which no more events can arrive: now, less what the
        tools may still hold (HOLD_S); the whole run once it ended."""
        phase = self.status()["phase"]
        if phase not in ("running", "starting") and self.t0_real is not None:
            return math.inf
        return self.clock() - (self.t0_real or 0.0) - HOLD_S

    def _new_points(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for chart, lines in self.charts.items():
            for name, s in lines.items():
                if pts := s.new():
                    out.setdefault(chart, {})[name] = pts
        for d, q in self.queues.items():
            for chart, b in q.charts():
                if pts := b.new():
                    out.setdefault(chart, {})[d] = pts
        ended = self.status()["phase"] not in ("running", "starting")
        for flow in self.windows:
            if (w := self._data_connection(flow, ended)) is not None and (pts := w.binned.new()):
                out.setdefault("cwnd", {})[flow] = pts
        return out

    def describe(self) -> dict[str, Any]:
        """The run at a glance: its name, hosts, links (rates, delays, queues), flows, probes."""
        meta = self.meta or {}
        links = []
        for link in meta.get("links") or []:
            for which in ("forward", "reverse"):
                d = link.get(which) or {}
                q = d.get("queue") or {}
                links.append({"direction": d.get("direction"), "rate_bps": d.get("rate_bps"),
                              "delay_ms": (d.get("delay_ns") or 0) / 1e6, "loss": d.get("loss"),
                              "discipline": q.get("discipline"), "packets": q.get("packets"),
                              "bytes": q.get("bytes"), "probed": d.get("direction") in self.queues})
        flows = [{"name": n, **{k: f.get(k) for k in ("kind", "src", "dst", "cc", "dscp", "ecn")}}
                 for n, f in (meta.get("flows") or {}).items()]
        return {"name": meta.get("name"), "preset": meta.get("preset"), "params": meta.get("params"),
                "hosts": [f"{h.get('name')} {h.get('address')}" for h in meta.get("hosts") or [] if isinstance(h, dict)],
                "links": links, "flows": flows, "t0_realtime_s": self.t0_real,
                "queues": {d: q.discipline for d, q in self.queues.items()}}

    def snapshot(self) -> dict[str, Any]:
        """Everything so far, for a page that has nothing yet."""
        self._read_meta()
        update = self.poll()
        series: dict[str, Any] = {}
        for chart, lines in self.charts.items():
            for name, s in lines.items():
                if s.points:
                    series.setdefault(chart, {})[name] = list(s.points)
        for d, q in self.queues.items():
            for chart, b in q.charts():
                if b.done.points:
                    series.setdefault(chart, {})[d] = list(b.done.points)
        for flow in self.windows:
            w = self._data_connection(flow, update["status"]["phase"] not in ("running", "starting"))
            if w is not None and w.binned.done.points:
                series.setdefault("cwnd", {})[flow] = list(w.binned.done.points)
        return {**update, "series": series, "run": self.describe()}


class SweepFollower:
    """A sweep while it runs: its points' runs (done, running, waiting, failed) from sweep.json
    and each run's own run.json, each finished run's headline figures, and a Follower on the
    run that is going on (the first of them, with --parallel)."""

    def __init__(self, out: Path):
        self.dir = Path(out)
        self.doc: dict[str, Any] | None = None
        self.finished: dict[str, dict[str, Any]] = {}  # a run's dir -> its headline
        self.current: Follower | None = None

    def poll(self) -> dict[str, Any]:
        try:
            self.doc = json.loads((self.dir / "sweep.json").read_text())
        except (OSError, ValueError):
            pass  # not yet, or replaced under us: the last one read stands
        doc = self.doc or {}
        runs, running = [], []
        for point in doc.get("points") or []:
            for r in point.get("runs") or []:
                state_of = r.get("status") or "pending"
                run_dir = self.dir / str(r.get("dir"))
                if state_of == "pending":
                    state_of = _pending_state(run_dir)
                    if state_of == "running":
                        running.append(run_dir)
                row = {"label": point.get("label"), "rep": r.get("rep"), "dir": r.get("dir"), "status": state_of,
                       "reason": r.get("reason"), "elapsed_s": r.get("elapsed_s")}
                if state_of == "complete":
                    if r.get("dir") not in self.finished:
                        self.finished[str(r.get("dir"))] = _headline(run_dir)
                    row.update(self.finished[str(r.get("dir"))])
                    row["report"] = f"{r.get('dir')}/report.html" if (run_dir / "report.html").exists() else None
                runs.append(row)
        update: dict[str, Any] = {
            "sweep": {"name": doc.get("name"), "status": doc.get("status"),
                      "axes": [{"name": a.get("name"), "values": a.get("values")} for a in doc.get("axes") or []],
                      "repeat": doc.get("repeat"), "runs": runs,
                      "report": "report.html" if doc.get("status") != "running" and (self.dir / "report.html").exists()
                      else None}}
        if running and (self.current is None or self.current.dir != running[0]):
            self.current = Follower(running[0])
            update["current"] = {**self.current.snapshot(), "dir": str(running[0].relative_to(self.dir))}
        elif self.current is not None:
            update["current"] = {**self.current.poll(), "dir": str(self.current.dir.relative_to(self.dir))}
        return update

    def snapshot(self) -> dict[str, Any]:
        self.current = None  # a new page gets the running run's every point
        return self.poll()


def _pending_state(run_dir: Path) -> str:
    """A run sweep.json still calls pending: running (its run.json says unfinished, and its
    process lives) or waiting."""
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return "waiting"
    owner = meta.get("owner") or {}
    if meta.get("complete") or not str(meta.get("incomplete_reason") or "").startswith(UNFINISHED):
        return "waiting"  # ended: sweep.json says how at its next write
    return "running" if owner.get("pid") and proc.alive(owner["pid"], owner.get("starttime")) else "waiting"


def _headline(run_dir: Path) -> dict[str, Any]:
    """A finished run's line for a sweep's table, its figures and its grade."""
    summary = read_summary(run_dir)
    bloat = getattr(summary, "bufferbloat", None)
    return {"headline": headline(summary), "figures": headline_numbers(summary),
            "grade": getattr(bloat, "grade", None) if bloat is not None else None}
