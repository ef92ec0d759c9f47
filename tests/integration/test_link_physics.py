"""The userspace datapath against physics: real namespaces, real ping and iperf3, real frames.

Each test builds a small network on bloatlab-link and checks one law of the emulated link
(goodput = rate * payload share of a frame, queueing delay = backlog bytes * 8 / rate, loss
rate, one-way delays, jitter that never reorders) or one promise of docs/datapath.md (garbage
and super-frames never crash it or pass as one packet, neighbour discovery crosses it), and
that it agrees with the kernel backend's htb + pfifo on the same link.

Tolerances are loose enough for a loaded 2-core machine shared with other benchmarks and
tight enough that a wrong implementation fails; each assertion states its physics.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.experiment.parsers import IperfResult, PingReply, parse_iperf3, parse_ping_replies, parse_ping_summary
from bloatlab.bench.link import TCP_BUFFERS
from bloatlab.specs.model import DirectionSpec, HostSpec, LinkSpec, QueueSpec, SwitchSpec, Topology
from bloatlab.specs.topology import parse_topology
from bloatlab.testbed.datapath import KIND_DEQUEUE, KIND_DROP, KIND_ENQUEUE, read_qlog
from bloatlab.testbed.datapath_stats import LinkStats
from bloatlab.testbed.network import Network

pytestmark = pytest.mark.netns

MBIT = 1_000_000
MS = 1_000_000  # ns
FRAME_BYTES = 1514  # a full Ethernet frame on a 1500-byte MTU, as the queue counts it
MAX_FRAME_BYTES = 1518  # the datapath's limit: a full frame plus one VLAN tag
TCP_PAYLOAD = 1448  # MSS with TCP timestamps, per full frame
PING_FRAME = 98  # 56 data + 8 ICMP + 20 IPv4 + 14 Ethernet
TRACE_OPPORTUNITY_BYTES = 1504  # what one Mahimahi delivery opportunity carries
IPERF_PORT = 5201
STATS_SETTLE_S = 0.5  # the datapath publishes every 100 ms and rewrites its stats file every 200 ms
DROP_LOSS = 1  # queue-log drop reason code for random loss (docs/datapath.md)


# Building ----------------------------------------------------------------------------------

def two_hosts(seed: int = 1, **direction) -> Topology:
    """h1 - h2 on one userspace link, the same parameters both ways."""
    d = DirectionSpec(**direction)
    link = LinkSpec(name="h1-h2", ends=("h1", "h2"), forward=d, reverse=d, backend="userspace")
    return Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={}, links=[link], seed=seed)


@pytest.fixture(autouse=True)
def _datapath_binary():
    try:
        binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built (make setup)")


# Measuring ---------------------------------------------------------------------------------

def ping(net: Network, src: str, dst: str, *args: str, timeout_s: float = 30) -> str:
    out = net.exec(src, ["ping", "-n", *args, dst], timeout_s=timeout_s)
    return out.stdout


def warm_up(net: Network, src: str = "h1", dst: str = "10.0.0.2", tries: int = 12) -> None:
    """Resolve ARP (and warm caches) before measuring: one reply is enough. Over a link losing
    10% each way a try (at most 4 frames) fails with odds <= 0.344: all 12 failing, 3e-6."""
    for _ in range(tries):
        if net.exec(src, ["ping", "-n", "-c", "1", "-W", "1", dst]).returncode == 0:
            return
    raise AssertionError(f"{src} never got a reply from {dst}")


def idle_min_rtt_ms(net: Network, count: int = 30) -> float:
    summary = parse_ping_summary(ping(net, "h1", net.address("h2"), "-c", str(count), "-i", "0.02"))
    assert summary.received >= count // 2, summary
    return summary.min_ms


def wait_listening(net: Network, host: str, port: int, udp: bool = False, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = net.exec(host, ["ss", "-Hlun" if udp else "-Hltn", f"sport = :{port}"]).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} in {host}")


def iperf_with_pings(net: Network, iperf_args: list[str], ping_interval_s: float | None,
                     total_s: float) -> tuple[IperfResult, list[PingReply]]:
    """TCP h1 -> h2 (iperf3 -J), with pings h1 -> h2 riding along for the whole run."""
    server = net.popen("h2", ["iperf3", "-s", "-1", "-p", str(IPERF_PORT)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pinger = None
    try:
        wait_listening(net, "h2", IPERF_PORT)
        if ping_interval_s is not None:
            pinger = net.popen("h1", ["ping", "-n", "-i", str(ping_interval_s), "-w", str(int(total_s) + 1),
                                      net.address("h2")], stdout=subprocess.PIPE, text=True)
        out = net.exec("h1", ["iperf3", "-c", net.address("h2"), "-p", str(IPERF_PORT), "-J", *iperf_args], timeout_s=total_s + 30)
        result = parse_iperf3(out.stdout)
        replies = parse_ping_replies(pinger.communicate(timeout=total_s + 10)[0]) if pinger else []
        return result, replies
    finally:
        for proc in (server, pinger):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait(timeout=5)


def link_stats(net: Network, link: str = "h1-h2") -> LinkStats:
    time.sleep(STATS_SETTLE_S)
    return net.datapath.stats().links[link]


def measured(test: str, **figures: object) -> None:
    """What a test measured: shown on failure, or with pytest -s."""
    print(f"\n{test}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in figures.items()))


def peak_rtt_ms(replies: list[PingReply]) -> float:
    """The highest RTT but for the two highest: one scheduling hiccup of the datapath or the
    pinger on a shared machine can add tens of ms to a single sample (seen once: 57 ms where
    34.5 ms were due; in repeated runs the queue log never showed a frame waiting over 24 ms).
    A full queue is no single sample: tens of pings meet it in these runs."""
    rtts = sorted(r.rtt_ms for r in replies)
    assert len(rtts) >= 20, f"only {len(rtts)} pings came back under load"
    return rtts[-3]


def machine_stall_ms(net: Network) -> float:
    """The machine's worst stall of a real-time thread while the test's traffic flowed, as the
    datapath's sentinels (a CPU each, sleeping as its workers sleep) met it. A stall of a shared
    machine (a vCPU taken away) holds up whatever falls due in it: departures, the pinger, the
    kernel's softirqs. An RTT may exceed physics by this much through no fault of the link (one
    CI run: a 42 ms stall set three pings 16 ms over a byte-limited queue's 34 ms). A stall of
    the datapath alone (its own work, a blocking write) is not in it: that still fails a test."""
    time.sleep(STATS_SETTLE_S)
    watch = net.datapath.stats().sentinel
    assert watch is not None and watch.late_ns.count >= 100, watch
    return watch.late_ns.max / 1e6


def max_sojourn_ms(qlog: Path) -> float:
    """The longest a frame waited in the queue, from the datapath's own log (virtual time: no
    scheduling noise in it)."""
    log = read_qlog(qlog)
    return float(log["value"][log["kind"] == KIND_DEQUEUE].max()) / 1e6


def loss_pattern(qlog: Path) -> list[bool]:
    """Per frame that reached the loss stage, in arrival order: was it lost? A frame that is
    not lost is enqueued; runts and oversize frames never draw from the generator."""
    log = read_qlog(qlog)
    drawn = (log["kind"] == KIND_ENQUEUE) | ((log["kind"] == KIND_DROP) & (log["reason"] == DROP_LOSS))
    return [bool(k == KIND_DROP) for k in log["kind"][drawn]]


# 1. Rate and queue --------------------------------------------------------------------------

def test_rate_gives_payload_capacity_and_a_full_queue_its_delay(names, tmp_path):
    rate = 10 * MBIT
    topo = two_hosts(rate_bps=rate, delay_ns=5 * MS, queue=QueueSpec(discipline="droptail", packets=100))
    with Network(topo, names("phy-rate"), qlog_dir=tmp_path) as net:
        warm_up(net)
        base_ms = idle_min_rtt_ms(net)
        tcp, loaded = iperf_with_pings(net, ["-C", "cubic", "-t", "8", "-O", "3"], 0.05, total_s=11)
        fwd = link_stats(net).forward
    # Physics: TCP carries 1448 payload bytes per 1514-byte frame on the wire, so a saturated
    # 10 Mbit/s link gives 9.564 Mbit/s of goodput. -7% leaves room for cubic's sawtooth after
    # a loss with a 100-packet buffer and a busy machine; +2% catches a link faster than its rate.
    capacity_bps = rate * TCP_PAYLOAD / FRAME_BYTES
    full_queue_ms = 100 * FRAME_BYTES * 8 / rate * 1e3  # 121.12 ms
    expected_peak_ms = base_ms + full_queue_ms
    peak_ms = peak_rtt_ms(loaded)
    sojourn_ms = max_sojourn_ms(tmp_path / "h1-h2.forward.qlog")
    measured("rate", goodput_mbps=tcp.receiver_bps / 1e6, of_capacity=tcp.receiver_bps / capacity_bps,
             base_ms=base_ms, peak_ms=peak_ms, max_ms=max(r.rtt_ms for r in loaded),
             expected_peak_ms=expected_peak_ms, max_sojourn_ms=sojourn_ms,
             max_backlog_pkts=fwd.max_backlog_pkts, drops=fwd.drops, late=fwd.depart_error_ns)
    assert 0.93 * capacity_bps <= tcp.receiver_bps <= 1.02 * capacity_bps, (tcp.receiver_bps, capacity_bps)
    # Physics: a ping that joins a full queue waits behind 100 full frames (one of them in the
    # serialiser): 100 * 1514 * 8 / 10 Mbit/s = 121.1 ms on top of the idle RTT. 10% both ways.
    assert 0.9 * expected_peak_ms <= peak_ms <= 1.1 * expected_peak_ms, (peak_ms, expected_peak_ms, base_ms)
    # The same law in the datapath's virtual time, where it is exact: a frame waits at most for
    # the 99 frames ahead of it and the rest of the one being sent (121.12 ms, +1 us for
    # rounding); TCP keeps the queue full enough to come within 10% of that.
    assert 0.9 * full_queue_ms <= sojourn_ms <= full_queue_ms + 0.001, (sojourn_ms, full_queue_ms)
    # The queue filled exactly to its limit and refused the rest at the tail; nothing else lost.
    assert fwd.max_backlog_pkts == 100, fwd
    assert fwd.drops["queue_full"] > 0, fwd
    assert fwd.drops["rx_overrun"] == 0 and fwd.drops["tx_error"] == 0, fwd


@pytest.mark.parametrize(("rate", "name"), [(100 * MBIT, "phy-fast1"), (1000 * MBIT, "phy-fast2")])
def test_a_fast_long_link_keeps_its_rate_delay_and_every_frame(names, rate, name):
    # 10 ms each way and a bandwidth-delay product of queue (166 and 1652 frames): the cases
    # where Mahimahi falls short and where a slow start sends at twice the rate into the ring.
    delay_ns = 10 * MS
    queue_pkts = max(100, -(-rate * 2 * delay_ns // (8 * 10**9 * FRAME_BYTES)))
    topo = two_hosts(rate_bps=rate, delay_ns=delay_ns, queue=QueueSpec(packets=queue_pkts))
    with Network(topo, names(name)) as net:
        for host in ("h1", "h2"):
            for key, value in TCP_BUFFERS.items():  # room for the 2.5 MB window 1 Gbit/s needs
                net.exec(host, ["sysctl", "-qw", f"{key}={value}"], check=True)
        warm_up(net)
        base_ms = idle_min_rtt_ms(net)
        tcp, _ = iperf_with_pings(net, ["-C", "cubic", "-t", "7", "-O", "2"], None, total_s=9)
        pair = link_stats(net)
        fwd, rev = pair.forward, pair.reverse
    capacity_bps = rate * TCP_PAYLOAD / FRAME_BYTES
    expected_base_ms = 2 * delay_ns / 1e6 + 2 * PING_FRAME * 8 / rate * 1e3
    measured(name, goodput_mbps=tcp.receiver_bps / 1e6, of_capacity=tcp.receiver_bps / capacity_bps,
             base_ms=base_ms, expected_base_ms=expected_base_ms, late=fwd.depart_error_ns,
             drops=fwd.drops, reverse_drops=rev.drops)
    # Physics: the payload share of the rate, 95.6 and 956 Mbit/s. The bench gets 99.8-100%;
    # -12% for a busy 2-core machine at 1 Gbit/s, where the hosts' TCP needs a core of its own.
    assert 0.88 * capacity_bps <= tcp.receiver_bps <= 1.02 * capacity_bps, (tcp.receiver_bps, capacity_bps)
    # The path delay twice plus a ping frame's serialisation each way; the target is 0.1 ms,
    # 0.25 leaves room for a shared machine's wake-ups.
    assert expected_base_ms <= base_ms <= expected_base_ms + 0.25, (base_ms, expected_base_ms)
    # Nothing lost outside the link, either way.
    for d in (fwd, rev):
        assert d.drops["rx_overrun"] == 0 and d.drops["tx_error"] == 0, d.drops
    # Departures on time at 100 Mbit/s: p99 within 1 ms, the run's lag warning (seen: 19-49 us;
    # the bench's target is 50). At 1 Gbit/s, 83k frames a second on two cores, it was 0.5-1.2 ms.
    if rate == 100 * MBIT:
        assert fwd.depart_error_ns.p99 < 1 * MS, fwd.depart_error_ns


# 2. Asymmetric delay ------------------------------------------------------------------------

# Sends or receives UDP datagrams that carry their CLOCK_MONOTONIC send time: namespaces share
# the clock, so the receiver measures the one-way delay directly. Prints the minimum in ms.
ONE_WAY_DELAY = r"""
import socket, struct, sys, time
mode, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if mode == "recv":
    s.bind(("0.0.0.0", port))
    s.settimeout(5)
    delays = []
    try:
        while len(delays) < count:
            data = s.recv(64)
            delays.append(time.monotonic() - struct.unpack("!d", data[:8])[0])
    except socket.timeout:
        pass
    print(min(delays) * 1e3 if delays else "nan", len(delays))
