"""Real networks: namespaces, veths, qdiscs, the datapath, real ping and iperf3."""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from bloatlab.errors import BloatlabError, MachineError
from bloatlab.interrupts import Interrupts
from bloatlab.proc import alive as process_alive
from bloatlab.specs.model import DirectionSpec, HostSpec, LinkSpec, QueueSpec, SwitchSpec, Topology
from bloatlab.testbed import netns
from bloatlab.testbed.capabilities import kernel_qdiscs as available_qdiscs
from bloatlab.testbed.datapath import KIND_DEQUEUE, KIND_ENQUEUE, read_qlog
from bloatlab.testbed.datapath_stats import SwitchStats
from bloatlab.testbed.links.base import Port
from bloatlab.testbed.links.kernel import KernelBackend
from bloatlab.testbed.network import Network, leftovers

pytestmark = pytest.mark.netns

MBIT = 1_000_000
MS = 1_000_000  # ns


def topology(*links_: LinkSpec, switches=()) -> Topology:
    hosts = [end for link in links_ for end in link.ends if end not in switches]
    return Topology(hosts={h: HostSpec(h) for h in dict.fromkeys(hosts)},
                    switches={s: SwitchSpec(s) for s in switches}, links=list(links_))


def ping(net: Network, src: str, dst: str, count: int = 5, size: int = 56) -> list[float]:
    out = net.exec(src, ["ping", "-n", "-c", str(count), "-i", "0.05", "-s", str(size), "-W", "2", dst], timeout_s=15)
    assert out.returncode == 0, out.stdout + out.stderr
    return [float(t) for t in re.findall(r"time=([\d.]+) ms", out.stdout)]


def link(a: str, b: str, backend: str = "kernel", queue_at: str = "link", **direction) -> LinkSpec:
    d = DirectionSpec(**direction)
    return LinkSpec(name=f"{a}-{b}", ends=(a, b), forward=d, reverse=d, backend=backend, queue_at=queue_at)


def pfifo(ns: str, iface: str) -> dict:
    """The pfifo on ns/iface as `tc -s -j` shows it."""
    out = subprocess.run(["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", iface], capture_output=True, text=True)
    return next(q for q in json.loads(out.stdout) if q["kind"] == "pfifo")


def pfifo_backlogs(net: Network, ns: str, iface: str, client: subprocess.Popen) -> list[tuple[int, int]]:
    """(packets, bytes) in the pfifo on ns/iface, sampled every 50 ms while `client` runs."""
    backlogs = []
    while client.poll() is None:
        q = pfifo(ns, iface)
        if q["qlen"]:
            backlogs.append((q["qlen"], q["backlog"]))
        time.sleep(0.05)
    return backlogs


def assert_frames_not_gso_packets(backlogs: list[tuple[int, int]]) -> None:
    """A pfifo's (packets, bytes) samples hold frames of at most 1514 B. tc reads a qdisc's qlen
    and its byte backlog at two moments, unlocked: a burst enqueued in between can count in the
    bytes and not the packets (one sample in ~40 in CI). So most samples, and all of them
    together: a GSO packet would be up to 43 frames' bytes."""
    exact = [nbytes <= pkts * 1514 for pkts, nbytes in backlogs]
    assert sum(exact) >= 0.8 * len(exact), backlogs
    assert sum(b for _, b in backlogs) <= 1.05 * 1514 * sum(p for p, _ in backlogs), backlogs


