"""Workloads: the traffic of a run, as real tools in the hosts' namespaces.

    bulk            iperf3 TCP client in `from`, one-shot server in `to`
    udp             iperf3 UDP at a rate, likewise
    ping            ping -D at an interval
    irtt            irtt client in `from` against an irtt server in `to`: UDP round trips
    web             python's http.server (bloatlab.experiment.httpd) in `server` with one object;
                    curl in `client` fetches it
    responsiveness  the IETF responsiveness test (bloatlab.experiment.responsiveness)

Each is a Running (running.py). Times are seconds since the run's t0 on CLOCK_MONOTONIC;
ping's and irtt's wall-clock stamps are moved onto it with the offset measured at t0.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from bloatlab.errors import BloatlabError
from bloatlab.experiment.clock import Clock
from bloatlab.experiment.hosts import Hosts
from bloatlab.experiment import raw
from bloatlab.experiment.parsers import IperfResult, parse_iperf3, parse_iperf3_intervals, parse_ping_replies, parse_ping_summary
from bloatlab.experiment.record import BulkSummary, Collected, FlowSummary, IrttSummary, UdpSummary
from bloatlab.experiment.responsiveness.workload import ResponsivenessTest
from bloatlab.experiment.running import Running, last_line, route_congestion_control
from bloatlab.specs import dscp
from bloatlab.specs.model import Bulk, Experiment, Irtt, Ping, Udp, Web, Workload
from bloatlab.specs.workloads import BOTH_ENDS_CCS, SCALABLE_CCS, tcp_ends
from bloatlab.testbed import congestion, machine
from bloatlab.testbed.links.base import Ect1Flow

IPERF_INTERVAL_S = 0.1


class _Timestamped:
    """Copies a process's stdout to a file, each line prefixed with time.monotonic() at
    arrival: iperf3's server reports each interval as it ends (--forceflush), so the arrival
    time puts the interval on the run's clock."""

    def __init__(self, proc: subprocess.Popen, path: Path):
        self.path = path
        self.error: str | None = None  # why the copy stopped early (a full disk)
        self.thread = threading.Thread(target=self._copy, args=(proc,), daemon=True)
        self.thread.start()

    def _copy(self, proc: subprocess.Popen) -> None:
        try:
            with open(self.path, "w") as out:
                for line in proc.stdout:
                    out.write(f"{time.monotonic():.6f} {line.rstrip()}\n")
                    out.flush()
        except OSError as e:  # the run's collect reports it; the tool's output is drained to the end
            self.error = f"cannot write {self.path}: {e.strerror}"
            for _ in proc.stdout:
                pass


