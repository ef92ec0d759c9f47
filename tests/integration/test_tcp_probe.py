"""The TCP probes on real flows: iperf3 across a userspace link of 10 Mbit/s with 5 ms each way
and a 100-packet queue, so the path RTT is 10 ms plus up to 100 * 1.2 ms of queue."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from bloatlab.errors import MachineError
from bloatlab.experiment.probes.tcp import INSTANCE_PREFIX, TRACEFS, SsProbe, TcpSample, TracepointProbe, read_samples, remove_stale_instances
from bloatlab.specs.model import DirectionSpec, HostSpec, LinkSpec, QueueSpec, Topology
from bloatlab.testbed.network import Network

pytestmark = pytest.mark.netns

MBIT = 1_000_000
MS = 1_000_000  # ns
PATH_RTT_MS = 10.0  # 5 ms each way
MAX_RTT_MS = 200.0  # the path plus a full queue (121 ms) plus slack for a loaded machine
# Ports of this test session: the tracepoint sees every namespace, so two sessions at once must
# not share them.
PORT = 20000 + (os.getpid() % 20000) * 2
OTHER_PORT = PORT + 1
RUN = f"test-{os.getpid()}"




@pytest.fixture
def tracepoint():
    if reason := TracepointProbe.available():
        pytest.skip(reason)


@pytest.fixture
def net(names, datapath_binary):
    d = DirectionSpec(rate_bps=10 * MBIT, delay_ns=5 * MS, queue=QueueSpec(packets=100))
    topo = Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={},
                    links=[LinkSpec(name="h1-h2", ends=("h1", "h2"), forward=d, reverse=d, backend="userspace")])
    with Network(topo, names("tcpp")) as network:
        yield network


@pytest.fixture
def procs():
    """Processes a test starts; whatever still runs at the end is killed by its pid."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=5)