def iperf3(net: Network, seconds: int, cc: str) -> subprocess.Popen:
    net.popen("h2", ["iperf3", "-s", "-1", "-B", net.address("h2")], stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    return net.popen("h1", ["iperf3", "-c", "h2", "-t", str(seconds), "-C", cc, "-J"], stdout=subprocess.PIPE, text=True)


def test_kernel_link_pings_by_name_and_shapes_to_its_rate(names):
    topo = topology(link("h1", "h2", rate_bps=10 * MBIT, queue=QueueSpec(packets=100)))
    with Network(topo, names("tk1")) as net:
        assert net.backends == ["kernel"]
        rtts = ping(net, "h1", "h2")  # by name: /etc/netns/.../hosts
        assert len(rtts) == 5 and min(rtts) < 2.0  # no delay configured: well under a millisecond
        # The queue sits between the hosts, as a router's: not on h1's own interface.
        port = net.queue_port(0, "forward")
        assert (port.ns, port.iface) == ("bloatlab.tk1._dp", "l0b")
        qdiscs = subprocess.run(["tc", "-n", port.ns, "qdisc", "show", "dev", port.iface], capture_output=True, text=True).stdout
        assert "qdisc htb 1: root" in qdiscs and "pfifo 10: parent 1:1 limit 100p" in qdiscs
        own = net.exec("h1", ["tc", "qdisc", "show", "dev", "h1-eth0"]).stdout
        assert "htb" not in own and "pfifo" not in own
        # Cubic fills a router's queue to its limit: TCP small queues on h1 do not reach it
        # (on h1's own interface they kept it near empty), and it holds frames, not GSO packets.
        client = iperf3(net, 4, "cubic")
        backlogs = pfifo_backlogs(net, port.ns, port.iface, client)
        # Full: a pfifo drops only at its limit. (Sampled every 50 ms, the backlog may miss slow
        # start's brief peak, and after it cubic takes about 4 s to grow back: 75 once in CI.)
        assert pfifo(port.ns, port.iface)["drops"] > 0 and max(pkts for pkts, _ in backlogs) >= 50, backlogs
        assert_frames_not_gso_packets(backlogs)
        # Physics: TCP through a 10 Mbit/s htb gets 10 Mbit/s times its payload share of a frame.
        received_bps = json.loads(client.stdout.read())["end"]["sum_received"]["bits_per_second"]
        goodput_bps = 10 * MBIT * 1448 / 1514  # 1448 B of payload per 1514 B frame (timestamps on)
        assert 0.93 * goodput_bps < received_bps < 1.03 * goodput_bps


def test_kernel_queue_at_the_sender_is_its_own_interface_queue(names):
    topo = topology(link("h1", "h2", queue_at="sender", rate_bps=10 * MBIT, queue=QueueSpec(packets=100)))
    with Network(topo, names("tk9")) as net:
        assert net.queue_port(0, "forward") == Port("bloatlab.tk9.h1", "h1-eth0")
        assert not netns.exists("bloatlab.tk9._dp")  # nothing between the hosts
        # The host's own pfifo holds frames, not TCP's 64 KB GSO super-packets: its limit of
        # 100 packets means 100 frames, as on the userspace backend.
        client = iperf3(net, 2, "bbr")
        backlogs = pfifo_backlogs(net, "bloatlab.tk9.h1", "h1-eth0", client)
        assert backlogs and max(pkts for pkts, _ in backlogs) >= 10, backlogs
        assert_frames_not_gso_packets(backlogs)
        assert json.loads(client.stdout.read())["end"]["sum_received"]["bits_per_second"] > 0.9 * 10 * MBIT * 1448 / 1514


def test_switch_joins_hosts_and_down_leaves_nothing(names):
    topo = topology(link("h1", "s0", rate_bps=10 * MBIT), link("s0", "h2", rate_bps=10 * MBIT),
                    link("s0", "h3"), switches=("s0",))
    net = Network(topo, names("tk2")).up()
    assert sorted(leftovers("tk2")) == sorted(
        [f"bloatlab.tk2.{n}" for n in ("h1", "h2", "h3", "s0", "_dp")]
        + [f"/etc/netns/bloatlab.tk2.{h}" for h in ("h1", "h2", "h3")] + ["/run/bloatlab/tk2"])
    ports = net.exec("s0", ["ip", "-o", "link", "show", "master", "br0"]).stdout
    assert {"s0-eth0", "s0-eth1", "s0-eth2"} <= set(re.findall(r"s0-eth\d", ports))
    assert ping(net, "h3", "h1", count=2) and ping(net, "h2", "h3", count=2)
    sleeper = net.popen("h1", ["sleep", "60"])  # down() must end what runs in the network
    removed = net.down()
    assert sleeper.wait(timeout=5) != 0
    assert "namespace bloatlab.tk2.s0" in removed
    assert leftovers("tk2") == []


def test_two_networks_coexist(names):
    topo = topology(link("h1", "h2", rate_bps=10 * MBIT))
    with Network(topo, names("tka")) as a, Network(topo, names("tkb")) as b:
        assert ping(a, "h1", "h2", count=2) and ping(b, "h1", "h2", count=2)
        b.down()
        assert ping(a, "h1", "h2", count=2)


def test_attach_finds_a_network_by_name(names):
    topo = topology(link("h1", "h2", rate_bps=10 * MBIT))
    Network(topo, names("tk3"), detach=True).up()
    net = Network.attach("tk3")
    assert net.topology == topo and net.backends == ["kernel"] and net.address("h2") == "10.0.0.2"
    assert ping(net, "h2", "h1", count=1)
    with pytest.raises(BloatlabError, match="no host 'h9'"):
        net.exec("h9", ["true"])
    net.down()
    assert leftovers("tk3") == []
    with pytest.raises(BloatlabError, match="no network named 'tk3'"):
        Network.attach("tk3")


def test_kernel_link_the_kernel_cannot_serve_fails_before_building(names):
    if available_qdiscs().get("netem"):
        pytest.skip("this kernel has netem")
    topo = topology(link("h1", "h2", rate_bps=10 * MBIT, delay_ns=5 * MS))
    with pytest.raises(MachineError) as error:
        Network(topo, names("tk4")).up()
    assert str(error.value) == ('links[0].backend: the kernel backend needs the netem qdisc for delay, and '
                                'this kernel has none (see bloatlab doctor); use backend = "userspace" or "auto"')
    assert leftovers("tk4") == []


def test_a_failure_midway_removes_what_was_built(names):
    # pfifo takes a 32-bit limit: tc refuses this one after namespaces and veths exist.
    topo = topology(link("h1", "s0"), link("s0", "h2", queue=QueueSpec(packets=2**33)), switches=("s0",))
    with pytest.raises(BloatlabError) as error:
        Network(topo, names("tk5")).up()
    assert "pfifo" in str(error.value) and "\n" not in str(error.value)
    assert leftovers("tk5") == []


def test_ctrl_c_midway_removes_what_was_built(names, monkeypatch):
    seen = []
    real_add_link = KernelBackend.add_link

    def interrupted(self, index, link_, a, b):
        if index == 1:
            seen.extend(leftovers("tk6"))
            raise KeyboardInterrupt
        real_add_link(self, index, link_, a, b)

    monkeypatch.setattr(KernelBackend, "add_link", interrupted)
    topo = topology(link("h1", "s0"), link("s0", "h2"), switches=("s0",))
    with pytest.raises(KeyboardInterrupt):
        Network(topo, names("tk6")).up()
    assert "bloatlab.tk6.h1" in seen  # it was midway
    assert leftovers("tk6") == []


def test_a_taken_name_is_refused_and_left_alone(names):
    topo = topology(link("h1", "h2"))
    with Network(topo, names("tk7")):
        with pytest.raises(BloatlabError, match="exists already"):
            Network(topo, "tk7").up()
        assert len(leftovers("tk7")) == 6  # 3 namespaces (h1, h2, _dp), 2 /etc/netns dirs, the state dir




def star(hosts: int, backend: str = "kernel") -> Topology:
    return topology(*(link("s0", f"h{i}", backend) for i in range(1, hosts + 1)), switches=("s0",))


def test_a_star_is_built_in_bulk_and_down_leaves_nothing(names):
    """Every object netns makes in bulk, as ip, sysctl and ethtool see it from outside; two
    builds in one process leave it no file open more than one."""
    opened = []
    for _ in range(2):
        with Network(star(12), names("star")) as net:
            for i in range(1, 13):
                ns, iface = net.namespace(f"h{i}"), f"h{i}-eth0"
                (shown,) = json.loads(netns.ip(ns, "-j", "addr", "show", "dev", iface))
                assert shown["operstate"] == "UP" and [(a["local"], a["prefixlen"]) for a in shown["addr_info"]
                                                       if a["family"] == "inet"] == [(net.address(f"h{i}"), 24)]
                assert "UP" in json.loads(netns.ip(ns, "-j", "link", "show", "lo"))[0]["flags"]
                cc = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n", "net.ipv4.tcp_congestion_control"],
                                    capture_output=True, text=True).stdout.strip()
                assert net.host_cc[f"h{i}"] == cc
            s0 = net.namespace("s0")
            ports = {entry["ifname"] for entry in json.loads(netns.ip(s0, "-j", "link", "show", "master", "br0"))}
            assert ports == {f"s0-eth{i}" for i in range(12)}
            for ns in (s0, net.datapath_namespace):
                for scope in ("all", "default"):
                    assert subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n",
                                           f"net.ipv6.conf.{scope}.disable_ipv6"],
                                          capture_output=True, text=True).stdout.strip() == "1"
            offloads = subprocess.run(["ip", "netns", "exec", net.namespace("h12"), "ethtool", "-k", "h12-eth0"],
                                      capture_output=True, text=True).stdout
            assert re.findall(r"^(?:tcp-segmentation-offload|generic-receive-offload|tx-checksumming): (\w+)",
                              offloads, re.MULTILINE) == ["off", "off", "off"]
            assert max(ping(net, "h1", "h12", count=2)) < 100
        assert leftovers(net.name) == []
        opened.append(len(os.listdir("/proc/self/fd")))
    assert opened[1] == opened[0]  # no socket left in a namespace, which would keep it alive


