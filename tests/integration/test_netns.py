"""netns: namespaces, veths, bridges, addresses, sysctls and offloads that this process makes
itself (no `ip`, `sysctl` or `ethtool` per object), checked with those tools from outside."""

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from bloatlab.errors import MachineError
from bloatlab.interrupts import Interrupts
from bloatlab.testbed import netns

pytestmark = pytest.mark.netns

CC = "net.ipv4.tcp_congestion_control"


@pytest.fixture
def spaces():
    """Namespace names for one test, named as a tool's (bloatlab-WHAT-PID, which `clean` spares
    while this process lives); whatever is left of them is removed afterwards."""
    made: list[str] = []

    def new(tag: str) -> str:
        made.append(f"bloatlab-ns{tag}-{os.getpid()}")
        return made[-1]

    yield new
    for ns in made:
        if netns.exists(ns):
            netns.delete(ns)


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


def links(ns: str) -> dict[str, dict]:
    """`ip -d -j link show` in ns, by interface name."""
    return {link["ifname"]: link for link in json.loads(sh("ip", "-n", ns, "-d", "-j", "link", "show"))}


def features(ns: str, iface: str) -> dict[str, str]:
    """`ethtool -k IFACE` in ns: feature name -> "on" or "off"."""
    shown = sh("ip", "netns", "exec", ns, "ethtool", "-k", iface)
    return {m[1]: m[2] for m in re.finditer(r"^\s*([\w-]+): (on|off)", shown, re.MULTILINE)}


def in_ns_sysctl(ns: str, key: str) -> str:
    return sh("ip", "netns", "exec", ns, "sysctl", "-n", key).strip()


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message and "Traceback" not in message, message
    return message


def test_namespaces_are_made_and_removed_as_ip_netns_does(spaces):
    a, b, c = spaces("a"), spaces("b"), spaces("c")
    own = os.stat("/proc/self/ns/net").st_ino
    threads = threading.active_count()
    netns.add(a, b)
    listed = sh("ip", "netns", "list")
    assert a in listed and b in listed
    assert sh("ip", "netns", "exec", a, "ip", "netns", "identify").strip() == a
    assert set(links(a)) == {"lo"}  # a new namespace, not this one
    assert len({os.stat(f"{netns.NETNS_DIR}/{ns}").st_ino for ns in (a, b)} | {own}) == 3
    # This thread never left its own namespace, and no thread of ours is left in one.
    assert os.stat("/proc/self/ns/net").st_ino == own and threading.active_count() == threads

    with pytest.raises(MachineError) as taken:  # b is there: c, after it, is not made
        netns.add(b, c)
    assert f"could not make namespace {b}" in one_line(taken) and "File exists" in str(taken.value)
    assert netns.exists(b) and sh("ip", "netns", "exec", b, "true") == "" and not netns.exists(c)

    netns.delete(a)
    assert a not in sh("ip", "netns", "list") and not netns.exists(a)
    assert f"{netns.NETNS_DIR}/{a}" not in open("/proc/self/mountinfo").read()
    with pytest.raises(MachineError) as gone:
        netns.delete(a)
    assert f"could not remove namespace {a}" in one_line(gone)


def test_sysctls_are_the_namespaces_own(spaces):
    ns = spaces("s")
    netns.add(ns)
    machines = open(f"/proc/sys/{CC.replace('.', '/')}").read().strip()
    other = "cubic" if machines == "reno" else "reno"  # both are built into Linux
    netns.write_sysctls({ns: {CC: other, "net.ipv6.conf.all.disable_ipv6": 1}})
    assert in_ns_sysctl(ns, CC) == other and in_ns_sysctl(ns, "net.ipv6.conf.all.disable_ipv6") == "1"
    assert open(f"/proc/sys/{CC.replace('.', '/')}").read().strip() == machines  # this namespace's is untouched
    assert netns.read_sysctls([ns], CC) == {ns: other} and netns.read_sysctl(ns, CC) == other

    with pytest.raises(MachineError) as unknown:
        netns.sysctl(ns, "net.ipv4.no_such_knob", 1)
    assert one_line(unknown) == f"could not set sysctl net.ipv4.no_such_knob in namespace {ns}: no such sysctl"
    with pytest.raises(MachineError) as refused:
        netns.sysctl(ns, CC, "no-such-cc")
    assert one_line(refused).startswith(f"could not set sysctl {CC} = no-such-cc in namespace {ns}: refused")
    with pytest.raises(MachineError) as missing:
        netns.read_sysctl(spaces("none"), CC)
    assert "no namespace bloatlab-nsnone" in one_line(missing)


def test_offloads_are_really_off(spaces):
    a, b = spaces("oa"), spaces("ob")
    netns.add(a, b)
    netns.veth_pair(a, "x0", b, "y0")
    assert features(a, "x0")["tcp-segmentation-offload"] == "on"  # a veth's own: there is something to turn off
    netns.offloads_off([(a, "x0")])
    off = features(a, "x0")
    for name in ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload",
                 "scatter-gather", "tx-checksumming", "rx-checksumming"):
        assert off[name] == "off", (name, off)
    # ethtool's `tso` is every TCP segmentation the kernel has, the newest (accecn) too.
    assert [name for name, state in off.items() if re.fullmatch(r"tx-tcp.*-segmentation", name) and state == "on"] == []
    assert features(b, "y0")["tcp-segmentation-offload"] == "on"  # the peer was not asked

    with pytest.raises(MachineError) as missing:
        netns.offloads_off([(a, "nope")])
    assert one_line(missing) == f"no interface nope in namespace {a} to turn offloads off on"