class IperfFlow(Running):
    """bulk and udp: a one-shot iperf3 server in the receiver, a JSON-reporting client."""

    def prepare(self) -> None:
        argv = ["iperf3", "-s", "-1", "-p", str(self.port), "-i", str(IPERF_INTERVAL_S), "--forceflush"]
        proc = self.net.popen(self.w.dst, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True)
        self.procs.append(proc)
        self.server_log = _Timestamped(proc, raw.server(self.raw, self.w.name))
        self.servers.append((self.w.dst, self.port, f"iperf3 server of {self.w.name}", False))

    def client_args(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        argv = ["iperf3", "-c", self.net.address(self.w.dst), "-p", str(self.port), "--json",
                "-t", str(round(self.w.window_s)), *self.client_args()]
        self._spawn(self.w.src, argv, self.raw / f"{self.w.name}.client.json")
        self.started = True

    def collect(self) -> Collected:
        got = Collected()
        if not self.started:
            return got
        server_log = getattr(self, "server_log", None)  # none when a killed run is recovered
        if server_log is not None:
            server_log.thread.join(timeout=5)
            if server_log.error:
                got.errors.append(f"{self.w.name}: {server_log.error}")
        client = self.raw / f"{self.w.name}.client.json"
        text = client.read_text(errors="replace") if client.exists() else ""
        server = raw.server(self.raw, self.w.name)
        lines = server.read_text(errors="replace").splitlines() if server.exists() else []
        got.throughput = [(t - self.clock.t0_mono, self.w.name, mbps)
                          for t, mbps in parse_iperf3_intervals(lines)]
        result: IperfResult | None = None
        try:
            result = parse_iperf3(text)
            cut_short = result.cut_short
        except BloatlabError as e:
            if not self.recovered:
                got.errors.append(f"{self.w.name}: {e}")
            cut_short = self.recovered
        goodput_mbps = result.receiver_bps / 1e6 if result is not None else None
        if cut_short:
            # The receiver's own figure is then its server's interval reports, not the 0 the
            # client prints; what only the receiver's totals say is unknown.
            rates = [mbps for *_, mbps in got.throughput]
            goodput_mbps = sum(rates) / len(rates) if rates else None
            got.warnings.append(f"{self.w.name}: iperf3 stopped before its receiver's totals came back; its "
                                f"goodput is the mean of the receiver's {len(rates)} interval reports")
        got.flows[self.w.name] = self.flow_summary(result, goodput_mbps, cut_short)
        return got

    def flow_summary(self, result: IperfResult | None, goodput_mbps: float | None, cut_short: bool) -> FlowSummary:
        """The flow's entry in summary.json. Who sent to whom comes from the spec, known even when
        the client's JSON never came (`result` None: its figures are null); cut short, what only
        the receiver's totals say is null."""
        raise NotImplementedError


def pin_both_ends(running: Running) -> None:
    """A TCP workload whose congestion control both ends must run (dctcp): each of its two hosts'
    route to the other gives every TCP connection between them that congestion control from its
    handshake on. iperf3 sets -C only once connected, and curl never: without the routes their
    SYNs would not ask for DCTCP's ECN, nor the listeners accept it."""
    ends = tcp_ends(running.w)
    if ends is not None and ends[2] in BOTH_ENDS_CCS:
        name = running.net.congestion_control(ends[2])
        route_congestion_control(running.net, ends[0], ends[1], name)
        route_congestion_control(running.net, ends[1], ends[0], name)


class BulkFlow(IperfFlow):
    w: Bulk

    def prepare(self) -> None:
        pin_both_ends(self)
        super().prepare()

    def client_args(self) -> list[str]:
        args = ["-C", self.net.congestion_control(self.w.cc), *(["--dscp", str(self.w.dscp)] if self.w.dscp else [])]
        if self.w.buffer_bytes:
            args += ["-w", str(self.w.buffer_bytes)]
        return args

    def flow_summary(self, result: IperfResult | None, goodput_mbps: float | None, cut_short: bool) -> FlowSummary:
        return BulkSummary(goodput_mbps=goodput_mbps, src=self.w.src, dst=self.w.dst, dscp=dscp.name(self.w.dscp),
                           cc=self.w.cc, sender_mbps=result.sender_bps / 1e6 if result is not None else None,
                           retransmits=result.retransmits if result is not None else None,
                           seconds=result.seconds if result is not None else None)


class UdpFlow(IperfFlow):
    w: Udp

    def client_args(self) -> list[str]:
        return ["-u", "-b", str(self.w.rate_bps), *(["--dscp", str(self.w.dscp)] if self.w.dscp else [])]

    def flow_summary(self, result: IperfResult | None, goodput_mbps: float | None, cut_short: bool) -> FlowSummary:
        receiver = result if result is not None and not cut_short else None  # its totals, as the receiver saw them
        return UdpSummary(goodput_mbps=goodput_mbps, src=self.w.src, dst=self.w.dst, dscp=dscp.name(self.w.dscp),
                          sender_mbps=result.sender_bps / 1e6 if result is not None else None,
                          lost_percent=receiver.lost_percent if receiver is not None else None,
                          jitter_ms=receiver.jitter_ms if receiver is not None else None,
                          seconds=result.seconds if result is not None else None)


class PingFlow(Running):
    w: Ping

    def start(self) -> None:
        argv = ["ping", "-D", "-n", "-i", f"{self.w.interval_ns / 1e9:g}", "-Q", str(dscp.tos(self.w.dscp, self.w.ecn)),
                self.net.address(self.w.dst)]
        self._spawn(self.w.src, argv, raw.ping(self.raw, self.w.name))
        self.started = True

    def stop(self) -> None:
        self.end()  # ping runs until told; SIGINT makes it print its statistics

    def collect(self) -> Collected:
        got = Collected()
        if not self.started:
            return got
        text = raw.ping(self.raw, self.w.name).read_text(errors="replace")
        offset = self.clock.t0_real
        replies = parse_ping_replies(text)
        got.ping = [(r.t_s - offset, self.w.name, r.rtt_ms) for r in replies if r.t_s is not None]
        try:
            summary = parse_ping_summary(text)
            # The request sent just before SIGINT may still be on its way: not lost.
            got.ping_lost = max(0, summary.transmitted - summary.received - 1)
        except BloatlabError as e:
            if not self.recovered:
                got.errors.append(f"{self.w.name}: {e}")
            # Killed before its statistics: the requests never answered below the last answer.
            seqs = {r.seq for r in replies}
            got.ping_lost = max(0, max(seqs) - len(seqs)) if seqs else 0  # seqs count from 1; a 0 is no loss
        got.per_ping[self.w.name] = ([rtt for *_, rtt in got.ping], got.ping_lost)
        return got


class IrttProbe(Running):
    """irtt: a server in `to`, a client in `from` sending a UDP request every interval for the
    workload's window; its JSON (raw/NAME.irtt.json) has every round trip with wall-clock
    stamps, and the loss each way."""

    w: Irtt

    def prepare(self) -> None:
        address = f"{self.net.address(self.w.dst)}:{self.port}"
        # -i 0: no floor on the interval (irtt's own is 10 ms); --timeout: a client that vanishes
        # is forgotten, and the longest interval a client may ask for is a quarter of it.
        timeout_s = max(30, 4 * self.w.interval_ns // 10**9 + 1)
        self._spawn(self.w.dst, ["irtt", "server", "-b", address, "-i", "0", f"--timeout={timeout_s}s"],
                    raw.server(self.raw, self.w.name))
        self.servers.append((self.w.dst, self.port, f"irtt server of {self.w.name}", True))

    def start(self) -> None:
        # Not quiet: a line per reply in NAME.client.txt, which a live view follows.
        argv = ["irtt", "client", "-i", f"{self.w.interval_ns}ns", "-d", f"{self.w.stop_ns - self.w.start_ns}ns",
                f"--dscp={dscp.tos(self.w.dscp, self.w.ecn)}", "-o", str(self.raw / f"{self.w.name}.irtt.json"),
                f"{self.net.address(self.w.dst)}:{self.port}"]
        self._spawn(self.w.src, argv, raw.irtt_client(self.raw, self.w.name))
        self.started = True

    def collect(self) -> Collected:
        got = Collected()
        if not self.started:
            return got
        path = self.raw / f"{self.w.name}.irtt.json"
        try:
            doc = json.loads(path.read_text())
            trips, stats = doc["round_trips"], doc["stats"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            got.errors.append(f"{self.w.name}: irtt wrote no results ({last_line(raw.irtt_client(self.raw, self.w.name)) or e})")
            return got
        offset = self.clock.t0_real
        try:  # what irtt's JSON holds where collect reads it; anything else is its error line
            ping = [(t["timestamps"]["client"]["send"]["wall"] / 1e9 - offset, self.w.name, t["delay"]["rtt"] / 1e6)
                    for t in trips if t.get("lost") == "false" and "rtt" in t.get("delay", {})]
            lost = int(stats.get("packets_sent", 0)) - int(stats.get("packets_received", 0))
            ipdv = stats.get("ipdv_round_trip") or {}
            jitter_ms = ipdv["mean"] / 1e6 if "mean" in ipdv else None
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            got.errors.append(f"{self.w.name}: irtt's results ({path.name}) are not what irtt writes ({e!r})")
            return got
        got.ping, got.ping_lost = ping, lost
        got.per_ping[self.w.name] = ([rtt for *_, rtt in got.ping], got.ping_lost)
        got.flows[self.w.name] = IrttSummary(
            src=self.w.src, dst=self.w.dst, dscp=dscp.name(self.w.dscp), sent=stats.get("packets_sent"),
            received=stats.get("packets_received"), loss_up_percent=stats.get("upstream_loss_percent"),
            loss_down_percent=stats.get("downstream_loss_percent"), jitter_ms=jitter_ms)
        return got


class WebFetches(Running):
    """K fetches in a row every P seconds, from a thread of ours; each fetch a curl process."""

    w: Web

    def prepare(self) -> None:
        pin_both_ends(self)
        self.docroot = self.net.state_dir / f"web-{self.w.name}"  # goes with the network, even after a crash
        self.docroot.mkdir(parents=True)
        # Incompressible and reproducible: the same page in every run.
        (self.docroot / "index.html").write_bytes(random.Random(self.w.size_bytes).randbytes(self.w.size_bytes))
        argv = [sys.executable, "-m", "bloatlab.experiment.httpd", self.net.address(self.w.server), str(self.port),
                str(self.docroot), self.net.congestion_control(self.w.cc)]
        self._spawn(self.w.server, argv, self.raw / f"{self.w.name}.server.log")
        self.servers.append((self.w.server, self.port, f"web server of {self.w.name}", False))
        self.failures: list[str] = []
        self.halt = threading.Event()
        self.current: subprocess.Popen | None = None
        self.thread = threading.Thread(target=self._loop, name=f"web {self.w.name}", daemon=True)

    def start(self) -> None:
        self.started = True
        self.thread.start()

    def stop(self) -> None:
        self.halt.set()

    def wait(self, deadline: float) -> None:
        # The server never ends by itself: waiting for it cost every run the whole grace
        # period. Only the fetch in flight is worth waiting for.
        if self.started:
            self.thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        url = f"http://{self.w.server}:{self.port}/index.html"
        argv = ["curl", "-s", "-o", "/dev/null", "--max-time", f"{self.w.timeout_ns / 1e9:g}",
                "-w", "%{time_total} %{http_code} %{size_download}\\n", url]
        period = self.w.every_ns / 1e9
        first = self.clock.t0_mono + self.w.start_ns / 1e9
        k = 0
        while not self.halt.is_set():
            for _ in range(self.w.count):
                if self.halt.is_set() or self.clock.since_t0() >= self.w.stop_ns / 1e9:
                    return
                self._fetch(argv)
            k = max(k + 1, int((time.monotonic() - first) / period) + 1)  # skip periods already past
            if self.halt.wait(max(0.0, first + k * period - time.monotonic())):
                return

    def _fetch(self, argv: list[str]) -> None:
        t_start = self.clock.since_t0()
        proc = self.net.popen(self.w.client, argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.current = proc
        out = proc.communicate()[0]
        self.current = None
        parts = out.split()
        try:
            seconds, code, size = float(parts[0]), int(parts[1]), int(parts[2])
        except (IndexError, ValueError):
            seconds, code, size = self.clock.since_t0() - t_start, 0, 0
        ok = proc.returncode == 0 and code == 200 and size == self.w.size_bytes
        if not ok and not self.halt.is_set():
            self.failures.append(f"fetch at {t_start:.1f} s: curl exit {proc.returncode}, HTTP {code}, {size} bytes")
        if ok or not self.halt.is_set():  # a fetch cut short by the end of the run is not a result
            # Kept as it comes: a run killed outright still has its fetches.
            with open(self._fetches_path(), "a") as f:
                f.write(f"{t_start:.6f} {seconds:.6f} {int(ok)}\n")

    def _fetches_path(self) -> Path:
        return raw.fetches(self.raw, self.w.name)

    def end(self) -> None:
        if hasattr(self, "halt"):
            self.halt.set()
            proc = self.current
            if proc is not None and proc.poll() is None:
                proc.terminate()
            if self.thread.is_alive():
                self.thread.join(timeout=self.w.timeout_ns / 1e9 + 5)
        super().end()
        if hasattr(self, "docroot"):
            shutil.rmtree(self.docroot, ignore_errors=True)

    def collect(self) -> Collected:
        got = Collected()
        if self.started:
            path = self._fetches_path()
            for line in path.read_text().splitlines() if path.exists() else []:
                try:
                    t, s, ok = line.split()
                    got.fetch.append((float(t), float(s), self.w.name, int(ok)))
                except ValueError:  # a line a kill cut short: the last
                    break
            if getattr(self, "failures", None):
                got.warnings.append(f"{self.w.name}: {len(self.failures)} failed fetches, first: {self.failures[0]}")
        return got


# The tools each kind runs (testbed.machine.TOOLS knows their packages), checked before a run builds anything.
TOOLS_OF = {"bulk": ("iperf3",), "udp": ("iperf3",), "ping": ("ping",), "irtt": ("irtt",), "web": ("curl",),
            "responsiveness": ("nghttpd", "openssl")}

RUNNERS = {"bulk": BulkFlow, "udp": UdpFlow, "ping": PingFlow, "irtt": IrttProbe, "web": WebFetches,
           "responsiveness": ResponsivenessTest}


def running(workload: Workload, net: Hosts, raw_dir: Path, clock: Clock, port: int) -> Running:
    return RUNNERS[workload.kind](workload, net, raw_dir, clock, port)


def check_tools(workloads: list[Workload]) -> None:
    """Every tool the workloads run is installed; else one error naming the packages."""
    machine.check_tools([tool for w in workloads for tool in TOOLS_OF[w.kind]], field="workloads")


def congestion_controls(workloads: list[Workload]) -> list[str]:
    """The congestion controls the TCP workloads ask for, by the spec's names: what their
    network provides (a BPF stand-in for one the kernel lacks) before its hosts are built."""
    return list(dict.fromkeys(ends[2] for w in workloads if (ends := tcp_ends(w)) is not None and ends[2]))


def check_congestion_controls(workloads: list[Workload]) -> None:
    """Every TCP workload's congestion control must be one this kernel has, or one bloatlab can
    stand in for (dctcp); else one error naming the workload's cc and the fix."""
    for w in workloads:
        ends = tcp_ends(w)
        if ends is not None and ends[2]:
            congestion.check(ends[2], f"workloads[{w.index}].cc")


def ect1_flows(workloads: list[Workload]) -> list[Ect1Flow]:
    """The bulk flows that ask for ECT(1) (`ecn = "ect1"`): the datapath marks them where they
    enter it, since this kernel's TCP sends ECT(0) for every ECN flow."""
    return [Ect1Flow(w.src, w.dst, f"workloads[{w.index}].ecn") for w in workloads
            if isinstance(w, Bulk) and w.ecn == "ect1"]


def ecn_origins(exp: Experiment) -> dict[str, str]:
    """How each workload's packets get their ECN codepoint, for run.json's flows: the codepoint
    they cross the network with (before any queue marks CE), and who sets it."""
    out: dict[str, str] = {}
    simulated = exp.backend == "ns3"
    rewritten = {(f.src, f.dst) for f in ect1_flows(list(exp.workloads))}
    for w in exp.workloads:
        if isinstance(w, (Ping, Irtt)):
            tool = "ping -Q" if isinstance(w, Ping) else "irtt --dscp"
            out[w.name] = w.ecn if w.ecn == "not-ect" else f"{w.ecn} ({tool})"
        elif (ends := tcp_ends(w)) is not None:
            src, dst, cc = ends
            cc = cc or exp.topology.host_cc(src)
            if cc not in SCALABLE_CCS:
                out[w.name] = "not-ect"
            elif simulated:
                out[w.name] = "ect1 (ns-3's TcpDctcp)"
            elif (src, dst) in rewritten:
                index, which = exp.topology.first_hop(src)
                out[w.name] = (f"ect1 (set where it enters the datapath, on "
                               f"{exp.topology.links[index].direction_name(which)}; the kernel sends ect0)")
            else:
                out[w.name] = "ect0 (the kernel's)"
        else:
            out[w.name] = "not-ect"
    return out