def test_a_netlink_failure_midway_removes_what_was_built(names, monkeypatch):
    real_add_link = KernelBackend.add_link

    def taken_name(self, index, link_, a, b):
        if index == 1:  # an interface by the name the link's end is to have: the kernel refuses the veth
            netns.ip(b.ns, "link", "add", b.iface, "type", "veth", "peer", "name", "squat0")
        real_add_link(self, index, link_, a, b)

    monkeypatch.setattr(KernelBackend, "add_link", taken_name)
    with pytest.raises(MachineError) as error:
        Network(star(2), names("nlf")).up()
    message = str(error.value)
    assert "\n" not in message and message.startswith("netlink: `ip link add h2-eth0 netns bloatlab.nlf.h2 index ")
    assert message.endswith("failed: File exists")
    assert leftovers("nlf") == []


def test_userspace_link_delays_and_carries_arp(names, datapath_binary, tmp_path):
    d = dict(rate_bps=10 * MBIT, delay_ns=5 * MS, queue=QueueSpec(packets=100))
    topo = topology(link("h1", "h2", "userspace", **d))
    with Network(topo, names("tu1"), qlog_dir=tmp_path) as net:
        assert net.backends == ["userspace"]
        dp = net.datapath
        assert dp.alive()
        rtts = ping(net, "h1", "h2", count=10)
        # 5 ms each way plus a 98-byte frame's 78 us at 10 Mbit/s each way.
        assert 10.0 <= min(rtts) <= 10.5, rtts
        neigh = net.exec("h1", ["ip", "neigh", "show", "10.0.0.2"]).stdout
        mac = net.exec("h2", ["cat", "/sys/class/net/h2-eth0/address"]).stdout
        assert mac.strip() in neigh  # ARP crossed the emulated link
        time.sleep(0.5)  # the stats file is rewritten every 200 ms
        forward = dp.stats().links["h1-h2"].forward
        assert forward.departures >= 10 and forward.drops["queue_full"] == 0
    # Its final report came before its sockets closed, and it was waited for after the rest.
    assert not process_alive(dp.pid, dp.starttime)
    final = net.final_datapath_stats
    assert final.running is False and final.links["h1-h2"].forward.departures >= forward.departures
    log = read_qlog(tmp_path / "h1-h2.forward.qlog")
    assert (log["kind"] == KIND_ENQUEUE).sum() >= 10
    sojourn_ns = log["value"][log["kind"] == KIND_DEQUEUE]
    assert sojourn_ns.max() < 2 * MS  # an idle link: nothing waits behind a ping