def test_netlink_builds_what_ip_shows(spaces):
    a, b = spaces("la"), spaces("lb")
    netns.add(a, b)
    with netns.Netlink() as netlink:
        netlink.veth_pair(a, "x0", b, "y0")
        netlink.add_bridge(a, "br0")
        netlink.set_link(a, "x0", master="br0", promisc=True, up=True)
        netlink.add_address(b, "y0", "10.9.0.2/24")
        netlink.set_link(b, "y0", gso_max_segs=1, up=True)
    seen_a, seen_b = links(a), links(b)
    x0, y0, br0 = seen_a["x0"], seen_b["y0"], seen_a["br0"]
    # Each end its own ifindex, above the kernel's own small numbers (the linkwatch comment in netns.py).
    assert x0["ifindex"] >= 1000 and y0["ifindex"] == x0["ifindex"] + 1
    assert x0["master"] == "br0" and {"PROMISC", "UP"} <= set(x0["flags"])
    assert br0["linkinfo"]["info_kind"] == "bridge" and "UP" in br0["flags"]
    assert y0["gso_max_segs"] == 1 and "UP" in y0["flags"]
    (shown,) = json.loads(sh("ip", "-n", b, "-j", "addr", "show", "dev", "y0"))
    assert {"family": "inet", "local": "10.9.0.2", "prefixlen": 24} in [
        {k: info[k] for k in ("family", "local", "prefixlen")} for info in shown["addr_info"]]
    assert "x0" not in sh("ip", "link", "show")  # made right in their namespaces

    with netns.Netlink() as netlink:
        with pytest.raises(MachineError) as taken:
            netlink.veth_pair(a, "x0", b, "y1")
        assert one_line(taken).startswith(f"netlink: `ip link add x0 netns {a} index ")
        assert str(taken.value).endswith("failed: File exists")
        with pytest.raises(MachineError) as missing:
            netlink.set_link(b, "nope", up=True)
        assert one_line(missing) == f"netlink in {b}: `ip link set nope up` failed: No such device"
        with pytest.raises(MachineError) as no_namespace:
            netlink.add_bridge(spaces("none"), "br0")
        assert "no namespace bloatlab-nsnone" in one_line(no_namespace)


def test_running_is_the_carrier_the_link_watch_applied(spaces):
    a, b = spaces("ra"), spaces("rb")
    netns.add(a, b)
    netns.veth_pair(a, "x0", b, "y0")
    ends = [(a, "x0"), (b, "y0"), (a, "nope")]
    assert netns.running(ends) == set()
    with netns.Netlink() as netlink:
        netlink.set_link(a, "x0", up=True)
        assert netns.running(ends) == set()  # its peer is down: no carrier
        netlink.set_link(b, "y0", up=True)
    deadline = time.monotonic() + 2
    while netns.running(ends) != {(a, "x0"), (b, "y0")}:
        assert time.monotonic() < deadline, netns.running(ends)
        time.sleep(0.01)
    assert json.loads(sh("ip", "-n", a, "-j", "link", "show", "x0"))[0]["operstate"] == "UP"


def test_a_socket_into_a_deleted_namespace_keeps_it_until_closed(spaces):
    """Why a Netlink must be closed before its namespaces go: the namespace, and the veths in
    it, live on while a socket is in it."""
    a, b = spaces("ka"), spaces("kb")
    netns.add(a, b)
    netns.veth_pair(a, "x0", b, "y0")
    netlink = netns.Netlink()
    try:
        netlink.set_link(a, "x0", up=True)
        netns.delete(a)
        time.sleep(0.2)
        assert "y0" in links(b)  # x0 lives on in the namespace the socket holds, and so does its peer
    finally:
        netlink.close()
    deadline = time.monotonic() + 5
    while "y0" in links(b):  # the kernel frees the namespace, x0 and so y0
        assert time.monotonic() < deadline, "the namespace outlived its last socket"
        time.sleep(0.02)


@contextlib.contextmanager
def python_default_sigint():
    """Python's own SIGINT handler, whatever this process was started with: a job a shell starts in
    the background inherits SIGINT ignored, and Python then installs none."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("handler", ["default", "bloatlab"])
def test_a_stop_waits_for_the_thread_inside_namespaces(spaces, handler):
    """A stop signal while a thread of ours makes namespaces is raised once it is done: what it
    made exists when the caller, interrupted, looks for what to remove."""
    ns = spaces(f"stop{handler}")

    def job():
        os.kill(os.getpid(), signal.SIGINT)  # the caller, waiting, gets it now
        time.sleep(0.2)
        netns._create(ns)

    with Interrupts() if handler == "bloatlab" else python_default_sigint():
        with pytest.raises(KeyboardInterrupt):
            netns._in_thread(job)
    assert netns.exists(ns) and sh("ip", "netns", "exec", ns, "true") == ""
