"""The datapath under abuse: frames of random bytes, frames past the link's largest, and ten
times the link's rate, all into one 10 Mbit/s link for a few seconds. It must not crash, its
memory must stay bounded, and its books must balance exactly: every frame that arrived left,
was dropped for a counted reason, or waits in the queue."""

import json
import os
import pickle
import random
import subprocess
import time
from pathlib import Path

import pytest

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.specs.model import DirectionSpec, HostSpec, LinkSpec, QueueSpec, Topology
from bloatlab.testbed import netns
from bloatlab.testbed.network import Network

pytestmark = pytest.mark.netns

RATE_BPS = 10_000_000
# The datapath's resident memory may not pass this: its rings (a few MiB per direction), 100
# queued frames and its histograms, with room to spare; a leak of a frame's buffer per arrival
# (over 100k arrivals here) would pass it.
RSS_LIMIT_KIB = 128 * 1024


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def inject(ns: str, iface: str, frames: list[bytes]) -> int:
    """Send raw frames out of `iface` in namespace `ns` (a child process enters it); how many went."""
    script = ("import socket, sys, pickle\n"
              "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
              f"s.bind(({iface!r}, 0))\n"
              "n = 0\n"
              "for f in pickle.load(sys.stdin.buffer):\n"
              "    try:\n"
              "        s.send(f); n += 1\n"
              "    except OSError:\n"
              "        pass\n"
              "print(n)\n")
    done = subprocess.run(["ip", "netns", "exec", ns, "python3", "-c", script], input=pickle.dumps(frames),
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.fixture
def link(names):
    try:
        binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built (make setup)")
    d = DirectionSpec(rate_bps=RATE_BPS, delay_ns=0, queue=QueueSpec(packets=100))
    topo = Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={},
                    links=[LinkSpec(name="h1-h2", ends=("h1", "h2"), forward=d, reverse=d, backend="userspace")])
    with Network(topo, names(f"abuse{os.getpid() % 10000}")) as net:
        yield net


def test_garbage_oversize_and_tenfold_overload_balance_the_books(link):
    net = link
    dp = net.datapath
    h1 = net.namespace("h1")
    # Jumbo frames out of h1 and into the datapath's end: the link's own limit (1518) must drop them.
    for ns in (h1, net.datapath_namespace):
        for entry in json.loads(netns.ip(ns, "-j", "link", "show")):
            if entry["ifname"] != "lo":
                netns.ip(ns, "link", "set", entry["ifname"], "mtu", "9000")
    rng = random.Random(24)
    garbage = [rng.randbytes(rng.randint(14, 1514)) for _ in range(3000)]
    jumbo = [rng.randbytes(9014) for _ in range(300)]
    rss_before = rss_kib(dp.pid)
    sent_garbage = inject(h1, "h1-eth0", garbage)
    sent_jumbo = inject(h1, "h1-eth0", jumbo)
    # Ten times the rate for four seconds: UDP at 100 Mbit/s into 10.
    server = net.popen("h2", ["iperf3", "-s", "-1", "-p", "5299"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        client = net.exec("h1", ["iperf3", "-c", net.address("h2"), "-p", "5299", "-u", "-b", "100M", "-t", "4",
                                 "-l", "1472"], timeout_s=60)
        assert client.returncode == 0, client.stderr
    finally:
        server.terminate()
        server.wait(timeout=10)
    time.sleep(1.0)  # the queue drains (100 frames at 10 Mbit/s: 0.12 s) and the stats settle
    assert dp.alive(), "the datapath died"
    rss_after = rss_kib(dp.pid)
    stats = dp.stats().links["h1-h2"]
    fwd = stats.forward
    print(f"\nabuse: sent {sent_garbage} garbage, {sent_jumbo} jumbo frames; forward {fwd.arrivals} arrivals, "
          f"{fwd.departures} departures, drops {fwd.drops}; RSS {rss_before} -> {rss_after} KiB")
    assert sent_garbage == len(garbage) and sent_jumbo == len(jumbo)
    assert fwd.drops["oversize"] == len(jumbo)  # each counted once, by its reason
    assert fwd.drops["queue_full"] > 10_000  # the overload: 9 frames of 10 turned away
    assert rss_after < RSS_LIMIT_KIB and rss_after - rss_before < 16 * 1024
    for which, d in (("forward", stats.forward), ("reverse", stats.reverse)):
        dropped = sum(n for reason, n in d.drops.items() if reason not in ("rx_overrun", "tx_error"))
        # Exact: arrived = left + dropped for a reason + still queued (nothing in flight: no delay, drained).
        assert d.arrivals == d.departures + dropped + d.backlog_pkts, (which, d)
        assert d.backlog_pkts == 0, (which, d)
