"""Probes: what a run measures besides the workloads' own output.

    tcp     cwnd, ssthresh and srtt of every flow (tcp:tcp_probe tracepoint, or `ss -tin` polling)
    qdisc   a kernel qdisc's backlog and drops, sampled over netlink (kernel-backend links)
    queue   queue occupancy over the run, from bloatlab-link's queue logs or the qdisc samples

RunProbes starts a run's probes together, stops them, and turns what they recorded into the
rows of series/cwnd.csv and series/queue.csv and the summary's queue numbers.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from bloatlab.errors import MachineError
from bloatlab.experiment import raw
from bloatlab.experiment.hosts import Hosts
from bloatlab.experiment.probes import tcp as tcp_probe
from bloatlab.experiment.probes.qdisc import QdiscSampler
from bloatlab.experiment.record import QueueMeasure, QueueSummary
from bloatlab.specs.model import Bulk, Experiment, Web


def choose_tcp_probe(wanted: str) -> str:
    """The TCP probe a spec's `probes.tcp` asks for, as this machine allows: tracepoint, ss or none."""
    if wanted in ("off", "ss"):
        return "none" if wanted == "off" else "ss"
    reason = tcp_probe.TracepointProbe.available()
    if reason is None:
        return "tracepoint"
    if wanted == "tracepoint":
        raise MachineError(f"the tcp:tcp_probe tracepoint cannot be used here: {reason}; "
                           'use tcp = "ss" or "auto"', field="probes.tcp")
    return "ss"


@dataclass(frozen=True)
class QueueSource:
    """Where one probed link direction's queue is read."""

    link: str  # the link's name, as bloatlab-link names its queue logs
    which: str  # "forward" or "reverse"
    kind: str  # "datapath": bloatlab-link's queue log; "tc": a kernel qdisc's counters
    ns: str | None = None  # for "tc": where the qdisc is
    iface: str | None = None


class RunProbes:
    """The probes of one run, on hosts that are up."""

    def __init__(self, experiment: Experiment, hosts: Hosts | None, raw_dir: Path, ports: dict[str, int], tcp_kind: str,
                 queues: dict[str, QueueSource]):
        self.exp = experiment
        self.hosts = hosts
        self.raw = raw_dir
        self.ports = ports  # per workload, its server's port
        self.tcp_kind = tcp_kind
        self.queue_sources = queues  # per probed direction ("s0->h2")
        self.tcp: tcp_probe.TracepointProbe | tcp_probe.SsProbe | None = None
        self.samplers: dict[str, QdiscSampler] = {}
        self._removing: threading.Thread | None = None
        # Where each probe writes as it goes: read after the run, or after its process was killed.
        self.tcp_path = raw.tcp_probe(raw_dir, tcp_kind)

    def queue_path(self, source: QueueSource) -> Path:
        return raw.queue(self.raw, source.link, source.which, kernel=source.kind == "tc")

    def start(self) -> None:
        exp = self.exp
        if self.tcp_kind == "tracepoint":
            # Senders only: a bulk flow's client sends to the server's port, a web server from it.
            self.tcp = tcp_probe.TracepointProbe(
                self.hosts.name, [], self.tcp_path,
                dports=[self.ports[w.name] for w in exp.workloads if isinstance(w, Bulk)],
                sports=[self.ports[w.name] for w in exp.workloads if isinstance(w, Web)])
        elif self.tcp_kind == "ss":
            senders = sorted({w.src for w in exp.workloads if isinstance(w, Bulk)}
                             | {w.server for w in exp.workloads if isinstance(w, Web)})
            self.tcp = tcp_probe.SsProbe(self.hosts, senders, list(self.ports.values()), self.tcp_path)
        if self.tcp is not None:
            self.tcp.start()
        for name, source in self.queue_sources.items():
            if source.kind == "tc":
                self.samplers[name] = QdiscSampler(source.ns, source.iface, self.queue_path(source)).start()

    def stop(self, errors: list[str]) -> None:
        """Stop every probe; what goes wrong is added to `errors`, and the others still stop.
        The tracepoint's tracefs instance goes in a thread, while the caller tears the network
        down: finish() waits for it."""
        if self.tcp is not None:
            tracepoint = isinstance(self.tcp, tcp_probe.TracepointProbe)
            try:
                self.tcp.stop(remove=False) if tracepoint else self.tcp.stop()
            except Exception as e:
                errors.append(f"stopping the TCP probe: {e}")
            if tracepoint:  # whatever stop met: the instance goes
                self._removing = threading.Thread(target=self._remove_instance, args=(self.tcp, errors),
                                                  name="tcp-probe-remove")
                self._removing.start()
        for name, sampler in self.samplers.items():
            try:
                sampler.stop()
            except Exception as e:
                errors.append(f"queue sampler of {name}: {e}")

    def finish(self) -> None:
        """After stop(): return once the tracefs instance is gone (its errors went to stop's list)."""
        if self._removing is not None:
            self._removing.join()
            self._removing = None

    @staticmethod
    def _remove_instance(probe: tcp_probe.TracepointProbe, errors: list[str]) -> None:
        try:
            probe.remove()
        except Exception as e:
            errors.append(f"stopping the TCP probe: {e}")

    @property
    def tcp_lost_events(self) -> int | None:
        return getattr(self.tcp, "lost_events", None)

    def cwnd_rows(self, t0_mono: float) -> list[tuple]:
        """series/cwnd.csv: each bulk flow's data connection named after its workload, and each
        web fetch's connection as WORKLOAD#N."""
        if self.tcp_path is None or not self.tcp_path.exists():
            return []
        samples = tcp_probe.read_samples(self.tcp_path, self.tcp_kind)
        rows = []
        for w in self.exp.workloads:
            port = self.ports.get(w.name)
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
        return [(s.t_s - t0_mono, flow, s.cwnd_pkts, s.ssthresh_pkts, s.srtt_ms)
                for s, flow in sorted(rows, key=lambda r: (r[1], r[0].t_s))]

    def queues(self, duration_s: float, t0_mono: float | None) -> dict[str, QueueMeasure]:
        """Each probed direction's queue over [0, duration_s]; empty numbers where nothing was recorded."""
        from bloatlab.experiment.probes import queue as queue_probe  # numpy: loaded while the run plays

        out = {}
        for name, source in self.queue_sources.items():
            trace, path = None, self.queue_path(source)
            if t0_mono and path.exists():
                read = queue_probe.from_qdisc_csv if source.kind == "tc" else queue_probe.from_qlog
                trace = read(path, t0_mono)
            if trace is None:
                out[name] = QueueMeasure(source.kind, [], QueueSummary.unmeasured())
            else:
                out[name] = QueueMeasure(source.kind, trace.rows(name, duration_s), trace.summary(duration_s))
        return out
