"""Runs an Experiment: build the network, start servers and probes, run the workloads on
their schedule, stop everything, remove the network, and write the results directory.

Ctrl-C (or SIGTERM) at any point ends every process, removes the network and the probes'
tracefs instance, and still writes what was measured, marked `complete: false`.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__, netns, state
from .errors import BloatlabError, MachineError
from .network import DP_NODE, Network
from .probes import queue as queue_probe
from .probes import tcp as tcp_probe
from .progress import Progress
from .results import FETCH_STATS, RTT_STATS, RunDir, describe, machine, snapshot, tool_versions
from .spec import Bulk, Experiment, Web
from .workloads import Clock, Collected, Running, check_congestion_controls, pick_ports, running

log = logging.getLogger(__name__)

END_GRACE_S = 10.0  # iperf3 clients finish their last interval and report after the schedule ends
TICK_S = 0.05


@dataclass
class Outcome:
    run_dir: Path
    summary: dict[str, Any]
    complete: bool
    reason: str | None = None  # why it is incomplete
    warnings: list[str] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    interrupted: bool = False  # a stop signal came (maybe only while cleaning up)
    report: Path | None = None


def default_out(experiment: Experiment, root: Path = Path("results")) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    tags = "-".join(f"{k}{v}" for k, v in experiment.params.items() if k in ("maxq", "aqm", "cc"))
    return root / "-".join(x for x in (experiment.name, tags, stamp) if x)


def network_name() -> str:
    """A short name no running network has: networks of two runs at once never collide."""
    while True:
        name = f"run-{secrets.token_hex(3)}"
        if not state.state_dir(name).exists():
            return name


class _Interrupts:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt while running; while cleaning up
    they are only noted, so a second Ctrl-C cannot leave a half-removed network."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.cleaning = False
        self.received: int | None = None

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def _handle(self, signum, frame):
        self.received = signum
        if self.cleaning:
            print("\nbloatlab: cleaning up, one moment", file=sys.stderr)
            return
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def choose_tcp_probe(wanted: str) -> str:
    if wanted in ("off", "ss"):
        return "none" if wanted == "off" else "ss"
    reason = tcp_probe.TracepointProbe.available()
    if reason is None:
        return "tracepoint"
    if wanted == "tracepoint":
        raise MachineError(f"the tcp:tcp_probe tracepoint cannot be used here: {reason}; "
                           'use tcp = "ss" or "auto"', field="probes.tcp")
    return "ss"


# Departures this late are no longer the emulator's timing noise: at 10 Mbit/s a millisecond is
# almost a full frame's time on the wire, and the lag adds to every RTT the run reports.
LAG_WARN_NS = 1_000_000


def datapath_lag_warnings(stats: dict[str, dict[str, Any]]) -> list[str]:
    """What the run's numbers owe to the userspace datapath falling behind, per direction:
    departures late by a millisecond or more at p99 (a queue no link asked for), and frames
    lost outside the emulated link (its input ring full, or refused on the way out)."""
    out = []
    for name, d in stats.items():
        late = d.get("depart_error_ns", {})
        if late.get("p99", 0) >= LAG_WARN_NS:
            out.append(f"{name}: the datapath fell behind: departures {late['p99'] / 1e6:.1f} ms late at p99 "
                       f"(max {late.get('max', 0) / 1e6:.1f} ms), delay no link asked for; "
                       "the machine was short of CPU for this traffic")
        drops = d.get("drops", {})
        lost = drops.get("rx_overrun", 0) + drops.get("tx_error", 0)
        if lost:
            out.append(f"{name}: {lost} frames lost outside the emulated link (rx_overrun {drops.get('rx_overrun', 0)}, "
                       f"tx_error {drops.get('tx_error', 0)}): the datapath could not keep up")
    return out


class Run:
    def __init__(self, experiment: Experiment, out: Path, *, progress: bool | Callable[[float], None] = True,
                 svg: bool = False):
        self.exp = experiment
        self.dir = RunDir(out)
        self.progress = progress
        self.svg = svg
        self.clock = Clock()
        self.net: Network | None = None
        self.workloads: list[Running] = []
        self.tcp = None
        self.tcp_kind = "none"
        self.qdisc_samplers: dict[str, Any] = {}
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.incomplete_reason: str | None = None
        self.started_at = self.ended_at = None
        self.snapshots: dict[str, Any] = {}
        self.ports: dict[str, int] = {}
        self.elapsed_s = 0.0

    # The run -----------------------------------------------------------------------------

    def execute(self) -> Outcome:
        if (self.dir.path / "run.json").exists():
            raise BloatlabError(f"{self.dir.path} already holds a run; choose another --out or remove it",
                                field="--out")
        check_congestion_controls(list(self.exp.workloads))
        tcp_flows = any(isinstance(w, (Bulk, Web)) for w in self.exp.workloads)
        self.tcp_kind = choose_tcp_probe(self.exp.probes.tcp) if tcp_flows else "none"
        try:
            self.dir.create()
        except OSError as e:
            raise BloatlabError(f"cannot create {self.dir.path}: {e.strerror}; choose a writable directory",
                                field="--out") from None
        self.started_at = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        with _Interrupts() as interrupts:
            failure: BaseException | None = None
            try:
                self._run()
            except KeyboardInterrupt:
                interrupts.cleaning = True
                self.incomplete_reason = f"interrupted at {self.elapsed_s:.1f} s of {self.exp.duration_s:g} s"
            except BaseException as error:
                interrupts.cleaning = True
                self.incomplete_reason = f"failed: {error}"
                failure = error
            interrupts.cleaning = True
            self._teardown()
            if failure is not None:
                self._write_partial()
                raise failure
            outcome = self._write()
            # A Ctrl-C while cleaning up leaves this run whole but must still stop a sweep.
            outcome.interrupted = interrupts.received is not None
            return outcome

    def _run(self) -> None:
        exp = self.exp
        ports = pick_ports(len(exp.workloads))
        self.ports = {w.name: p for w, p in zip(exp.workloads, ports)}
        self.net = Network(exp.topology, network_name(), qlog_dir=self.dir.raw / "qlog",
                           qlog_directions=set(exp.probes.queue))
        self.net.up()
        self.workloads = [running(w, self.net, self.dir.raw, self.clock, self.ports[w.name]) for w in exp.workloads]
        for w in self.workloads:
            w.prepare()
        self.snapshots = {node: snapshot(self.net.namespace(node)) for node in exp.topology.node_names()}
        if netns.exists(self.net.datapath_namespace):  # kernel links' qdiscs; "_" is no node's name
            self.snapshots[DP_NODE] = snapshot(self.net.datapath_namespace)
        self._start_probes()

        self.clock.mark()
        pending = sorted(self.workloads, key=lambda w: w.w.start_ns)
        stopping = sorted(self.workloads, key=lambda w: w.w.stop_ns)
        # A callable progress is told the seconds into the run (a sweep draws one bar for all).
        bar = Progress(exp.duration_s, f"{exp.name}") if self.progress is True else None
        tick = self.progress if callable(self.progress) else None
        while True:
            now = self.clock.since_t0()
            self.elapsed_s = now
            while pending and pending[0].w.start_ns / 1e9 <= now:
                pending.pop(0).start()
            while stopping and stopping[0].w.stop_ns / 1e9 <= now:
                stopping.pop(0).stop()
            if now >= exp.duration_s:
                break
            if bar:
                bar.update(now)
            if tick:
                tick(now)
            time.sleep(min(TICK_S, exp.duration_s - now))
        self.elapsed_s = exp.duration_s
        if bar:
            bar.finish()
        for w in self.workloads:
            w.stop()
        deadline = time.monotonic() + END_GRACE_S
        for w in self.workloads:
            w.wait(deadline)

    def _start_probes(self) -> None:
        exp = self.exp
        ports = list(self.ports.values())
        if self.tcp_kind == "tracepoint":
            # Senders only: a bulk flow's client sends to the server's port, a web server from it.
            self.tcp = tcp_probe.TracepointProbe(
                self.net.name, [], self.dir.raw / "tcp_probe.txt",
                dports=[self.ports[w.name] for w in exp.workloads if isinstance(w, Bulk)],
                sports=[self.ports[w.name] for w in exp.workloads if isinstance(w, Web)])
        elif self.tcp_kind == "ss":
            senders = sorted({w.src for w in exp.workloads if isinstance(w, Bulk)}
                             | {w.server for w in exp.workloads if isinstance(w, Web)})
            self.tcp = tcp_probe.SsProbe(self.net, senders, ports, self.dir.raw / "ss.txt")
        if self.tcp is not None:
            self.tcp.start()
        for name in exp.probes.queue:
            index, which = self._direction(name)
            if self.net.backends[index] == "kernel":
                from .probes.qdisc import QdiscSampler

                link = exp.topology.links[index]
                port = self.net.queue_port(index, which)
                sampler = QdiscSampler(port.ns, port.iface, self.dir.raw / f"qdisc.{link.name}.{which}.csv")
                sampler.start()
                self.qdisc_samplers[name] = sampler

    def _direction(self, name: str) -> tuple[int, str]:
        for index, link in enumerate(self.exp.topology.links):
            for which in ("forward", "reverse"):
                if link.direction_name(which) == name:
                    return index, which
        raise KeyError(name)

    def _teardown(self) -> None:
        """End every process, stop the probes, remove the network."""
        for w in self.workloads:
            try:
                w.end()
            except Exception as e:  # keep going: the network must go whatever happened
                self.errors.append(f"ending {w.w.name}: {e}")
        if self.tcp is not None:
            try:
                self.tcp.stop()
            except Exception as e:
                self.errors.append(f"stopping the TCP probe: {e}")
        for name, sampler in self.qdisc_samplers.items():
            try:
                sampler.stop()
            except Exception as e:
                self.errors.append(f"queue sampler of {name}: {e}")
        if self.net is not None and self.net.status != "new":
            try:
                self.net.down()  # the datapath flushes its queue logs as it stops
            except Exception as e:
                self.errors.append(f"removing network {self.net.name}: {e}")
        self.ended_at = dt.datetime.now().astimezone().isoformat(timespec="seconds")

    # Results -----------------------------------------------------------------------------

    def _write_partial(self) -> None:
        try:
            self._write(plots=False)
        except Exception as e:  # the original error matters more
            log.warning("could not write partial results: %s", e)

    def _write(self, plots: bool = True) -> Outcome:
        exp = self.exp
        duration = min(exp.duration_s, self.elapsed_s) if self.incomplete_reason else exp.duration_s
        collected = Collected()
        if self.clock.t0_mono:
            for w in self.workloads:
                try:
                    got = w.collect()
                except Exception as e:
                    self.errors.append(f"reading the results of {w.w.name}: {e}")
                    continue
                collected.flows.update(got.flows)
                collected.throughput += got.throughput
                collected.ping += got.ping
                collected.ping_lost += got.ping_lost
                collected.per_ping.update(got.per_ping)
                collected.fetch += got.fetch
                self.errors += got.errors
                self.warnings += got.warnings
        if self.errors and self.incomplete_reason is None:
            self.incomplete_reason = f"a workload failed: {self.errors[0]}"

        self.dir.write_series("ping", sorted(collected.ping))
        self.dir.write_series("fetch", sorted(collected.fetch))
        self.dir.write_series("throughput", sorted(collected.throughput, key=lambda r: (r[1], r[0])))
        self.dir.write_series("cwnd", self._cwnd_rows())
        queue_rows, queue_summary, queue_sources = self._queues(duration)
        self.dir.write_series("queue", queue_rows)

        rtts = [rtt for _, rtt in collected.ping]
        fetches = [s for _, s, _, ok in collected.fetch if ok]
        rtt = describe(rtts, RTT_STATS)
        rtt["lost"] = collected.ping_lost
        fetch = describe(fetches, FETCH_STATS)
        fetch["failed"] = sum(1 for *_, ok in collected.fetch if not ok)
        complete = self.incomplete_reason is None
        summary = {"complete": complete, "duration_s": duration, "flows": collected.flows,
                   "rtt_ms": rtt, "fetch_s": fetch, "queue": queue_summary}
        if len(collected.per_ping) > 1:  # RTT under each phase of load (txqueuelen: TCP, then UDP)
            summary["pings"] = {name: {**describe(rtts, RTT_STATS), "lost": lost}
                                for name, (rtts, lost) in collected.per_ping.items()}
        self.dir.write_json("summary.json", summary)
        datapath_stats = self._datapath_stats()
        self.warnings += datapath_lag_warnings(datapath_stats)
        self.dir.write_json("run.json", self._run_json(complete, queue_sources, datapath_stats))

        outcome = Outcome(self.dir.path, summary, complete, self.incomplete_reason, warnings=self.errors + self.warnings)
        if plots:
            from .plots import plot_run

            result = plot_run(self.dir.path, svg=self.svg)
            outcome.plots = result.files
            outcome.warnings += result.warnings
            try:
                from .report import write_report

                outcome.report = write_report(self.dir.path)
            except Exception as e:  # the measurements are written; a report can be made later
                outcome.warnings.append(f"report.html not written ({e}); bloatlab report {self.dir.path} retries")
        return outcome

    def _cwnd_rows(self) -> list[tuple]:
        if self.tcp is None or not self.clock.t0_mono:
            return []
        samples = tcp_probe.read_samples(self.tcp.raw_path, self.tcp_kind)
        rows = []
        for w in self.exp.workloads:
            port = self.ports[w.name]
            if isinstance(w, Bulk):
                # The data connection of the sender's sockets to the server's port: the one whose
                # cwnd grew most (iperf3's control connection idles at its initial window).
                by_conn = defaultdict(list)
                for s in samples:
                    if s.dport == port:
                        by_conn[s.sport].append(s)
                if by_conn:
                    data = max(by_conn.values(), key=lambda conn: (max(s.cwnd_pkts for s in conn), len(conn)))
                    rows += [(s, w.name) for s in data]
            elif isinstance(w, Web):
                by_conn = defaultdict(list)
                for s in samples:
                    if s.sport == port:
                        by_conn[s.dport].append(s)
                ordered = sorted(by_conn.values(), key=lambda conn: conn[0].t_s)
                rows += [(s, f"{w.name}#{n}") for n, conn in enumerate(ordered, 1) for s in conn]
        t0 = self.clock.t0_mono
        return [(s.t_s - t0, flow, s.cwnd_pkts, s.ssthresh_pkts, s.srtt_ms)
                for s, flow in sorted(rows, key=lambda r: (r[1], r[0].t_s))]

    def _queues(self, duration: float) -> tuple[list[tuple], dict[str, Any], dict[str, str]]:
        rows: list[tuple] = []
        summary: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for name in self.exp.probes.queue:
            index, which = self._direction(name)
            link = self.exp.topology.links[index]
            trace = None
            if name in self.qdisc_samplers:
                sources[name] = "tc"
                trace = self._qdisc_trace(self.qdisc_samplers[name])
            elif self.net is not None and self.net.backends and self.net.backends[index] == "userspace":
                sources[name] = "datapath"
                path = self.dir.raw / "qlog" / f"{link.name}.{which}.qlog"
                if path.exists() and self.clock.t0_mono:
                    trace = queue_probe.from_qlog(path, self.clock.t0_mono)
            if trace is None:
                summary[name] = dict.fromkeys(("mean_pkts", "max_pkts", "mean_bytes", "max_bytes", "drops"))
                continue
            summary[name] = trace.summary(duration)
            rows += trace.rows(name, duration)
        return rows, summary, sources

    def _qdisc_trace(self, sampler) -> queue_probe.QueueTrace | None:
        if not sampler.path.exists() or not self.clock.t0_mono:
            return None
        return queue_probe.from_qdisc_csv(sampler.path, self.clock.t0_mono)

    def _datapath_stats(self) -> dict[str, dict[str, Any]]:
        """The datapath's final counters per direction name ("s0->h2"), userspace links only."""
        final = (self.net.final_datapath_stats or {}) if self.net is not None else {}
        out = {}
        for link in self.exp.topology.links:
            stats = final.get("links", {}).get(link.name, {})
            for which in ("forward", "reverse"):
                if which in stats:
                    out[link.direction_name(which)] = stats[which]
        return out

    def _run_json(self, complete: bool, queue_sources: dict[str, str],
                  datapath_stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        exp = self.exp
        topo = exp.topology.to_dict()
        backends = self.net.backends if self.net is not None else []
        for link, backend in zip(topo["links"], backends):
            link["backend_used"] = backend
        flows = {}
        for w in exp.workloads:
            if w.kind in ("bulk", "udp"):
                flows[w.name] = {"kind": w.kind, "src": w.src, "dst": w.dst, "port": self.ports.get(w.name),
                                 "cc": getattr(w, "cc", None)}
            elif w.kind == "web":
                flows[w.name] = {"kind": "web", "src": w.server, "dst": w.client, "port": self.ports.get(w.name),
                                 "cc": w.cc}
        return {
            "bloatlab_version": __version__, "name": exp.name, "preset": exp.preset, "source": exp.source,
            "params": exp.params, "spec": exp.to_dict(),
            "started_at": self.started_at, "ended_at": self.ended_at,
            "t0_realtime_s": self.clock.t0_real or None,
            "complete": complete, "incomplete_reason": self.incomplete_reason, "errors": self.errors,
            "warnings": self.warnings,
            "machine": machine(), "tools": tool_versions(),
            "network": self.net.name if self.net else None,
            "links": [{"name": link["name"], "ends": link["ends"], "backend": link.get("backend_used"),
                       "forward": link["forward"], "reverse": link["reverse"]} for link in topo["links"]],
            "datapath_stats": datapath_stats,
            "flows": flows,
            "probes": {"tcp": self.tcp_kind, "queue": queue_sources,
                       "tcp_lost_events": getattr(self.tcp, "lost_events", None)},
            "snapshots": self.snapshots,
        }


def run_experiment(experiment: Experiment, out: Path | None = None, **kwargs: Any) -> Outcome:
    return Run(experiment, out or default_out(experiment), **kwargs).execute()
