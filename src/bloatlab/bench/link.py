"""`bloatlab bench link`: the fidelity benchmark of an emulated link, on the user's machine.

Two hosts joined by one link; for each configured rate and delay, on the userspace datapath
and (where the kernel can serve it) on the kernel path as the same-run baseline:
  - min RTT of an idle ping against the configured path delay plus its own serialisation;
  - TCP goodput (iperf3, cubic) against the link's payload capacity: the payload of the
    segments the receiver got, each counted once, as the sender's TCP counts them acknowledged
    (cumulatively or by SACK: tcpi_delivered), over a window after the slow start;
  - peak ping RTT under that saturating flow against base + queue bytes * 8 / rate;
  - UDP at 1.1x the rate: what the receiver got;
  - the datapath's departure lateness, its CPU share, and drops nobody asked for;
  - the two backends against each other on the same link: goodput, and the peak RTT where a
    full queue lasts 100 ms or more. A kernel link queues between the hosts, as the userspace
    one does: each end has a veth into the datapath namespace, where a bridge joins them.
  - unlimited and without delay, a plain veth pair between the hosts ("veth") as well: the
    throughput target is a share of it, in alternating rounds.
  - with --pcap, each userspace case again with both directions captured ("pcap"): the same
    targets, the goodput against the uncaptured case's, and every packet in the files.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bloatlab.experiment.parsers import IperfResult, parse_iperf3, parse_ping_replies, parse_ping_summary, parse_ss_tin
from bloatlab.experiment.running import wait_listening
from bloatlab.progress import Progress, ticking
from bloatlab.specs.model import PCAP_SNAPLEN, DirectionSpec, HostSpec, LinkSpec, QueueSpec, SwitchSpec, Topology
from bloatlab.specs.units import format_duration_ns, format_rate
from bloatlab.testbed import capabilities
from bloatlab.testbed import netns
from bloatlab.testbed.diagnostics import batching_share, worker_shares
from bloatlab.testbed.links.base import Captures
from bloatlab.testbed.machine import cpu_pressure_us, pressure_share
from bloatlab.testbed.network import Network
from bloatlab.version import __version__

QUEUE_PKTS = 100
FRAME_BYTES = 1514
TCP_PAYLOAD = 1448  # MSS with TCP timestamps on a 1500-byte MTU
UDP_PAYLOAD = 1472  # fills a 1514-byte frame
PING_FRAME = 98  # 56 data bytes + ICMP 8 + IPv4 20 + Ethernet 14
IPERF_PORT = 5201
# iperf3 runs this much longer than warm-up + measuring window, so the window's last sample
# is taken while the flow still runs.
IPERF_TAIL_S = 1.0
# Captures never reach their limit in a case: the cost of writing is measured over all of it.
PCAP_BENCH_LIMIT = 1 << 40


@dataclass(frozen=True)
class Case:
    # "userspace" | "kernel" | "veth" (a plain veth pair, no link between) | "pcap" (userspace,
    # both directions captured)
    backend: str
    rate_bps: int | None
    delay_ns: int  # each way
    round: int | None = None  # which of the alternating runs of a repeated pair
    udp: bool = True  # a shaped case also sends UDP at 1.1 x its rate
    # cs244's h1 - s0 - h2 rather than one link: both links at the case's rate and delay
    switched: bool = False
    # one link measured beside a switched case (bench machine's switched targets), not one of
    # the shaped rates
    beside: bool = False

    @property
    def label(self) -> str:
        rate = format_rate(self.rate_bps) + (f" #{self.round}" if self.round else "")
        return f"{self.backend:9} {rate:>12} {format_duration_ns(self.delay_ns):>6}" + (" via s0" if self.switched else "")


@dataclass(frozen=True)
class DeliveredSample:
    """The TCP sender's count of payload delivered, at one moment."""

    t_s: float  # CLOCK_MONOTONIC, the middle of the `ss` call that read it
    read_s: float  # how long that call took: the uncertainty of t_s
    delivered_bytes: int  # tcpi_delivered (segments acked or SACKed) x the sender's MSS