else:
    for _ in range(count):
        s.sendto(struct.pack("!d", time.monotonic()), (sys.argv[4], port))
        time.sleep(0.01)
"""


def one_way_delay_ms(net: Network, src: str, dst: str, count: int = 30, port: int = 9000) -> float:
    receiver = net.popen(dst, [sys.executable, "-c", ONE_WAY_DELAY, "recv", str(port), str(count)],
                         stdout=subprocess.PIPE, text=True)
    try:
        wait_listening(net, dst, port, udp=True)
        net.exec(src, [sys.executable, "-c", ONE_WAY_DELAY, "send", str(port), str(count), net.address(dst)],
                 check=True, timeout_s=30)
        min_ms, received = receiver.communicate(timeout=10)[0].split()
    finally:
        if receiver.poll() is None:
            receiver.kill()
        receiver.wait(timeout=5)
    assert int(received) >= count // 2, f"only {received} of {count} datagrams {src} -> {dst} arrived"
    return float(min_ms)


ASYMMETRIC_TOML = """
[hosts.h1]
[hosts.h2]
[[links]]
ends = ["h1", "h2"]
backend = "userspace"
forward = { delay = "3ms" }
reverse = { delay = "7ms" }
"""


def test_forward_and_reverse_delays_apply_each_to_its_own_direction(names):
    topo = parse_topology(tomllib.loads(ASYMMETRIC_TOML))
    with Network(topo, names("phy-asym")) as net:
        warm_up(net)
        summary = parse_ping_summary(ping(net, "h1", "10.0.0.2", "-c", "50", "-i", "0.02"))
        forward_ms = one_way_delay_ms(net, "h1", "h2")
        reverse_ms = one_way_delay_ms(net, "h2", "h1")
    measured("asym", min_rtt_ms=summary.min_ms, forward_ms=forward_ms, reverse_ms=reverse_ms)
    # Physics: RTT = 3 ms out + 7 ms back, unlimited rate; the minimum of 50 sees no scheduling
    # delay beyond a few hundred microseconds even on a busy machine.
    assert summary.received >= 45 and 10.0 <= summary.min_ms <= 10.4, summary
    # Each override lands on its own direction (a swap would give 7 and 3): the minimum one-way
    # delay is the configured delay plus at most 0.4 ms of wake-up and stack latency.
    assert 3.0 <= forward_ms <= 3.4, forward_ms
    assert 7.0 <= reverse_ms <= 7.4, reverse_ms


# 3. Random loss ----------------------------------------------------------------------------

def test_loss_rate_and_its_seed(names, tmp_path):
    lossy = dict(loss=0.10, queue=QueueSpec(packets=1000))
    with Network(two_hosts(seed=7, **lossy), names("phy-loss"), qlog_dir=tmp_path / "a") as net:
        warm_up(net)  # ARP resolved: no ping waits for it, and none is counted lost because of it
        out = ping(net, "h1", "10.0.0.2", "-c", "500", "-i", "0.005", "-W", "0.3", "-q")
        stats = link_stats(net)
    summary = parse_ping_summary(out)
    fwd = stats.forward
    measured("loss", success=summary.received / summary.transmitted, fwd_arrivals=fwd.arrivals,
             fwd_loss_share=fwd.drops["loss"] / fwd.arrivals)
    # Physics: a ping round trip survives two independent 10% losses: 0.9 * 0.9 = 0.81.
    # Over 500 pings the standard deviation is 1.75 points; 0.72..0.89 is 4.6 and 5.1 sigma:
    # odds of 8e-7 (exact binomial).
    assert summary.transmitted == 500, summary
    assert 0.72 <= summary.received / summary.transmitted <= 0.89, summary
    # The forward direction drops 10% of what arrives (pings and ARP alike): over >= 500
    # frames the standard deviation is 1.34 points; 0.04..0.16 is 4.5 sigma: odds of 1.2e-5
    # (exact binomial at n = 500, the upper tail the larger).
    assert fwd.arrivals >= 500
    assert 0.04 <= fwd.drops["loss"] / fwd.arrivals <= 0.16, fwd
    assert fwd.drops["queue_full"] == 0, fwd  # unlimited rate: loss is the only drop

    # The same seed draws the same decisions, frame by frame: the queue log lists, in arrival
    # order, every frame that reached the loss stage (enqueued, or dropped as loss). Background
    # frames (ARP retries, IPv6 router solicitations) change how many frames arrive, not the
    # decision the n-th frame gets, so the two runs agree on their common prefix.
    for seed, name, log_dir in ((7, "phy-loss2", "b"), (8, "phy-loss3", "c")):
        with Network(two_hosts(seed=seed, **lossy), names(name), qlog_dir=tmp_path / log_dir) as net:
            # ARP first, as in the first network: an ARP request or reply lost (19% of the
            # time with 10% loss each way) held the pings behind a 1 s retry, and a run once
            # had 67 frames where the comparison needs 100. Warm-up frames take draws like
            # any other, so the sequences still line up from the first frame.
            warm_up(net)
            ping(net, "h1", "10.0.0.2", "-c", "150", "-i", "0.005", "-W", "0.3", "-q")
    first = loss_pattern(tmp_path / "a" / "h1-h2.forward.qlog")
    again = loss_pattern(tmp_path / "b" / "h1-h2.forward.qlog")
    other = loss_pattern(tmp_path / "c" / "h1-h2.forward.qlog")
    n = min(len(first), len(again), len(other))
    measured("loss-seed", compared=n, same_seed_equal=first[:n] == again[:n], lost_in_prefix=sum(first[:n]),
             other_seed_differs_at=[i for i in range(n) if first[i] != other[i]][:3])
    assert n >= 100, (len(first), len(again), len(other))
    assert first[:n] == again[:n], "the same seed gave different loss decisions"
    # Another seed gives another sequence: two independent 10% draws agree with probability
    # 0.82, so >= 100 of them all agreeing by chance has odds below 1e-8.
    assert first[:n] != other[:n], "the topology seed does not reach the loss generator"
    # Each direction draws from a generator of its own.
    reverse = loss_pattern(tmp_path / "a" / "h1-h2.reverse.qlog")
    m = min(len(first), len(reverse))
    # As for two seeds: >= 100 independent draws all agreeing has odds 0.82^100 = 2e-9.
    assert m >= 100, (len(first), len(reverse))
    assert first[:m] != reverse[:m], "forward and reverse share one loss sequence"


# 4. Trace-driven rate ----------------------------------------------------------------------

def _trace_topology(trace: Path) -> Topology:
    d = DirectionSpec(trace=trace, delay_ns=5 * MS, queue=QueueSpec(packets=100))
    return Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={},
                    links=[LinkSpec(name="h1-h2", ends=("h1", "h2"), forward=d, reverse=d, backend="userspace")])


@pytest.mark.parametrize(("lines", "opportunities_per_ms", "name"), [
    ("1\n", 1.0, "phy-trace1"),  # one opportunity at 1 ms, period 1 ms
    ("1\n1\n2\n", 1.5, "phy-trace2"),  # two at 1 ms, one at 2 ms, period 2 ms
])
def test_a_mahimahi_trace_paces_the_link(names, tmp_path, lines, opportunities_per_ms, name):
    trace = tmp_path / "link.trace"
    trace.write_text(lines)
    with Network(_trace_topology(trace), names(name)) as net:
        warm_up(net)
        tcp, _ = iperf_with_pings(net, ["-C", "cubic", "-t", "6", "-O", "2"], None, total_s=8)
        fwd = link_stats(net).forward
    # Physics: each opportunity carries 1504 bytes of frames (a frame may span two), so the
    # link carries 1504 * opportunities_per_ms bytes per ms; TCP gets 1448 of every 1514 of
    # them: 11.51 Mbit/s for "1", 17.26 Mbit/s for "1 1 2". -8% for cubic's sawtooth and a
    # busy machine, +3% catches a trace served faster than written.
    capacity_bps = TRACE_OPPORTUNITY_BYTES * 8 * 1000 * opportunities_per_ms * TCP_PAYLOAD / FRAME_BYTES
    measured(name, goodput_mbps=tcp.receiver_bps / 1e6, capacity_mbps=capacity_bps / 1e6,
             of_capacity=tcp.receiver_bps / capacity_bps, drops=fwd.drops)
    assert 0.92 * capacity_bps <= tcp.receiver_bps <= 1.03 * capacity_bps, (tcp.receiver_bps, capacity_bps)
    assert fwd.drops["rx_overrun"] == 0 and fwd.drops["tx_error"] == 0, fwd


# 5, 6. Byte-limited and drop-head queues ----------------------------------------------------

def test_a_byte_limited_queue_holds_its_bytes_and_their_delay(names, tmp_path):
    rate, limit_bytes = 10 * MBIT, 20 * FRAME_BYTES  # 30280 bytes
    topo = two_hosts(rate_bps=rate, delay_ns=5 * MS, queue=QueueSpec(packets=None, bytes=limit_bytes))
    with Network(topo, names("phy-bytes"), qlog_dir=tmp_path) as net:
        warm_up(net)
        base_ms = idle_min_rtt_ms(net)
        _, loaded = iperf_with_pings(net, ["-C", "cubic", "-t", "4", "-O", "1"], 0.01, total_s=5)
        fwd = link_stats(net).forward
        stall_ms = machine_stall_ms(net)
    # The limit is in bytes: never more than 30280 bytes wait, and TCP fills it to within
    # a few frames (25000 bytes is 16.5 full frames).
    full_queue_ms = limit_bytes * 8 / rate * 1e3  # 24.22 ms
    expected_peak_ms = base_ms + full_queue_ms
    peak_ms = peak_rtt_ms(loaded)
    sojourn_ms = max_sojourn_ms(tmp_path / "h1-h2.forward.qlog")
    measured("bytes", max_backlog_bytes=fwd.max_backlog_bytes, base_ms=base_ms, peak_ms=peak_ms,
             max_ms=max(r.rtt_ms for r in loaded), expected_peak_ms=expected_peak_ms,
             max_sojourn_ms=sojourn_ms, queue_full=fwd.drops["queue_full"], late=fwd.depart_error_ns,
             machine_stall_ms=stall_ms)
    assert 25_000 <= fwd.max_backlog_bytes <= limit_bytes, fwd
    assert fwd.drops["queue_full"] > 0, fwd
    # Physics: a ping joining a full queue waits for its bytes to drain:
    # 30280 * 8 / 10 Mbit/s = 24.2 ms over the idle RTT. 15%: pings sample the queue every 10 ms;
    # above it, what the machine's own stalls added (measured in this run).
    assert 0.85 * expected_peak_ms <= peak_ms <= 1.15 * expected_peak_ms + stall_ms, (peak_ms, expected_peak_ms,
                                                                                       base_ms, stall_ms)
    # Exact in virtual time: a frame waits for at most the other bytes the limit admits plus
    # the rest of the frame being sent, (30280 + 1514) * 8 / 10 Mbit/s = 25.4 ms; TCP keeps
    # the queue full enough to reach 90% of the 24.2 ms a full queue drains in.
    assert 0.9 * full_queue_ms <= sojourn_ms <= (limit_bytes + FRAME_BYTES) * 8 / rate * 1e3 + 0.001, sojourn_ms


def test_drophead_drops_the_oldest_never_the_arrival(names):
    topo = two_hosts(rate_bps=10 * MBIT, delay_ns=5 * MS, queue=QueueSpec(discipline="drophead", packets=20))
    with Network(topo, names("phy-head")) as net:
        warm_up(net)
        iperf_with_pings(net, ["-C", "cubic", "-t", "3"], None, total_s=3)
        fwd = link_stats(net).forward
    measured("drophead", drops=fwd.drops, max_backlog_pkts=fwd.max_backlog_pkts)
    # A saturating flow overflows a 20-packet queue; drop-head makes room by dropping from
    # the head, so not one arrival is refused at the tail.
    assert fwd.drops["head_drop"] > 0, fwd
    assert fwd.drops["queue_full"] == 0, fwd
    assert fwd.max_backlog_pkts == 20, fwd


# 7. Jitter ---------------------------------------------------------------------------------

def test_jitter_varies_the_delay_but_never_reorders(names):
    topo = two_hosts(delay_ns=5 * MS, jitter_ns=4 * MS, queue=QueueSpec(packets=1000))
    with Network(topo, names("phy-jit")) as net:
        warm_up(net)
        out = ping(net, "h1", "10.0.0.2", "-c", "400", "-i", "0.002", "-W", "1")
        stall_ms = machine_stall_ms(net)
    replies = parse_ping_replies(out)
    seqs = [r.seq for r in replies]
    rtts = [r.rtt_ms for r in replies]
    measured("jitter", replies=len(replies), min_ms=min(rtts), max_ms=max(rtts),
             in_order=all(a < b for a, b in zip(seqs, seqs[1:])), machine_stall_ms=stall_ms)
    # No loss is configured: (almost) every reply comes back, each once.
    assert len(replies) >= 390 and "DUP!" not in out, out[-400:]
    # ping prints replies as they arrive: sent 2 ms apart through FIFO delay lines both ways,
    # they must arrive in sending order.
    assert all(a < b for a, b in zip(seqs, seqs[1:])), [s for s, t in zip(seqs, seqs[1:]) if s >= t][:10]
    # Physics: each way the delay is 5 +- 4 ms, i.e. 1..9 ms (the FIFO only ever raises a
    # delay, never above the previous frame's 9 ms): the RTT lies in 2..18 ms, and 400
    # samples of it spread over well more than 4 ms (all 400 inside one 4 ms window: odds below
    # 0.44^400, nil). Upper bound: 18 ms + 5 ms for a busy host, and what the machine's own
    # stalls added, measured in this run (one CI run: 29.3 ms).
    assert max(rtts) - min(rtts) >= 4.0, (min(rtts), max(rtts))
    assert min(rtts) >= 1.95, min(rtts)
    assert max(rtts) <= 23.0 + stall_ms, (max(rtts), stall_ms)


# 8. Garbage --------------------------------------------------------------------------------

# Sends garbage out of h1-eth0 with an AF_PACKET socket; prints what the kernel accepted.
GARBAGE = r"""
import json, os, random, socket
rng = random.Random(42)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("h1-eth0", 0))
mac = bytes.fromhex(open("/sys/class/net/h1-eth0/address").read().strip().replace(":", ""))
report = {"runts_sent": 0, "runt_errors": {}, "frames_sent": 0}
for n in [5] * 10 + [13] * 10:  # shorter than an Ethernet header
    try:
        s.send(os.urandom(n))
        report["runts_sent"] += 1
    except OSError as e:
        report["runt_errors"][f"{n} bytes"] = e.strerror
