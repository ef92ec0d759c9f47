"""The netlink qdisc probe against a real htb + pfifo queue, flooded by real iperf3.

Two namespaces of our own (bloatlab-qtest-PID-a and -b) joined by a veth; a's end is shaped
as the kernel backend does it: htb 1: at 10 Mbit/s, class 1:1, pfifo 10: limit 50 under it.
A 50 Mbit/s UDP flood fills the pfifo to its limit and overflows it; the sampler must see
that at 200 Hz and agree with `tc -s -j qdisc show`, which stays the reference.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass

import pytest

from bloatlab import proc
from bloatlab.errors import MachineError
from bloatlab.experiment.probes.qdisc import QdiscReader, QdiscSampler
from bloatlab.testbed import netns

pytestmark = pytest.mark.netns

LIMIT_PKTS = 50
UDP_PAYLOAD = 1400
FRAME_BYTES = UDP_PAYLOAD + 8 + 20 + 14  # UDP, IPv4 and Ethernet headers: 1442 bytes in the queue
IPERF_PORT = 5299


@dataclass
class Pair:
    a: str  # sender's namespace: qa, shaped
    b: str  # receiver's namespace: qb
    addr_b: str = "10.77.0.2"


def wait_running(ns: str, iface: str, timeout_s: float = 5.0) -> None:
    # The kernel starts an interface's qdisc from its link watch, up to a second after `up`.
    deadline = time.monotonic() + timeout_s
    while json.loads(netns.ip(ns, "-j", "link", "show", iface))[0].get("operstate") != "UP":
        assert time.monotonic() < deadline, f"{ns}/{iface} still down after {timeout_s} s"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def pair():
    p = Pair(f"bloatlab-qtest-{os.getpid()}-a", f"bloatlab-qtest-{os.getpid()}-b")
    try:
        for ns in (p.a, p.b):
            netns.add(ns)
            # No IPv6: its router solicitations and MLD reports would share the queue.
            netns.sysctl(ns, "net.ipv6.conf.all.disable_ipv6", 1)
            netns.sysctl(ns, "net.ipv6.conf.default.disable_ipv6", 1)
            netns.ip(ns, "link", "set", "lo", "up")
        for a_if, b_if, subnet in (("qa", "qb", "10.77.0"), ("qc", "qd", "10.78.0")):
            proc.output(["ip", "link", "add", a_if, "netns", p.a, "type", "veth",
                       "peer", "name", b_if, "netns", p.b])
            netns.ip(p.a, "addr", "add", f"{subnet}.1/24", "dev", a_if)
            netns.ip(p.b, "addr", "add", f"{subnet}.2/24", "dev", b_if)
            for ns, iface in ((p.a, a_if), (p.b, b_if)):
                proc.output(["ethtool", "-K", iface, "tso", "off", "gso", "off", "gro", "off"], ns=ns)
        netns.tc(p.a, "qdisc", "add", "dev", "qa", "root", "handle", "1:", "htb", "default", "1")
        netns.tc(p.a, "class", "add", "dev", "qa", "parent", "1:", "classid", "1:1", "htb", "rate", "10mbit")
        netns.tc(p.a, "qdisc", "add", "dev", "qa", "parent", "1:1", "handle", "10:", "pfifo",
                 "limit", str(LIMIT_PKTS))
        netns.tc(p.a, "qdisc", "add", "dev", "qc", "root", "handle", "2:", "bfifo", "limit", "30000")
        for ns, iface in ((p.a, "qa"), (p.b, "qb"), (p.a, "qc"), (p.b, "qd")):
            netns.ip(ns, "link", "set", iface, "up")
        for ns, iface in ((p.a, "qa"), (p.b, "qb"), (p.a, "qc")):
            wait_running(ns, iface)
        yield p
    finally:
        for ns in (p.a, p.b):
            if netns.exists(ns):
                netns.delete(ns)


def tc_stats(ns: str, iface: str) -> dict[str, dict]:
    """`tc -s -j qdisc show` per qdisc kind: the reference the probe must agree with."""
    out = subprocess.run(["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", iface],
                         capture_output=True, text=True, check=True, timeout=10).stdout
    return {q["kind"]: q for q in json.loads(out)}


def end(proc: subprocess.Popen) -> None:
    """End a process we started, by its pid, if it still runs."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=3)