@dataclass
class CaseResult:
    case: Case
    skipped: str | None = None
    queue_pkts: int | None = None
    min_rtt_ms: float | None = None
    expected_min_rtt_ms: float | None = None
    tcp_goodput_mbps: float | None = None
    tcp_capacity_mbps: float | None = None
    # The goodput window's raw samples: CLOCK_MONOTONIC s and delivered payload bytes.
    tcp_window: list[DeliveredSample] = field(default_factory=list)
    tcp_retransmits: int | None = None
    peak_rtt_ms: float | None = None
    # p99 of the pings under that flow: the peak without the one ping a stall of the machine delayed.
    loaded_rtt_p99_ms: float | None = None
    # p99 of the pings behind that link's UDP overload (1.1 x its rate), whose queue stays full.
    full_queue_rtt_p99_ms: float | None = None
    expected_peak_rtt_ms: float | None = None
    udp_received_mbps: float | None = None
    udp_capacity_mbps: float | None = None
    # Datagrams h2's socket dropped because its iperf3 did not read them in time: the host's
    # CPU, not the link (RcvbufErrors in h2's /proc/net/snmp over the UDP test).
    udp_rcvbuf_drops: int | None = None
    depart_error_p50_us: float | None = None
    depart_error_p99_us: float | None = None
    datapath_cpu_pct: float | None = None
    # Each datapath worker over the TCP flow, by name ("worker1"): % of one core in its own code
    # (user) and in the kernel (the frames' copies in and out, and the receiving host's stack,
    # which a veth runs on the sending thread), with the directions it serves. The busiest one is
    # what bounds a CPU-bound flow (docs/datapath.md).
    datapath_workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The whole machine over the TCP flow (a loaded timer sample included): the share of all its
    # CPUs' time not idle. Near 100, every thread (link, host or iperf3) waits for a CPU.
    machine_busy_pct: float | None = None
    # The share of the TCP and UDP tests in which some task waited for a CPU (the kernel's CPU
    # pressure), the span batching_pct covers.
    cpu_pressure_pct: float | None = None
    # The share of the datapath's report periods, from the TCP flow on, in which its threads
    # batched departures to leave the hosts CPU (the machine's CPU pressure; docs/datapath.md).
    batching_pct: float | None = None
    unintended_drops: int | None = None
    drops: dict[str, int] = field(default_factory=dict)
    # A "pcap" case's captures per direction: the departures counted, and each file's counts
    # (written, cut, lost, bytes) as the datapath left them.
    capture: dict[str, Any] = field(default_factory=dict)


def tcp_capacity_mbps(rate_bps: int) -> float:
    """The TCP payload a link of `rate_bps` carries: full frames of one MSS each."""
    return rate_bps * TCP_PAYLOAD / FRAME_BYTES / 1e6


def queue_packets(case: Case) -> int:
    """100 packets, or one bandwidth-delay product where that is more: with less than a BDP
    of buffer, Reno and Cubic cannot keep a long fat pipe full, whatever the emulator."""
    if not case.rate_bps:
        return QUEUE_PKTS
    bdp_bytes = case.rate_bps / 8 * (2 * case.delay_ns / 1e9)
    return max(QUEUE_PKTS, math.ceil(bdp_bytes / FRAME_BYTES))


def warmup_s(case: Case) -> int:
    """Seconds of iperf3 left out of goodput: slow start overshoots the queue and the loss
    recovery after it lasts several queue-drain times (about 7 s at 1.5 Mbit/s)."""
    if not case.rate_bps:
        return 1
    drain_s = queue_packets(case) * FRAME_BYTES * 8 / case.rate_bps
    return min(8, max(1, math.ceil(10 * drain_s)))


# Per-namespace TCP buffer limits for the bench hosts: at 1 Gbit/s and 20 ms the BDP plus a
# BDP of queue is 5 MB, over the kernel's default 4 MB send buffer cap.
TCP_BUFFERS = {"net.ipv4.tcp_rmem": "4096 131072 67108864", "net.ipv4.tcp_wmem": "4096 16384 67108864"}


def two_hosts(case: Case) -> Topology:
    d = DirectionSpec(rate_bps=case.rate_bps, delay_ns=case.delay_ns, queue=QueueSpec(packets=queue_packets(case)))
    if case.switched:
        # cs244's dumbbell, every link the case's: on the userspace backend s0 is served inside the
        # datapath; on the kernel's it is a namespace with a bridge, and each link a bridge in the
        # datapath namespace (with htb at the rate), as a testbed of Linux bridges would be.
        links = [LinkSpec(name=f"{a}-{b}", ends=(a, b), forward=d, reverse=d, backend=case.backend)
                 for a, b in (("h1", "s0"), ("s0", "h2"))]
        return Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={"s0": SwitchSpec("s0")},
                        links=links)
    # A kernel link queues between the hosts, as the userspace one does, so both fill their queue
    # the same way; "veth" is one veth pair between the hosts (its root pfifo is never full).
    plain = case.backend == "veth"
    backend = {"veth": "kernel", "pcap": "userspace"}.get(case.backend, case.backend)
    link = LinkSpec(name="h1-h2", ends=("h1", "h2"), forward=d, reverse=d,
                    backend=backend, queue_at="sender" if plain else "link")
    return Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={}, links=[link])