def serve(net: Network, procs: list, *ports: int) -> None:
    """One-off iperf3 servers in h2, returned once they listen."""
    for port in ports:
        procs.append(net.popen("h2", ["iperf3", "-s", "-1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    deadline = time.monotonic() + 5
    while True:
        listening = net.exec("h2", ["ss", "-Htln"]).stdout
        if all(f":{port} " in listening for port in ports):
            return
        assert time.monotonic() < deadline, f"iperf3 servers on {ports} do not listen: {listening}"
        time.sleep(0.05)


def two_flows(net: Network, procs: list, seconds: int = 3) -> None:
    """A reno flow h1 -> h2 on PORT (the probed one) and a cubic flow on OTHER_PORT, at once."""
    other = net.popen("h1", ["iperf3", "-c", "h2", "-p", str(OTHER_PORT), "-t", str(seconds), "-C", "cubic"],
                      stdout=subprocess.DEVNULL)
    procs.append(other)
    main = net.exec("h1", ["iperf3", "-c", "h2", "-p", str(PORT), "-t", str(seconds), "-C", "reno"], timeout_s=seconds + 15)
    assert main.returncode == 0, main.stdout + main.stderr
    assert other.wait(timeout=15) == 0


def data_flow(samples: list[TcpSample]) -> list[TcpSample]:
    """The sender's samples of the iperf3 data connection: of the h1 -> PORT sockets, the one
    whose cwnd grew (the control connection sends a few hundred bytes)."""
    by_sport: dict[int, list[TcpSample]] = {}
    for s in samples:
        if s.src == "10.0.0.1" and s.dst == "10.0.0.2" and s.dport == PORT:
            by_sport.setdefault(s.sport, []).append(s)
    assert by_sport, "no sample of a sender on h1"
    return max(by_sport.values(), key=lambda flow: max(s.cwnd_pkts for s in flow))


def machine_stall_ms(net: Network) -> float:
    """The machine's worst stall of a real-time thread while the network ran (the datapath's
    sentinel): a stall holds the queue's packets, and srtt sees it."""
    stats = net.datapath.stats() if net.datapath is not None else None
    return stats.sentinel.late_ns.max / 1e6 if stats is not None and stats.sentinel is not None else 0.0


def check_flows(samples: list[TcpSample], t_start: float, t_end: float, stall_ms: float = 0.0) -> list[TcpSample]:
    assert samples
    assert all(PORT in (s.sport, s.dport) for s in samples)  # the kernel's filter / ss's own
    assert not [s for s in samples if OTHER_PORT in (s.sport, s.dport)]
    assert all(t_start <= s.t_s <= t_end for s in samples)  # CLOCK_MONOTONIC, as time.monotonic()
    # The receiver's socket is there too, its addresses shown as IPv4 although it is dual-stack.
    assert any(s.src == "10.0.0.2" and s.sport == PORT for s in samples)
    sender = data_flow(samples)
    cwnd = [s.cwnd_pkts for s in sender]
    assert min(cwnd) >= 1 and max(cwnd) > 20 and len(set(cwnd)) > 5, cwnd[:50]
    # srtt starts at the path RTT (the handshake's sample) and never exceeds path + full queue,
    # but for what a stall of the machine added (one CI simulation: srtt 250 ms).
    srtt = [s.srtt_ms for s in sender]
    assert None not in srtt
    assert all(PATH_RTT_MS <= r < MAX_RTT_MS + stall_ms for r in srtt), (min(srtt), max(srtt), stall_ms)
    assert max(srtt) > 3 * PATH_RTT_MS  # reno fills the queue: bufferbloat
    # Slow start first, then the queue overflows (cwnd > 9 + 100 packets) and ssthresh is set.
    assert sender[0].ssthresh_pkts is None
    assert any(s.ssthresh_pkts is not None and s.ssthresh_pkts < max(cwnd) for s in sender)
    return sender


# The tracepoint ----------------------------------------------------------------------------

def test_tracepoint_probe_records_only_its_ports(net, procs, tracepoint, tmp_path):
    serve(net, procs, PORT, OTHER_PORT)
    raw = tmp_path / "tcp_probe.txt"
    probe = TracepointProbe(RUN, [PORT], raw)
    t_start = time.monotonic()
    with probe:
        assert (probe.instance / "trace_clock").read_text().split("[")[1].startswith("mono]")
        assert (probe.instance / "events/tcp/tcp_probe/enable").read_text().strip() == "1"
        two_flows(net, procs)
    t_end = time.monotonic()
    assert not probe.instance.exists()
    probe.stop()  # a second stop does nothing
    assert probe.lost_events == 0
    sender = check_flows(read_samples(raw, "tracepoint"), t_start, t_end, machine_stall_ms(net))
    # One sample per ACK: ~430 ACKs/s for a flow that gets half of 10 Mbit/s, for 3 s.
    assert len(sender) > 500
    assert all(s.snd_una is not None and s.cookie is not None for s in sender)
    assert len({s.cookie for s in sender}) == 1


def test_tracepoint_instance_goes_although_streaming_failed(net, procs, tracepoint):
    serve(net, procs, PORT)
    probe = TracepointProbe(RUN, [PORT], Path("/dev/full"))  # every write: ENOSPC
    probe.start()
    try:
        client = net.exec("h1", ["iperf3", "-c", "h2", "-p", str(PORT), "-t", "1"], timeout_s=15)
        assert client.returncode == 0
    except BaseException:
        probe.stop(raise_errors=False)
        raise
    with pytest.raises(MachineError, match="No space left"):
        probe.stop()
    assert not probe.instance.exists()
    probe.stop()


def test_a_second_probe_of_the_same_run_is_refused_and_stale_instances_go(tracepoint, tmp_path):
    run = f"{RUN}-stale"
    stale = TRACEFS / "instances" / f"{INSTANCE_PREFIX}{run}"
    with TracepointProbe(run, [PORT], tmp_path / "a.txt") as first:
        with pytest.raises(MachineError, match="bloatlab clean removes it"):
            TracepointProbe(run, [PORT], tmp_path / "b.txt").start()
        assert first.instance.exists()
    assert not stale.exists()
    # What a crash leaves: an instance with its event enabled and filtered, nobody reading it.
    stale.mkdir()
    try:
        (stale / "events/tcp/tcp_probe/filter").write_text(f"sport == {PORT}")
        (stale / "events/tcp/tcp_probe/enable").write_text("1")
        others = [p.name for p in (TRACEFS / "instances").glob(f"{INSTANCE_PREFIX}*") if p != stale]
        # Another session's live probes are not ours to remove; `bloatlab clean` (runs=None) would.
        removed = remove_stale_instances(runs=[run]) if others else remove_stale_instances()
        assert removed == [str(stale)]
        assert not stale.exists()
    finally:
        if stale.exists():
            (stale / "events/enable").write_text("0")
            stale.rmdir()


# ss polling --------------------------------------------------------------------------------

def test_ss_probe_polls_the_flows_on_its_ports(net, procs, tmp_path):
    serve(net, procs, PORT, OTHER_PORT)
    raw = tmp_path / "ss.txt"
    probe = SsProbe(net, ["h1", "h2"], [PORT], raw, interval_s=0.1)
    t_start = time.monotonic()
    with probe:
        two_flows(net, procs)
    t_end = time.monotonic()
    assert probe.failed_polls == 0 and probe.polls >= 2 * 25  # two hosts, 10 a second, >= 3 s
    sender = check_flows(read_samples(raw, "ss"), t_start, t_end, machine_stall_ms(net))
    assert 20 <= len(sender) <= 45
    assert 0.09 < statistics.median(b.t_s - a.t_s for a, b in zip(sender, sender[1:])) < 0.13
    assert all(s.snd_una is None for s in sender) and len({s.cookie for s in sender}) == 1
