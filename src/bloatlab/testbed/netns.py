"""Network namespaces and the iproute2 and ethtool verbs the testbed is built with.

Each helper is one command through bloatlab.proc, so a failure is a CommandError that quotes
the command and the last line it printed on stderr.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from bloatlab import proc
from bloatlab.proc import CommandError

log = logging.getLogger(__name__)

NETNS_DIR = "/run/netns"  # where `ip netns add` mounts named namespaces

# Offloads that make veths carry frames larger than the MTU or with partial checksums.
OFFLOADS = ("tso", "gso", "gro", "sg", "tx", "rx")


def add(ns: str) -> None:
    proc.run(["ip", "netns", "add", ns])


def delete(ns: str) -> None:
    proc.run(["ip", "netns", "delete", ns])


def exists(ns: str) -> bool:
    return os.path.exists(os.path.join(NETNS_DIR, ns))


def list_namespaces() -> list[str]:
    """Names of all named namespaces: the files in NETNS_DIR, as `ip netns list` reads them
    (read here, a command fewer in every teardown)."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def pids(ns: str) -> list[int]:
    """Processes whose network namespace is `ns`."""
    return pids_by_namespace([ns])[ns]


def pids_by_namespace(namespaces: list[str]) -> dict[str, list[int]]:
    """The processes in each of `namespaces`, from one pass over /proc. As `ip netns pids` finds
    them, a process is in a namespace when its /proc/PID/ns/net is the same file as the
    namespace's in NETNS_DIR; and so is an `ip netns exec NS ...` that has not entered it yet,
    which would otherwise slip in after the namespace's processes were ended."""
    found: dict[str, list[int]] = {ns: [] for ns in namespaces}
    wanted = {}
    for ns in namespaces:
        try:
            st = os.stat(os.path.join(NETNS_DIR, ns))
        except FileNotFoundError:
            continue
        wanted[(st.st_dev, st.st_ino)] = ns
    if not wanted:
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")
            ns = wanted.get((st.st_dev, st.st_ino)) or _entering(entry.name, found)
        except OSError:  # ended meanwhile, or not ours to look into
            continue
        if ns is not None:
            found[ns].append(int(entry.name))
    return found


def _entering(pid: str, namespaces: dict[str, list[int]]) -> str | None:
    """The namespace an `ip netns exec NS ...` process is about to enter, if it is one of these."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    if len(argv) > 3 and os.path.basename(argv[0]) == b"ip" and argv[1:3] == [b"netns", b"exec"]:
        ns = argv[3].decode(errors="replace")
        return ns if ns in namespaces else None
    return None


def ip(ns: str, *args: str) -> str:
    """`ip -n NS ARGS...`"""
    return proc.output(["ip", "-n", ns, *args])


def tc(ns: str, *args: str) -> str:
    """`tc -n NS ARGS...`"""
    return proc.output(["tc", "-n", ns, *args])


def sysctl(ns: str, key: str, value: str | int) -> None:
    sysctls(ns, {key: value})


def sysctls(ns: str, settings: dict[str, str | int]) -> None:
    """Several sysctls of a namespace in one `sysctl` (each entry into a namespace costs a few ms)."""
    proc.run(["sysctl", "-qw", *(f"{key}={value}" for key, value in settings.items())], ns=ns)


def read_sysctl(ns: str, key: str) -> str:
    return proc.output(["sysctl", "-n", key], ns=ns).strip()


# Interface numbers for veth ends, two per pair, never the same twice in this process. The
# kernel starts each new namespace's count at 2, so both ends of a fresh pair get the same
# ifindex; then a carrier change fails linkwatch's test for an urgent event (its ifindex equals
# its peer's), and the interface stays without a qdisc, dropping everything, for up to a second.
# With distinct numbers the ends are running within milliseconds. Above the small numbers the
# kernel hands out itself (lo, bridges), so they never collide inside a namespace.
_IFINDEX = itertools.count(1000, 2)


def veth_pair(a_ns: str, a_iface: str, b_ns: str, b_iface: str) -> None:
    """A veth pair with one end in each namespace."""
    index = next(_IFINDEX)
    # Created right in their namespaces: the root namespace never sees them, so no name clash.
    proc.run(["ip", "link", "add", a_iface, "netns", a_ns, "index", str(index), "type", "veth",
              "peer", "name", b_iface, "netns", b_ns, "index", str(index + 1)])


def offloads_off(ends: Iterable[tuple[str, str]]) -> None:
    """Turn off segmentation, aggregation and checksum offloads of each (namespace, interface),
    so queues see real frames; side by side, as each is an `ethtool` of a few milliseconds.

    A feature the driver refuses is logged and skipped: the datapath counts any oversize
    frame that still gets through.
    """
    ends = list(ends)
    with ThreadPoolExecutor(max(1, len(ends))) as pool:
        for done in [pool.submit(_offloads_off, ns, iface) for ns, iface in ends]:
            done.result()


def _offloads_off(ns: str, iface: str) -> None:
    try:
        proc.run(["ethtool", "-K", iface, *(arg for f in OFFLOADS for arg in (f, "off"))], ns=ns)
        return
    except CommandError:
        pass
    for feature in OFFLOADS:  # one at a time, to keep every feature the driver allows
        try:
            proc.run(["ethtool", "-K", iface, feature, "off"], ns=ns)
        except CommandError as e:
            log.debug("%s/%s: driver refuses %s off: %s", ns, iface, feature, e)


def single_segments(ns: str, iface: str) -> None:
    """Make a host's TCP hand `iface` one segment per packet.

    TCP builds GSO super-packets whatever the device's features and cuts them up only as they
    leave the qdisc, so a shaping qdisc on a host's own interface would hold up to 64 KB as one
    packet, and a limit of N packets would hold N of them. Segments a switch forwards are
    single frames already, so this only changes a host's own traffic.
    """
    try:
        proc.run(["ip", "link", "set", "dev", iface, "gso_max_segs", "1"], ns=ns)
    except CommandError as e:
        log.debug("%s/%s: gso_max_segs 1 refused: %s", ns, iface, e)