def machine_cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat; idle and iowait are idle,
    steal (time the hypervisor gave to others) counts as neither."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]
    total = sum(fields) - fields[7]
    return total - idle, total


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _interface_drops(net: Network) -> int:
    """rx/tx drops the kernel counted on every interface of the network: none are intended."""
    total = 0
    namespaces = [net.namespace(h) for h in net.topology.hosts]
    if netns.exists(net.datapath_namespace):
        namespaces.append(net.datapath_namespace)
    for ns in namespaces:
        out = netns.ip(ns, "-s", "-j", "link", "show")
        for link in json.loads(out or "[]"):
            stats = link.get("stats64", {})
            total += stats.get("rx", {}).get("dropped", 0) + stats.get("tx", {}).get("dropped", 0)
    return total


def _iperf(net: Network, args: list[str], timeout_s: float,
           during: Callable[[float], None] | None = None) -> tuple[IperfResult, dict[str, Any]]:
    """Runs an iperf3 client in h1 against a one-shot server in h2; returns the client's
    result and the server's own JSON report (its intervals are what the receiver got).
    `during(t_start)` runs while the client does; t_start is when it was started (monotonic)."""
    server = net.popen("h2", ["iperf3", "-s", "-1", "-J", "-p", str(IPERF_PORT)], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    client = None
    try:
        wait_listening(net, "h2", IPERF_PORT, "iperf3 server")
        t_start = time.monotonic()
        client = net.popen("h1", ["iperf3", "-c", net.address("h2"), "-p", str(IPERF_PORT), "-J", *args],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if during is not None:
            during(t_start)
        result = parse_iperf3(client.communicate(timeout=timeout_s)[0])
        server_out = server.communicate(timeout=10)[0]
        return result, json.loads(server_out or "{}")
    finally:
        for proc in (client, server):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=5)


def delivered_bytes(ss_text: str, port: int) -> int | None:
    """Payload the sender of the busiest connection to `port` has had acknowledged, cumulatively
    or by SACK (`ss -tin`'s delivered, in segments, times its mss).

    The receiver's own counts lag behind: iperf3 reads and tcpi_bytes_received advance only
    with in-order data, so after a loss they stall for a round trip (most of a second at
    1.5 Mbit/s behind a full queue) and then jump; a window that starts or ends in such a
    stall reads 10-15% high or low. `delivered` counts each segment once, when it arrives."""
    best = None
    for sock in parse_ss_tin(ss_text):
        if sock.dport != port:
            continue
        segments, mss = sock.info.get("delivered", ""), sock.info.get("mss", "")
        if segments.isdigit() and mss.isdigit():
            n = int(segments) * int(mss)
            best = n if best is None else max(best, n)
    return best


def _sample_delivered(net: Network, host: str, port: int) -> DeliveredSample | None:
    argv = ["ss", "-tinH", "state", "established", f"dport = :{port}"]
    t0 = time.monotonic()
    out = net.exec(host, argv).stdout
    t1 = time.monotonic()
    n = delivered_bytes(out, port)
    return None if n is None else DeliveredSample((t0 + t1) / 2, t1 - t0, n)


def received_mbps(server_report: dict[str, Any], after_s: float) -> float | None:
    """UDP throughput as the receiver counted it, over its whole (1 s) intervals that start
    after `after_s` (datagrams need no reassembly, so the receiver's reads follow the link).
    The last, partial interval is left out: it runs on past the last datagram until the
    test's end reaches the server (at 10 Mbit/s and 10 ms, it read 3% low)."""
    sums = [i.get("sum", {}) for i in server_report.get("intervals", [])]
    kept = [x for x in sums if x.get("start", 0.0) >= after_s - 1e-3 and not x.get("omitted")
            and x.get("seconds", 0.0) >= 0.999]
    seconds = sum(x.get("seconds", 0.0) for x in kept)
    return sum(x.get("bytes", 0) for x in kept) * 8 / seconds / 1e6 if seconds > 0 else None


def goodput_mbps(window: list[DeliveredSample]) -> float | None:
    """Mbit/s of payload delivered between the first and the last sample."""
    if len(window) < 2 or window[-1].t_s <= window[0].t_s:
        return None
    a, b = window[0], window[-1]
    return (b.delivered_bytes - a.delivered_bytes) * 8 / (b.t_s - a.t_s) / 1e6


def udp_rcvbuf_errors(net: Network, host: str) -> int | None:
    """The host's count of UDP datagrams dropped for a full socket buffer (/proc/net/snmp)."""
    out = net.exec(host, ["cat", "/proc/net/snmp"]).stdout
    return parse_snmp_counter(out, "Udp", "RcvbufErrors")


def parse_snmp_counter(snmp: str, group: str, name: str) -> int | None:
    """One counter of /proc/net/snmp: each group is a line of names, then a line of values."""
    lines = [line.split() for line in snmp.splitlines() if line.startswith(f"{group}:")]
    if len(lines) < 2 or name not in lines[0]:
        return None
    return int(lines[1][lines[0].index(name)])


def run_case(case: Case, duration_s: float, name: str, out_dir: Path) -> CaseResult:
    res = CaseResult(case, queue_pkts=queue_packets(case))
    rate = case.rate_bps
    ser_ms = (lambda nbytes: nbytes * 8 / rate * 1e3) if rate else (lambda nbytes: 0.0)
    captures = None
    if case.backend == "pcap":  # the files only count: they go once measured
        captures = Captures(out_dir / f"pcap-{name}", frozenset({"h1->h2", "h2->h1"}), PCAP_SNAPLEN, PCAP_BENCH_LIMIT)
    try:
        with Network(two_hosts(case), name, captures=captures) as net:
            _measure(net, case, res, duration_s, ser_ms)
        if captures is not None:
            final = net.final_datapath_stats
            link = final.links.get("h1-h2") if final is not None else None
            directions = (("forward", link.forward if link else None), ("reverse", link.reverse if link else None))
            res.capture = {which: {"sent": d.departures if d else None, **(d.capture.to_dict() if d and d.capture else {})}
                           for which, d in directions}
    finally:
        if captures is not None:
            shutil.rmtree(captures.dir, ignore_errors=True)
    return res


def _measure(net: Network, case: Case, res: CaseResult, duration_s: float,
             ser_ms: Callable[[float], float]) -> None:
    rate = case.rate_bps
    dst = net.address("h2")
    for host in net.topology.hosts:
        for key, value in TCP_BUFFERS.items():
            net.exec(host, ["sysctl", "-qw", f"{key}={value}"], check=True)
    net.exec("h1", ["ping", "-c", "2", "-i", "0.2", "-W", "2", dst])  # ARP
    # 1. Idle RTT: the path delay twice, plus the ping's own serialisation each way.
    idle = net.exec("h1", ["ping", "-c", "30", "-i", "0.02", dst]).stdout
    res.min_rtt_ms = parse_ping_summary(idle).min_ms
    res.expected_min_rtt_ms = 2 * case.delay_ns / 1e6 + 2 * ser_ms(PING_FRAME)
    # 2. TCP with pings riding along: goodput over `duration_s` after the warm-up.
    dp = net.datapath
    cpu0, t0 = (cpu_seconds(dp.pid), time.monotonic()) if dp else (0.0, 0.0)
    stats0 = dp.stats() if dp else None
    machine0 = machine_cpu_ticks()
    pressure0 = (cpu_pressure_us(), time.monotonic())
    interval = "0.1" if (rate or 10**12) <= 20_000_000 else "0.02"
    warm = warmup_s(case)
    run_s = math.ceil(warm + duration_s + IPERF_TAIL_S)  # iperf3 -t takes whole seconds
    pinger = net.popen("h1", ["ping", "-i", interval, "-w", str(run_s), dst],
                       stdout=subprocess.PIPE, text=True)

    def sample_window(t_start: float) -> None:
        for at in (t_start + warm, t_start + warm + duration_s):
            time.sleep(max(0.0, at - time.monotonic()))
            if (sample := _sample_delivered(net, "h1", IPERF_PORT)) is not None:
                res.tcp_window.append(sample)

    tcp, _ = _iperf(net, ["-t", str(run_s), "-C", "cubic"], timeout_s=run_s + 30, during=sample_window)
    loaded = parse_ping_replies(pinger.communicate(timeout=run_s + 10)[0])
    busy, total = (b - a for a, b in zip(machine0, machine_cpu_ticks()))
    res.machine_busy_pct = 100 * busy / total if total else None
    if dp:
        res.datapath_cpu_pct = 100 * (cpu_seconds(dp.pid) - cpu0) / (time.monotonic() - t0)
        res.datapath_workers = {name: asdict(share) for name, share in worker_shares(stats0, dp.stats()).items()}
    res.tcp_goodput_mbps = goodput_mbps(res.tcp_window)
    res.tcp_retransmits = tcp.retransmits
    if rate:
        res.tcp_capacity_mbps = tcp_capacity_mbps(rate)
        # A ping waits behind a full queue and the frame on the wire.
        res.expected_peak_rtt_ms = res.min_rtt_ms + ser_ms(queue_packets(case) * FRAME_BYTES)
    res.peak_rtt_ms = max((r.rtt_ms for r in loaded), default=None)
    if loaded:
        rtts = sorted(r.rtt_ms for r in loaded)
        res.loaded_rtt_p99_ms = rtts[round(0.99 * (len(rtts) - 1))]
    # 3. UDP just above the rate: the receiver should get the link's payload capacity, and the
    # queue stays full, so pings from the second second on wait behind all of it.
    if rate and case.udp:
        before = udp_rcvbuf_errors(net, "h2")
        pinger = net.popen("h1", ["ping", "-i", interval, "-w", "5", dst], stdout=subprocess.PIPE, text=True)
        _, udp_server = _iperf(net, ["-u", "-b", str(int(rate * 1.1)), "-l", str(UDP_PAYLOAD), "-t", "4"],
                               timeout_s=40)
        full = sorted(r.rtt_ms for r in parse_ping_replies(pinger.communicate(timeout=15)[0])
                      if r.seq * float(interval) >= 1.5)
        if full:
            res.full_queue_rtt_p99_ms = full[round(0.99 * (len(full) - 1))]
        after = udp_rcvbuf_errors(net, "h2")
        res.udp_rcvbuf_drops = after - before if None not in (before, after) else None
        res.udp_received_mbps = received_mbps(udp_server, after_s=1)
        res.udp_capacity_mbps = rate * UDP_PAYLOAD / FRAME_BYTES / 1e6
    # 4. What the datapath and the machine saw.
    if (pressure := pressure_share(pressure0, (cpu_pressure_us(), time.monotonic()))) is not None:
        res.cpu_pressure_pct = 100 * pressure
    unintended = _interface_drops(net)
    if dp:
        whole = dp.stats()
        if (share := batching_share(stats0, whole)) is not None:
            res.batching_pct = 100 * share
        # Lateness where the flow's frames leave the datapath, toward h2 (its last link's forward
        # direction: h1-h2's, or through s0 s0-h2's); drops on every direction.
        fwd = whole.links[net.topology.links[-1].name].forward.depart_error_ns
        res.depart_error_p50_us = fwd.p50 / 1e3
        res.depart_error_p99_us = fwd.p99 / 1e3
        for pair in whole.links.values():
            for d in (pair.forward, pair.reverse):
                for reason, n in d.drops.items():
                    res.drops[reason] = res.drops.get(reason, 0) + n
        unintended += sum(res.drops.get(k, 0) for k in ("rx_overrun", "tx_error", "oversize", "runt"))
    res.unintended_drops = unintended


def cases(rates: list[int | None], delays: list[int], kernel_qdiscs: dict[str, bool],
          rounds: int = 1, pcap: bool = False) -> list[tuple[Case, str | None]]:
    """Every userspace case, each followed by the same link on the kernel backend (or why there
    is none); unlimited without delay, then by a plain veth pair too.

    That last trio runs `rounds` times, alternating: its throughput is CPU-bound, and a single
    run of the plain veth varied from 5.1 to 8.0 Gbit/s on a shared 2-core VM, so one run of
    each could not tell whether the datapath keeps half of it."""
    out: list[tuple[Case, str | None]] = []
    for delay in delays:
        for rate in rates:
            why = None
            if delay and not kernel_qdiscs.get("netem"):
                why = "this kernel has no netem"
            elif rate and not kernel_qdiscs.get("htb"):
                why = "this kernel has no htb"
            trio = rate is None and delay == 0
            repeat = rounds if trio else 1
            for n in range(1, repeat + 1):
                tag = n if repeat > 1 else None
                out.append((Case("userspace", rate, delay, tag), None))
                if pcap:
                    out.append((Case("pcap", rate, delay, tag), None))
                out.append((Case("kernel", rate, delay, tag), why))
                if trio:
                    out.append((Case("veth", rate, delay, tag), None))
    return out


def unlimited_ratios(results: list[CaseResult], backend: str, baseline: str) -> list[float]:
    """`backend`'s goodput over `baseline`'s, per round, unlimited and without delay."""
    def runs(which: str) -> dict[int | None, float]:
        return {r.case.round: r.tcp_goodput_mbps for r in results
                if not r.skipped and r.case.backend == which and r.case.rate_bps is None
                and r.case.delay_ns == 0 and r.tcp_goodput_mbps}
    num, den = runs(backend), runs(baseline)
    return [num[n] / den[n] for n in num if n in den]


def _median_of(ratios: list[float]) -> str:
    mid = f"{statistics.median(ratios):.0%}"
    return mid if len(ratios) == 1 else f"{mid} (median of {len(ratios)} rounds: {' '.join(f'{x:.0%}' for x in ratios)})"


def _share(v: float | None, of: float | None) -> float | None:
    """v as a percentage of `of`; None when either is unknown."""
    return None if v is None or not of else 100 * v / of


def _fmt(v: float | None, spec: str = ".2f") -> str:
    """v formatted by spec; an unknown value as a dash in the same width, so columns align."""
    if v is None:
        width = spec.split(".")[0]
        return "-".rjust(int(width) if width.isdigit() else 0)
    return format(v, spec)


LEGEND = """\
TCP Mbit/s: goodput, the payload of the segments that got through, each counted once when the
  sender's TCP saw it acknowledged (tcpi_delivered x mss), over DURATION after the warm-up;
  of cap.: against the payload capacity rate x 1448/1514; the pings riding along (98 bytes
  10 times a second; 50 above 20 Mbit/s) take 0.5% of it at 1.5 Mbit/s.
min RTT: of 30 idle pings; expect: twice the delay plus a 98-byte frame's time on the wire each way.
peak RTT: of pings under that TCP flow; expect: min RTT + a full queue of 1514-byte frames / rate.
UDP Mbit/s: what the receiver got of 1.1 x the rate; late: datapath departures after their due time.
backend: userspace is bloatlab-link; kernel the same link in tc, on a bridge between the same veths;
  veth a plain veth pair between the hosts, the baseline of the unlimited target; pcap bloatlab-link
  capturing both directions (128-byte snap length); #N: the round."""


def render(results: list[CaseResult]) -> str:
    head = (f"{'backend':9} {'rate':>12} {'delay':>6} {'queue':>5} | {'TCP Mbit/s':>10} {'of cap.':>7} | {'min RTT':>8} "
            f"{'expect':>8} | {'peak RTT':>8} {'expect':>8} | {'UDP Mbit/s':>10} {'of cap.':>7} | "
            f"{'late p50':>8} {'p99 us':>7} | {'CPU %':>6} | {'unint.':>6}")
    lines = [head, "-" * len(head)]
    for r in results:
        if r.skipped:
            lines.append(f"{r.case.label} {'':>5} | skipped: {r.skipped}")
            continue
        cap = _share(r.tcp_goodput_mbps, r.tcp_capacity_mbps)
        ucap = _share(r.udp_received_mbps, r.udp_capacity_mbps)
        lines.append(
            f"{r.case.label} {r.queue_pkts:>5} | {_fmt(r.tcp_goodput_mbps, '10.2f')} {_fmt(cap, '6.1f')}% | "
            f"{_fmt(r.min_rtt_ms, '8.3f')} {_fmt(r.expected_min_rtt_ms, '8.3f')} | {_fmt(r.peak_rtt_ms, '8.2f')} "
            f"{_fmt(r.expected_peak_rtt_ms, '8.2f')} | {_fmt(r.udp_received_mbps, '10.2f')} {_fmt(ucap, '6.1f')}% | "
            f"{_fmt(r.depart_error_p50_us, '8.1f')} {_fmt(r.depart_error_p99_us, '7.1f')} | "
            f"{_fmt(r.datapath_cpu_pct, '6.1f')} | {r.unintended_drops if r.unintended_drops is not None else '-':>6}")
    for r in results:
        if r.udp_rcvbuf_drops:
            lines.append(f"  {r.case.label.strip()}: h2's UDP socket dropped {r.udp_rcvbuf_drops} datagrams its "
                         "iperf3 did not read in time (the host's CPU, not the link)")
    return "\n".join(lines) + "\n\n" + LEGEND


def verdicts(results: list[CaseResult]) -> list[str]:
    """The issue's targets, checked on this run's figures."""
    out = []
    by = {(r.case.backend, r.case.rate_bps, r.case.delay_ns): r for r in results if not r.skipped}
    for r in results:
        if r.skipped or r.case.backend not in ("userspace", "pcap"):
            continue
        tag = r.case.label.strip()
        if r.case.backend == "pcap":
            out += capture_verdicts(r, by.get(("userspace", r.case.rate_bps, r.case.delay_ns)), tag)
        if r.tcp_capacity_mbps:
            pct = _share(r.tcp_goodput_mbps, r.tcp_capacity_mbps)
            if pct is None:
                out.append(f"MISS TCP goodput not measured: {tag}")
            else:
                out.append(f"{'ok  ' if abs(pct - 100) <= 3 else 'MISS'} TCP goodput {pct:.1f}% of capacity "
                           f"(97-103%): {tag}")
        if r.min_rtt_ms is not None and r.expected_min_rtt_ms is not None:
            err = r.min_rtt_ms - r.expected_min_rtt_ms
            out.append(f"{'ok  ' if abs(err) <= 0.1 else 'MISS'} min RTT {err:+.3f} ms from the path delay (<= 0.1 ms): {tag}")
        if r.expected_peak_rtt_ms and r.peak_rtt_ms and r.case.rate_bps and r.case.rate_bps <= 10_000_000:
            err = r.peak_rtt_ms / r.expected_peak_rtt_ms - 1
            out.append(f"{'ok  ' if abs(err) <= 0.05 else 'MISS'} peak RTT {err:+.1%} from base + queue/rate (5%): {tag}")
        if r.case.rate_bps == 100_000_000 and r.depart_error_p99_us is not None:
            out.append(f"{'ok  ' if r.depart_error_p99_us <= 50 else 'MISS'} departure lateness p99 "
                       f"{r.depart_error_p99_us:.0f} us (<= 50 us): {tag}")
        if r.unintended_drops is not None and r.case.rate_bps:
            out.append(f"{'ok  ' if r.unintended_drops == 0 else 'MISS'} {r.unintended_drops} unintended drops: {tag}")
        k = by.get(("kernel", r.case.rate_bps, r.case.delay_ns))  # the same link on the kernel path
        if k and r.case.rate_bps:
            out += agreement(r, k, tag)
    if ratios := unlimited_ratios(results, "userspace", "veth"):
        ok = statistics.median(ratios) >= 0.5
        out.append(f"{'ok  ' if ok else 'MISS'} unlimited: {_median_of(ratios)} of the plain veth's goodput (>= 50%)")
        # Context, not a target: what forwarding through the link's two extra veth hops costs
        # the kernel itself, with no userspace in the way.
        if kernel := unlimited_ratios(results, "kernel", "veth"):
            out.append(f"note unlimited: the kernel backend's bridge between the same veths keeps {_median_of(kernel)} "
                       f"of it; bloatlab-link {_median_of(unlimited_ratios(results, 'userspace', 'kernel'))} of the bridge's")
    return out


def capture_verdicts(p: CaseResult, u: CaseResult | None, tag: str) -> list[str]:
    """A captured link: every departure in its file, none lost or cut; its goodput against the
    same link uncaptured in this run (3%, as the backends against each other)."""
    out = []
    for which, c in p.capture.items():
        files = c.get("departures", {}), c.get("drops", {})
        whole = c.get("sent") is not None and files[0].get("written") == c["sent"] and not c.get("error") \
            and not any(f.get("lost") or f.get("cut") for f in files)
        out.append(f"{'ok  ' if whole else 'MISS'} capture {which}: {files[0].get('written')} of {c.get('sent')} "
                   f"departures written, {sum(f.get('lost') or 0 for f in files)} lost, "
                   f"{sum(f.get('cut') or 0 for f in files)} cut, {(files[0].get('bytes') or 0) / 1e6:.0f} MB: {tag}")
    if u is not None and u.tcp_goodput_mbps and p.tcp_goodput_mbps:
        diff = p.tcp_goodput_mbps / u.tcp_goodput_mbps - 1
        out.append(f"{'ok  ' if diff >= -0.03 else 'MISS'} TCP goodput {diff:+.1%} from the same link uncaptured "
                   f"({u.tcp_goodput_mbps:.2f} Mbit/s; no lower than 3% below): {tag}")
    return out


def agreement(u: CaseResult, k: CaseResult, tag: str) -> list[str]:
    """The two backends on one link: the same goodput within 3%, and (where a full queue is
    100 ms or more) the same peak RTT within 5%. The peak is one ping's, and a ping delayed by
    a millisecond of scheduling set it 9% high on a 12 ms queue at 100 Mbit/s (13.3 ms, the
    kernel's, where both the other backend and the physics gave 12.1)."""
    out = []
    if u.tcp_goodput_mbps and k.tcp_goodput_mbps:
        diff = u.tcp_goodput_mbps / k.tcp_goodput_mbps - 1
        out.append(f"{'ok  ' if abs(diff) <= 0.03 else 'MISS'} TCP goodput {diff:+.1%} from the kernel's "
                   f"{k.tcp_goodput_mbps:.2f} Mbit/s (3%): {tag}")
    queue_ms = (u.expected_peak_rtt_ms or 0) - (u.expected_min_rtt_ms or 0)
    if u.peak_rtt_ms and k.peak_rtt_ms and queue_ms >= 100:
        diff = u.peak_rtt_ms / k.peak_rtt_ms - 1
        out.append(f"{'ok  ' if abs(diff) <= 0.05 else 'MISS'} peak RTT {diff:+.1%} from the kernel's "
                   f"{k.peak_rtt_ms:.2f} ms (5%): {tag}")
    return out


def run_link(rates: list[int | None], delays: list[int], duration_s: float, rounds: int,
             out_dir: Path, progress: bool = True, pcap: bool = False) -> dict[str, Any]:
    """Every case of the link benchmark, one after another, a line per case on stderr (and with
    `progress`, a display of the time elapsed and left); writes OUT/bench-link.txt and
    bench-link.json and returns the latter's document (the table in "table", the verdicts in
    "targets")."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = cases(rates, delays, capabilities.kernel_qdiscs(), rounds, pcap)
    results: list[CaseResult] = []
    # A case is its warm-up, its measurement and a network's build and teardown (about 2 s);
    # the estimate is revised as cases finish.
    to_run = [case for case, skip in plan if not skip]
    expected = {id(case): warmup_s(case) + duration_s + 2.0 for case in to_run}
    bar = Progress(sum(expected.values()), "bench link") if progress and to_run else None
    spent, done_expected = 0.0, 0.0
    for i, (case, skip) in enumerate(plan, 1):
        if skip:
            results.append(CaseResult(case, skipped=skip))
            print(f"[{i}/{len(plan)}] {case.label}: skipped ({skip})", file=sys.stderr)
            continue
        t0 = time.monotonic()
        with ticking(bar, spent, expected[id(case)], f"case {i}/{len(plan)}"):
            results.append(run_case(case, duration_s, f"bench-{os.getpid() % 100000}", out_dir))
        took = time.monotonic() - t0
        spent += took
        done_expected += expected[id(case)]
        if bar is not None:  # what is left, at the pace so far
            bar.total_s = spent + (sum(expected.values()) - done_expected) * spent / done_expected
            bar.finish()
        print(f"[{i}/{len(plan)}] {case.label}: {took:.0f} s", file=sys.stderr)
    table, checks = render(results), verdicts(results)
    doc = {"bloatlab_version": __version__, "kernel": os.uname().release, "duration_s": duration_s,
           "queue_packets": "max(100, 1 BDP)",
           "tcp_goodput": "the sender's tcpi_delivered x mss between the samples in tcp_window",
           "results": [asdict(r) for r in results], "targets": checks}
    (out_dir / "bench-link.json").write_text(json.dumps(doc, indent=2))
    (out_dir / "bench-link.txt").write_text(table + "\n\n" + "\n".join(checks) + "\n")
    return {**doc, "table": table}