@pytest.mark.parametrize("backend", ["kernel", "userspace"])
def test_the_first_packet_after_up_gets_through(names, backend, request):
    if backend == "userspace":
        request.getfixturevalue("datapath_binary")
    topo = topology(link("h1", "s0", backend, rate_bps=10 * MBIT), link("s0", "h2", backend, rate_bps=10 * MBIT),
                    switches=("s0",))
    with Network(topo, names("tk8")) as net:
        # Were an interface's carrier not yet applied by the kernel, it would drop the first ARP
        # request, and ARP would retry only a second later.
        assert ping(net, "h1", "h2", count=1)[0] < 100


def test_auto_serves_what_the_kernel_lacks_in_userspace(names, datapath_binary):
    if available_qdiscs().get("netem"):
        pytest.skip("this kernel has netem")
    topo = topology(link("h1", "s0", "auto", rate_bps=10 * MBIT),
                    link("s0", "h2", "auto", delay_ns=2 * MS), switches=("s0",))
    with Network(topo, names("tu2")) as net:
        assert net.backends == ["kernel", "userspace"]
        assert netns.exists("bloatlab.tu2._dp")
        assert 4.0 <= min(ping(net, "h1", "h2", count=5)) <= 4.5


def test_on_hosts_runs_with_addresses_before_the_datapath_and_a_failure_there_removes_all(names, datapath_binary):
    """What a run starts its servers in: every host addressed, the datapath not yet started; a
    server started there is reachable once up() returns, and a failure there tears down."""
    topo = topology(link("h1", "s0", backend="userspace"), link("s0", "h2", backend="userspace"), switches=("s0",))
    net = Network(topo, names("onh"))
    seen = {}

    def on_hosts():
        seen["datapath"] = net.datapath
        seen["h2"] = net.exec("h2", ["ip", "-4", "-o", "addr", "show"]).stdout
        net.popen("h2", ["python3", "-m", "http.server", "-b", net.address("h2"), "8000"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    net.up(on_hosts=on_hosts)
    try:
        assert seen["datapath"] is None and net.datapath is not None
        assert f"inet {net.address('h2')}/" in seen["h2"]
        fetched = net.exec("h1", ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--retry", "20",
                                  "--retry-connrefused", "--retry-delay", "0", f"http://{net.address('h2')}:8000/"],
                           timeout_s=20)
        assert fetched.stdout == "200", fetched.stderr
    finally:
        net.down()
    assert leftovers("onh") == []

    def failing():
        net2.popen("h1", ["sleep", "60"])
        raise MachineError("a server could not start")

    net2 = Network(topo, names("onh2"))
    with pytest.raises(MachineError, match="could not start"):
        net2.up(on_hosts=failing)
    assert leftovers("onh2") == []


class _SignalledInAFinaliser:
    """Sends this process a SIGTERM from inside __del__, where the handler runs: Python prints its
    KeyboardInterrupt as "Exception ignored" and goes on, as when a stop lands in a Popen's
    finaliser (one per command an `up` runs)."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):  # the handler runs at one of these steps, inside __del__
            pass


def test_a_stop_lost_in_a_finaliser_still_undoes_the_build(names, capfd):
    # A flake on 2026-11-28: a SIGTERM sent to `bloatlab up` midway left it up, with status 0.
    topo = topology(link("h1", "h2", backend="kernel"))
    net = Network(topo, names("lost"))
    with Interrupts() as stop, pytest.raises(KeyboardInterrupt):
        net.up(on_hosts=lambda: _SignalledInAFinaliser())  # made and dropped at once
    assert stop.received == signal.SIGTERM
    assert leftovers("lost") == []
    # Not reported as an exception ignored: it was not.
    assert "Exception ignored" not in capfd.readouterr().err


def interfaces(ns: str) -> set[str]:
    return {entry["ifname"] for entry in json.loads(netns.ip(ns, "-j", "link", "show"))} - {"lo"}


def test_a_switch_inside_the_datapath_has_no_namespace_and_joins_its_hosts(names, datapath_binary):
    """Userspace links only: s0 is served inside bloatlab-link. No namespace, no veth to it;
    ARP floods, learning then forwards to one port; the links' delays add up along the path."""
    one_ms = DirectionSpec(delay_ns=1 * MS)
    topo = topology(link("h1", "s0", "userspace", delay_ns=1 * MS), link("s0", "h2", "userspace", delay_ns=1 * MS),
                    link("s0", "h3", "userspace", delay_ns=1 * MS), switches=("s0",))
    assert topo.links[0].forward == one_ms
    with Network(topo, names("tin")) as net:
        assert not netns.exists("bloatlab.tin.s0") and net.inner_switches == {"s0"}
        # One veth end per host in the datapath's namespace, none toward s0.
        assert interfaces(net.datapath_namespace) == {"l0a", "l1b", "l2b"}
        with pytest.raises(BloatlabError) as refused:
            net.exec("s0", ["true"])
        assert "served inside the datapath" in str(refused.value) and "namespace = true" in str(refused.value)
        rtts = ping(net, "h1", "h2", count=40) + ping(net, "h3", "h1", count=5)
        assert min(rtts) >= 4.0, rtts  # two links of 1 ms each way
    assert leftovers(net.name) == []
    stats = net.final_datapath_stats
    s0 = stats.switches["s0"]
    assert s0.flooded >= 2 and s0.forwarded >= 90 and s0.blocked == 0, s0
    # Once learnt, h1's 40 echo requests went to h2 alone: h3's link carried its 5 replies and the
    # floods (ARP, the hosts' IPv6 multicast).
    to_h2, to_h3 = (stats.links[f"s0-{h}"].forward.departures for h in ("h2", "h3"))
    assert to_h2 >= 40 and to_h3 < to_h2 - 20, (to_h2, to_h3)
    for pair in stats.links.values():
        for d in (pair.forward, pair.reverse):
            assert d.late_arrivals.count == 0 and d.drops["tx_error"] == 0, d


def test_a_switch_the_spec_gives_a_namespace_is_a_bridge_there(names, datapath_binary):
    topo = Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={"s0": SwitchSpec("s0", namespace=True)},
                    links=[link("h1", "s0", "userspace"), link("s0", "h2", "userspace")])
    with Network(topo, names("tns")) as net:
        assert net.inner_switches == frozenset()
        assert "br0" in net.exec("s0", ["ip", "-o", "link", "show", "br0"]).stdout
        assert ping(net, "h1", "h2", count=2)
        assert stats_switches(net) == {}