def wait_listening(ns: str, port: int, timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not proc.output(["ss", "-Hltn", f"sport = :{port}"], ns=ns).strip():
        assert time.monotonic() < deadline, f"nothing listens on port {port} in {ns}"
        time.sleep(0.02)


def test_sampler_sees_the_pfifo_fill_and_overflow_under_a_udp_flood(pair, tmp_path):
    server = subprocess.Popen(proc.in_namespace(pair.b, ["iperf3", "-s", "-1", "-p", str(IPERF_PORT)]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(pair.b, IPERF_PORT)
        csv_path = tmp_path / "queue.csv"
        with QdiscSampler(pair.a, "qa", csv_path, interval_s=0.005) as sampler:
            # -w: a socket buffer big enough that the qdisc, not the socket, is what overflows
            # (the default 208 KiB holds only about 47 frames of 4.5 KiB truesize).
            client = subprocess.run(
                proc.in_namespace(pair.a, ["iperf3", "-c", pair.addr_b, "-p", str(IPERF_PORT), "-u", "-b", "50M",
                                         "-l", str(UDP_PAYLOAD), "-w", "1M", "-t", "2", "-J"]),
                capture_output=True, text=True, timeout=20)
            time.sleep(0.3)  # the queue drains in 60 ms; then the last samples see it empty
        server.wait(timeout=5)
    finally:
        end(server)
    assert client.returncode == 0, client.stdout[-500:] + client.stderr
    sent_mbps = json.loads(client.stdout)["end"]["sum"]["bits_per_second"] / 1e6
    assert sent_mbps > 30, f"the flood reached only {sent_mbps:.1f} Mbit/s; it must overrun 10 Mbit/s"

    assert sampler.error is None
    assert sampler.leaf is not None and (sampler.leaf.kind, sampler.leaf.handle) == ("pfifo", 0x0010_0000)
    rows = list(csv.DictReader(csv_path.open()))
    assert list(rows[0]) == ["t_s", "iface", "kind", "qlen_pkts", "backlog_bytes", "drops"]
    assert len(rows) == sampler.samples
    assert {(r["iface"], r["kind"]) for r in rows} == {("qa", "pfifo")}
    times = [float(r["t_s"]) for r in rows]
    assert times == sorted(times)
    # 200 Hz asked; at least 100 Hz on average on a loaded 2-core machine.
    assert sampler.mean_interval_s is not None and sampler.mean_interval_s <= 0.010, sampler.mean_interval_s
    assert len(rows) >= 2.3 / 0.010

    qlen = [int(r["qlen_pkts"]) for r in rows]
    backlog = [int(r["backlog_bytes"]) for r in rows]
    drops = [int(r["drops"]) for r in rows]
    # A 5x overload fills the pfifo to its limit, never beyond.
    assert max(qlen) == LIMIT_PKTS
    assert sum(q == LIMIT_PKTS for q in qlen) >= 20, "the full queue should last most of the 2 s"
    # Backlog is whole frames: 1442 bytes each. The odd sample is off, because iperf3's control
    # connection shares the queue and qlen and backlog are read without the qdisc lock.
    busy = [(q, b) for q, b in zip(qlen, backlog) if q >= 10]
    exact = sum(b == q * FRAME_BYTES for q, b in busy)
    assert exact >= 0.9 * len(busy), f"only {exact} of {len(busy)} busy samples hold whole 1442-byte frames"
    # Read without the lock, one counter may be a frame ahead of the other (qlen 49 with 50
    # frames of backlog, about one run in six).
    off = [(q, b) for q, b in busy if not 0.8 * (q - 1) * FRAME_BYTES <= b <= (q + 1) * FRAME_BYTES]
    assert not off, f"{len(off)} of {len(busy)} busy samples are off by more than a frame: {off[:5]}"
    assert all(b == 0 for q, b in zip(qlen, backlog) if q == 0)
    # Drops only grow, and at the end (the queue idle) equal what tc reports.
    assert all(x <= y for x, y in zip(drops, drops[1:]))
    reference = tc_stats(pair.a, "qa")
    assert drops[-1] > 0
    assert drops[-1] == reference["pfifo"]["drops"]
    assert qlen[-1] == 0 and backlog[-1] == 0

    # The reader agrees with tc on every counter of both qdiscs, once the link is idle.
    with QdiscReader(pair.a) as reader:
        before = reader.read(["qa"])
        reference = tc_stats(pair.a, "qa")
        after = reader.read(["qa"])
    assert before == after, "the link should be idle now"
    assert [q.kind for q in after] == ["htb", "pfifo"]
    for q in after:
        tc = reference[q.kind]
        assert (q.qlen_pkts, q.backlog_bytes, q.drops, q.requeues, q.overlimits, q.sent_bytes, q.sent_pkts) == \
            (tc["qlen"], tc["backlog"], tc["drops"], tc["requeues"], tc["overlimits"], tc["bytes"], tc["packets"])
    htb, pfifo = after
    assert htb.is_root and pfifo.parent == 0x0001_0001
    assert htb.drops == pfifo.drops  # htb counts its leaf's drops as its own


def test_reader_sees_every_qdisc_of_its_namespace_only(pair):
    with QdiscReader(pair.a) as reader:
        found = {(q.iface, q.kind) for q in reader.read()}
    assert found == {("lo", "noqueue"), ("qa", "htb"), ("qa", "pfifo"), ("qc", "bfifo")}
    with QdiscReader(pair.b) as reader:
        assert {q.iface for q in reader.read()} == {"lo", "qb", "qd"}


def test_a_missing_interface_or_namespace_is_a_machine_error(pair, tmp_path):
    with QdiscReader(pair.a) as reader:
        with pytest.raises(MachineError, match=f"no interface nope0 in namespace {pair.a}"):
            reader.read(["nope0"])
        with pytest.raises(MachineError, match="no interface qb in namespace"):
            reader.read(["qb"])  # it exists, in the other namespace
    with pytest.raises(MachineError, match="no interface nope0"):
        QdiscSampler(pair.a, "nope0", tmp_path / "q.csv").start()
    with pytest.raises(MachineError, match="no network namespace bloatlab-qtest-none"):
        QdiscReader("bloatlab-qtest-none")


def test_a_root_qdisc_alone_is_sampled_and_its_removal_surfaces_at_stop(pair, tmp_path):
    sampler = QdiscSampler(pair.a, "qc", tmp_path / "q.csv", interval_s=0.002)
    sampler.start()
    sampler.start()  # idempotent
    assert sampler.leaf is not None and (sampler.leaf.kind, sampler.leaf.is_root) == ("bfifo", True)
    time.sleep(0.1)
    netns.tc(pair.a, "qdisc", "del", "dev", "qc", "root")  # qc falls back to noqueue
    deadline = time.monotonic() + 2
    while sampler.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(MachineError, match="the bfifo qdisc 2: on qc .* is gone"):
        sampler.stop()
    sampler.stop()  # idempotent: the error was raised once and stays in .error
    assert isinstance(sampler.error, MachineError)
    assert sampler.samples >= 10
    assert len((tmp_path / "q.csv").read_text().splitlines()) == 1 + sampler.samples