frames = [os.urandom(14) for _ in range(10)]  # a header and nothing else: the shortest frame
frames += [os.urandom(rng.randint(14, 1514)) for _ in range(50)]
frames += [b"\xff" * 6 + mac + b"\xde\xad" + os.urandom(rng.randint(46, 1500)) for _ in range(20)]
for f in frames:
    s.send(f)
    report["frames_sent"] += 1
print(json.dumps(report))
"""


def test_garbage_frames_never_crash_the_datapath(names):
    with Network(two_hosts(queue=QueueSpec(packets=1000)), names("phy-junk")) as net:
        warm_up(net)
        before = link_stats(net).forward
        sent = net.exec("h1", [sys.executable, "-c", GARBAGE], timeout_s=30)
        assert sent.returncode == 0, sent.stderr
        report = json.loads(sent.stdout)
        fwd = link_stats(net).forward
        assert net.datapath.alive()
        summary = parse_ping_summary(ping(net, "h1", "10.0.0.2", "-c", "3", "-i", "0.1", "-W", "2"))
    measured("garbage", report=report, forward=fwd, ping_received=summary.received)
    # The kernel itself refuses frames shorter than an Ethernet header (dev_validate_header:
    # EINVAL below 14 bytes), so a veth can never deliver a runt; whatever it did accept must
    # be counted as one, never forwarded.
    assert fwd.drops["runt"] - before.drops["runt"] == report["runts_sent"], (report, fwd)
    # Everything else is an Ethernet frame of legal size, however meaningless: the link
    # carries it like a wire (arrivals = departures, nothing dropped; background frames
    # such as IPv6 router solicitations only add to both).
    arrived = fwd.arrivals - before.arrivals
    assert report["frames_sent"] == 80 and arrived >= 80 + report["runts_sent"], (report, fwd)
    assert fwd.departures - before.departures == arrived - report["runts_sent"], fwd
    assert sum(fwd.drops.values()) == fwd.drops["runt"], fwd
    # And the link still works.
    assert summary.received == 3, summary


# 9. Super-frames ----------------------------------------------------------------------------

def test_super_frames_are_dropped_as_oversize_never_passed(names, tmp_path):
    with Network(two_hosts(queue=QueueSpec(packets=1000)), names("phy-gso"), qlog_dir=tmp_path) as net:
        warm_up(net)
        server = net.popen("h2", ["iperf3", "-s", "-1", "-p", str(IPERF_PORT)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = None
        try:
            wait_listening(net, "h2", IPERF_PORT)
            # The connection is made first: with tx checksumming on, h1's SYN would leave with a
            # partial checksum, which the datapath copies as is and h2 rightly drops (tried: the
            # connect then times out and no super-frame is ever made). Once the flow runs,
            # turning the offloads on makes h1 hand 64 KB TSO/GSO super-frames to its veth.
            client = net.popen("h1", ["iperf3", "-c", net.address("h2"), "-p", str(IPERF_PORT), "-t", "2"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            net.exec("h1", ["ethtool", "-K", "h1-eth0", "tso", "on", "gso", "on", "sg", "on", "tx", "on"],
                     check=True)
            time.sleep(1.5)  # the flow stalls now (its frames are dropped), which is fine
        finally:
            for proc in (client, server):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                if proc is not None:
                    proc.wait(timeout=5)
        fwd = link_stats(net).forward
        alive = net.datapath.alive()
        summary = parse_ping_summary(ping(net, "h1", "10.0.0.2", "-c", "3", "-i", "0.1", "-W", "2"))
    log = read_qlog(tmp_path / "h1-h2.forward.qlog")
    enqueued = log["value"][log["kind"] == KIND_ENQUEUE]
    measured("gso", oversize=fwd.drops["oversize"], departures=fwd.departures,
             mean_out_bytes=fwd.bytes_out / max(1, fwd.departures),
             largest_enqueued=int(enqueued.max()) if len(enqueued) else None,
             mean_dropped_bytes=(fwd.bytes_in - fwd.bytes_out) / max(1, fwd.drops["oversize"]))
    assert alive
    assert fwd.drops["oversize"] > 0, fwd
    # What was dropped was super-frames: bytes in but not out, more than a full frame each.
    assert (fwd.bytes_in - fwd.bytes_out) / fwd.drops["oversize"] > MAX_FRAME_BYTES, fwd
    # Every frame that went through was a normal frame: on average, and one by one in the log.
    assert fwd.departures > 0 and fwd.bytes_out / fwd.departures <= MAX_FRAME_BYTES, fwd
    assert len(enqueued) > 0 and enqueued.max() <= MAX_FRAME_BYTES, enqueued.max()
    assert summary.received == 3, summary  # ICMP checksums are never offloaded: ping still works


# 10. IPv6 ----------------------------------------------------------------------------------

def link_local_address(net: Network, host: str, timeout_s: float = 4.0) -> str:
    """The host's IPv6 link-local address, once duplicate address detection has passed: until
    then it is "tentative" and can neither answer nor be a source (about 1 to 2 s after up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = json.loads(net.exec(host, ["ip", "-6", "-j", "addr", "show", "dev", f"{host}-eth0"], check=True).stdout)
        local = [a for link in info for a in link.get("addr_info", [])
                 if a.get("scope") == "link" and a.get("family") == "inet6"]
        if local and not local[0].get("tentative"):
            return local[0]["local"]
        assert time.monotonic() < deadline, f"{host}'s link-local address is not usable: {info}"
        time.sleep(0.1)


def test_ipv6_neighbour_discovery_crosses_the_link(names):
    with Network(two_hosts(delay_ns=1 * MS, queue=QueueSpec(packets=100)), names("phy-ipv6")) as net:
        address = link_local_address(net, "h2")
        link_local_address(net, "h1")  # the echo request's source address must be usable too
        out = net.exec("h1", ["ping", "-6", "-n", "-c", "3", "-i", "0.2", "-W", "2", f"{address}%h1-eth0"], timeout_s=20)
    # Neighbour solicitation (to a multicast MAC) and advertisement cross the datapath like
    # any frame; then the echoes do, 1 ms each way.
    assert out.returncode == 0, out.stdout + out.stderr
    summary = parse_ping_summary(out.stdout)
    measured("ipv6", received=summary.received, min_ms=summary.min_ms)
    assert summary.received == 3 and summary.min_ms >= 2.0, summary


# 11. Through a switch ----------------------------------------------------------------------

def test_a_switch_joins_two_userspace_links(names):
    d = DirectionSpec(rate_bps=100 * MBIT, delay_ns=1 * MS, queue=QueueSpec(packets=100))
    topo = Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={"s0": SwitchSpec("s0")},
                    links=[LinkSpec(name="h1-s0", ends=("h1", "s0"), forward=d, reverse=d, backend="userspace"),
                           LinkSpec(name="s0-h2", ends=("s0", "h2"), forward=d, reverse=d, backend="userspace")])
    with Network(topo, names("phy-switch")) as net:
        assert net.backends == ["userspace", "userspace"]
        warm_up(net, dst="h2")
        out = ping(net, "h1", "h2", "-c", "30", "-i", "0.02")  # by name: /etc/hosts in the lab
    summary = parse_ping_summary(out)
    # Physics: four crossings of 1 ms, plus a 98-byte frame's 7.8 us at 100 Mbit/s on each:
    # 4.03 ms. The bridge and the stacks add tens of microseconds; +0.5 ms for a busy host.
    expected_ms = 4 * 1.0 + 4 * PING_FRAME * 8 / (100 * MBIT) * 1e3
    measured("switch", min_ms=summary.min_ms, expected_ms=expected_ms, received=summary.received)
    assert summary.received >= 25, summary
    assert expected_ms - 0.01 <= summary.min_ms <= 4.0 + 0.5, (summary.min_ms, expected_ms)