def stats_switches(net: Network) -> dict[str, SwitchStats]:
    return net.datapath.stats().switches


def test_a_frame_crosses_a_path_of_switches_entering_and_leaving_the_datapath_once(names, datapath_binary):
    """h1 - s0, s0 - s1 - s2 and s2 - s0 (a loop), s2 - h2: the loop is broken as a spanning tree
    from s0 breaks it (s1 - s2 blocked, so no flood circles), and TCP crosses from h1 to h2 by
    s0 and s2, each frame read from h1's end once and written to h2's once."""
    topo = topology(link("h1", "s0", "userspace"), link("s0", "s1", "userspace"), link("s1", "s2", "userspace"),
                    link("s2", "s0", "userspace"), link("s2", "h2", "userspace", rate_bps=200 * MBIT),
                    switches=("s0", "s1", "s2"))
    with Network(topo, names("tpath")) as net:
        assert interfaces(net.datapath_namespace) == {"l0a", "l4b"}
        assert ping(net, "h1", "h2", count=3)
        client = iperf3(net, 3, "cubic")
        result = json.loads(client.communicate(timeout=30)[0])
        received_mbps = result["end"]["sum_received"]["bits_per_second"] / 1e6
        assert 150 < received_mbps <= 200, received_mbps
        dp_ns = net.datapath_namespace
        before_down = {e["ifname"]: e["stats64"] for e in json.loads(netns.ip(dp_ns, "-s", "-j", "link", "show"))}
    stats = net.final_datapath_stats.links
    # The blocked link carries nothing either way; s1, off the path, saw only the floods.
    assert [stats["s1-s2"].forward.arrivals, stats["s1-s2"].reverse.arrivals] == [0, 0]
    assert 0 < stats["s0-s1"].forward.arrivals < 100  # ARP, IPv6 multicast
    # Every frame h1 sent crossed, once: what left h1's link went on by s2 - s0 to s2 - h2, and
    # what entered the datapath at h1's end is what its ring took (as the veth counted it).
    sent, crossed, delivered = stats["h1-s0"].forward, stats["s2-s0"].reverse, stats["s2-h2"].forward
    assert abs(crossed.arrivals - sent.departures) <= 20, (crossed, sent)
    assert delivered.arrivals == crossed.departures
    assert delivered.departures + delivered.drops["queue_full"] == delivered.arrivals - delivered.backlog_pkts
    assert abs(before_down["l0a"]["rx"]["packets"] - sent.arrivals) <= 20
    assert abs(before_down["l4b"]["tx"]["packets"] - delivered.departures) <= 20