# 12. Against the kernel's own qdiscs -----------------------------------------------------------

def test_the_kernel_backend_agrees_on_goodput_and_a_full_queue(names):
    from bloatlab.testbed.capabilities import kernel_qdiscs as available_qdiscs

    if not all(available_qdiscs().get(q) for q in ("htb", "pfifo")):
        pytest.skip("this kernel has no htb or pfifo")
    rate, limit = 10 * MBIT, 100
    found = {}
    for backend in ("kernel", "userspace"):
        d = DirectionSpec(rate_bps=rate, queue=QueueSpec(packets=limit))
        topo = Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={},
                        links=[LinkSpec(name="h1-h2", ends=("h1", "h2"), forward=d, reverse=d, backend=backend)])
        with Network(topo, names(f"phy-{backend[0]}")) as net:
            assert net.backends == [backend]
            warm_up(net)
            tcp, loaded = iperf_with_pings(net, ["-C", "cubic", "-t", "6", "-O", "2"], 0.05, total_s=8)
        found[backend] = (tcp.receiver_bps, peak_rtt_ms(loaded))
    # Physics: Cubic fills a 100-packet queue to its limit, 121 ms at 10 Mbit/s, on both; a kernel
    # queue on h1's own interface, where TCP small queues keep it short, peaked at 5.7 ms.
    full_queue_ms = limit * FRAME_BYTES * 8 / rate * 1e3
    (k_bps, k_peak), (u_bps, u_peak) = found["kernel"], found["userspace"]
    measured("agreement", kernel_mbps=k_bps / 1e6, userspace_mbps=u_bps / 1e6, kernel_peak_ms=k_peak,
             userspace_peak_ms=u_peak, full_queue_ms=full_queue_ms)
    assert abs(u_bps / k_bps - 1) <= 0.03, found
    # Each peak is the highest of pings 50 ms apart, so either may miss the top by some ms
    # (119 against 131 ms once in CI): both must show the full queue.
    for peak in (k_peak, u_peak):
        assert 0.9 * full_queue_ms <= peak <= 1.1 * full_queue_ms + 2, found
