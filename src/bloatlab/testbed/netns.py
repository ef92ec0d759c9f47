"""Network namespaces and the verbs the testbed is built with.

A build makes hundreds of objects, so nothing here starts a process per object:
    namespaces   made and removed by this process itself, as `ip netns add` and `ip netns
                 delete` do: a namespace bind-mounted on NETNS_DIR/NAME (add, delete)
    links        veths, bridges, addresses and link state through rtnetlink, one socket per
                 namespace (Netlink)
    offloads     SIOCETHTOOL from a socket inside the namespace (offloads_off)
    sysctls      /proc/sys/net of the namespace, which is the one of whoever opens it
                 (write_sysctls, read_sysctls)
What needs to be inside a namespace is done by a thread of ours that enters it (setns) and
then ends; this one never leaves its own namespace. ip and tc (ip(), tc()) run as commands
for the rest; a failure of either kind is a one-line MachineError saying what failed.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import fnmatch
import itertools
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from bloatlab import interrupts, proc
from bloatlab.errors import MachineError

log = logging.getLogger(__name__)

NETNS_DIR = "/run/netns"  # where `ip netns add` mounts named namespaces

# Offloads that make veths carry frames larger than the MTU or with partial checksums, by
# ethtool's names, and the kernel's features behind each (ethtool's off_flag_def: `tso` is
# every tx-tcp*-segmentation, the newest kernels' tx-tcp-accecn-segmentation too).
OFFLOAD_FEATURES = {"tso": "tx-tcp*-segmentation", "gso": "tx-generic-segmentation", "gro": "rx-gro",
                    "sg": "tx-scatter-gather*", "tx": "tx-checksum-*", "rx": "rx-checksum"}

T = TypeVar("T")

# From the kernel's headers: sched.h, mount.h, if.h, sockios.h, ethtool.h, netlink.h, rtnetlink.h.
_CLONE_NEWNET = 0x40000000
_MNT_DETACH = 2
_MS_BIND, _MS_REC, _MS_SHARED = 4096, 16384, 1 << 20
_IFF_UP, _IFF_PROMISC = 0x1, 0x100
_IFREQ_BYTES = 40  # struct ifreq: the name (16), then a union (24) with a pointer to the request
_SIOCETHTOOL = 0x8946
_SOL_NETLINK, _NETLINK_EXT_ACK, _NETLINK_CAP_ACK = 270, 11, 10
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_RTM_NEWLINK, _RTM_GETLINK, _RTM_NEWADDR = 16, 18, 20
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_DUMP, _NLM_F_EXCL, _NLM_F_CREATE = 0x1, 0x4, 0x300, 0x200, 0x400
_NLMSGERR_ATTR_MSG = 1
_IFLA_IFNAME, _IFLA_MASTER, _IFLA_OPERSTATE, _IFLA_LINKINFO, _IFLA_NET_NS_FD, _IFLA_GSO_MAX_SEGS = 3, 10, 16, 18, 28, 40
_IFLA_INFO_KIND, _IFLA_INFO_DATA, _VETH_INFO_PEER = 1, 2, 1
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_IF_OPER_UP = 6
_ETHTOOL_GSSET_INFO, _ETHTOOL_GSTRINGS, _ETHTOOL_SFEATURES = 0x37, 0x1B, 0x3B
_ETH_SS_FEATURES = 4
_ETH_GSTRING_LEN = 32

_libc = ctypes.CDLL(None, use_errno=True)


def _path(ns: str) -> str:
    return os.path.join(NETNS_DIR, ns)


def _os_error(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


# Namespaces ---------------------------------------------------------------------------------

def add(*namespaces: str) -> None:
    """Make each namespace as `ip netns add` does: a new network namespace bind-mounted on
    NETNS_DIR/NAME, where `ip netns exec` and list_namespaces find it. One thread of ours makes
    them all (unshare, then the mount), and ends with the last: no process per namespace, and
    nothing of ours stays inside. A failure leaves no file of the namespace it failed on."""
    _share_netns_dir()
    _in_thread(lambda: [_create(ns) for ns in namespaces])


def _share_netns_dir() -> None:
    """NETNS_DIR as iproute2 leaves it: a shared mount point (bind-mounted on itself the first
    time), so the namespaces mounted in it show in every mount namespace, `ip netns exec`'s too."""
    try:
        os.makedirs(NETNS_DIR, mode=0o755, exist_ok=True)
    except OSError as e:
        raise MachineError(f"could not make {NETNS_DIR}: {e.strerror}") from None
    bound = False
    while _libc.mount(b"", NETNS_DIR.encode(), b"none", _MS_SHARED | _MS_REC, None) != 0:
        if ctypes.get_errno() != errno.EINVAL or bound:
            raise MachineError(f"could not make {NETNS_DIR} a shared mount: {os.strerror(ctypes.get_errno())}")
        if _libc.mount(NETNS_DIR.encode(), NETNS_DIR.encode(), b"none", _MS_BIND | _MS_REC, None) != 0:
            raise MachineError(f"could not bind-mount {NETNS_DIR} on itself: {os.strerror(ctypes.get_errno())}")
        bound = True


def _create(ns: str) -> None:
    """In a thread of ours, which it moves into the new namespace."""
    path = _path(ns)
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    except OSError as e:
        raise MachineError(f"could not make namespace {ns}: {path}: {e.strerror}") from None
    try:
        if _libc.unshare(_CLONE_NEWNET) != 0:
            raise _os_error("unshare")
        if _libc.mount(b"/proc/thread-self/ns/net", path.encode(), b"none", _MS_BIND, None) != 0:
            raise _os_error(f"mount on {path}")
    except OSError as e:
        os.unlink(path)
        raise MachineError(f"could not make namespace {ns}: {e.strerror}") from None


def delete(ns: str) -> None:
    """Remove namespace `ns` as `ip netns delete` does: its mount and its file. The kernel frees
    it, and the veths in it (so their peers too), once nothing is left inside: down() ends
    every process in it first, and a Netlink into it must be closed."""
    path = _path(ns)
    _libc.umount2(path.encode(), _MNT_DETACH)  # fails only if not mounted: the file is removed all the same
    try:
        os.unlink(path)
    except OSError as e:
        raise MachineError(f"could not remove namespace {ns}: {path}: {e.strerror}") from None


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
    """`ip -n NS ARGS...`, a command: for what the verbs here do not do."""
    return proc.output(["ip", "-n", ns, *args])


def tc(ns: str, *args: str) -> str:
    """`tc -n NS ARGS...`"""
    return proc.output(["tc", "-n", ns, *args])


# Inside a namespace -------------------------------------------------------------------------

def _in_thread(job: Callable[[], T]) -> T:
    """job() in a new thread of ours, which it may move into namespaces: a thread's network
    namespace is its own, and one that ends holds none. The caller waits for it to end even
    through a stop signal, raised once it has: what it was making (a namespace, say) is made
    before the caller, interrupted, removes what was made."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = job()
        except BaseException as e:  # handed to the caller
            outcome["error"] = e

    thread = threading.Thread(target=run, name="bloatlab-netns", daemon=True)
    stopped = False
    with interrupts.held() as hold:
        try:
            thread.start()
        except KeyboardInterrupt:
            stopped = True
        while thread.is_alive():
            try:
                thread.join()
            except KeyboardInterrupt:  # no bloatlab.interrupts handler holds it: the default one
                stopped = True
    if stopped or hold.signalled:
        raise KeyboardInterrupt
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _enter(ns: str) -> None:
    """Move this thread (one of _in_thread's) into namespace `ns`."""
    with _namespace_fd(ns) as fd:
        if _libc.setns(fd, _CLONE_NEWNET) != 0:
            raise MachineError(f"could not enter namespace {ns}: {os.strerror(ctypes.get_errno())}")


def _each_inside(namespaces: Iterable[str], work: Callable[[str], T]) -> dict[str, T]:
    """work(ns) inside each namespace, by one thread of ours that enters them in turn."""
    def visit() -> dict[str, T]:
        done = {}
        for ns in namespaces:
            _enter(ns)
            done[ns] = work(ns)
        return done
    return _in_thread(visit)


class _namespace_fd:
    """An open file of namespace `ns` (to enter it, or to name it to the kernel), closed after."""

    def __init__(self, ns: str):
        try:
            self.fd = os.open(_path(ns), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise MachineError(f"no namespace {ns}: {_path(ns)}: {e.strerror}") from None

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


# Sysctls ------------------------------------------------------------------------------------

def sysctl(ns: str, key: str, value: str | int) -> None:
    write_sysctls({ns: {key: value}})


def sysctls(ns: str, settings: Mapping[str, str | int]) -> None:
    write_sysctls({ns: settings})


def write_sysctls(settings: Mapping[str, Mapping[str, str | int]]) -> None:
    """Set sysctls of several namespaces, {namespace: {key: value}}, as `sysctl -w KEY=VALUE`
    inside each would: one thread enters each namespace in turn and writes its /proc/sys/net."""
    def write(ns: str) -> None:
        for key, value in settings[ns].items():
            try:
                file = open(_sysctl_file(key), "w")
            except OSError as e:
                raise MachineError(f"could not set sysctl {key} in namespace {ns}: {_sysctl_error(e)}") from None
            try:
                with file:
                    file.write(f"{value}\n")
            except OSError as e:  # the value refused (ENOENT for an unknown congestion control)
                raise MachineError(f"could not set sysctl {key} = {value} in namespace {ns}: "
                                   f"refused ({e.strerror})") from None
    _each_inside([ns for ns, keys in settings.items() if keys], write)


def read_sysctl(ns: str, key: str) -> str:
    return read_sysctls([ns], key)[ns]


def read_sysctls(namespaces: Iterable[str], key: str) -> dict[str, str]:
    """Sysctl `key` of each namespace, as `sysctl -n KEY` inside it would print it."""
    def read(ns: str) -> str:
        try:
            with open(_sysctl_file(key)) as f:
                return f.read().strip()
        except OSError as e:
            raise MachineError(f"could not read sysctl {key} in namespace {ns}: {_sysctl_error(e)}") from None
    return _each_inside(namespaces, read)


def _sysctl_file(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def _sysctl_error(e: OSError) -> str:
    return "no such sysctl" if e.errno == errno.ENOENT else str(e.strerror)


# Links --------------------------------------------------------------------------------------

# Interface numbers for veth ends, two per pair, never the same twice in this process. The
# kernel starts each new namespace's count at 2, so both ends of a fresh pair get the same
# ifindex; then a carrier change fails linkwatch's test for an urgent event (its ifindex equals
# its peer's), and the interface stays without a qdisc, dropping everything, for up to a second.
# With distinct numbers the ends are running within milliseconds. Above the small numbers the
# kernel hands out itself (lo, bridges), so they never collide inside a namespace.
_IFINDEX = itertools.count(1000, 2)


class Netlink:
    """rtnetlink in namespaces: what `ip -n NS link ...` and `ip -n NS addr ...` do, without a
    process each. One socket into each namespace (None: this process's own), made on first use
    (or by open(), for many at once) by a thread of ours inside it, and all closed by close()
    (or at the end of `with`). Close it before a namespace it reached is deleted: a socket
    keeps its namespace alive, and the veths in it.

    Each request is one message and its acknowledgement, tens of microseconds; a refusal is a
    one-line MachineError quoting the request in ip's words, with the kernel's own message.
    (Written here rather than with pyroute2, which takes 0.15-0.3 s to import, more than a
    three-node network takes to build, and 0.4-0.8 ms a request.)
    """

    def __init__(self) -> None:
        self._sockets: dict[str | None, socket.socket] = {}
        self._sequence = itertools.count(1)
        self._lock = threading.Lock()  # one request at a time, whichever thread asks
        self._indexes: dict[tuple[str | None, str], int] = {}  # of masters (bridges), asked once

    def __enter__(self) -> Netlink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for sock in self._sockets.values():
                sock.close()
            self._sockets.clear()

    def open(self, namespaces: Iterable[str | None]) -> None:
        """Sockets into these namespaces, made now by one thread of ours that enters each in
        turn (rather than a thread each, on first use)."""
        wanted = [ns for ns in dict.fromkeys(namespaces) if ns not in self._sockets]
        if None in wanted:
            self._sockets[None] = _rtnl_socket()
            wanted.remove(None)

        def make() -> dict[str | None, socket.socket]:
            made: dict[str | None, socket.socket] = {}
            try:
                for ns in wanted:
                    _enter(ns)
                    made[ns] = _rtnl_socket()
            except BaseException:
                for sock in made.values():
                    sock.close()
                raise
            return made

        if wanted:
            self._sockets.update(_in_thread(make))

    def veth_pair(self, a_ns: str, a_iface: str, b_ns: str, b_iface: str) -> None:
        """A veth pair with one end in each namespace, made right in them (this socket's
        namespace never sees them: no name clash), their ifindexes from _IFINDEX."""
        index = next(_IFINDEX)
        with _namespace_fd(a_ns) as a_fd, _namespace_fd(b_ns) as b_fd:
            peer = _ifinfomsg(index + 1) + _attr_str(_IFLA_IFNAME, b_iface) + _attr_u32(_IFLA_NET_NS_FD, b_fd)
            self._request(None, f"ip link add {a_iface} netns {a_ns} index {index} type veth "
                                f"peer name {b_iface} netns {b_ns} index {index + 1}",
                          _RTM_NEWLINK, _NLM_F_CREATE | _NLM_F_EXCL,
                          _ifinfomsg(index) + _attr_str(_IFLA_IFNAME, a_iface) + _attr_u32(_IFLA_NET_NS_FD, a_fd)
                          + _attr(_IFLA_LINKINFO, _attr_str(_IFLA_INFO_KIND, "veth")
                                  + _attr(_IFLA_INFO_DATA, _attr(_VETH_INFO_PEER, peer))))

    def add_bridge(self, ns: str, name: str) -> None:
        """A Linux bridge, up."""
        self._request(ns, f"ip link add {name} up type bridge", _RTM_NEWLINK, _NLM_F_CREATE | _NLM_F_EXCL,
                      _ifinfomsg(flags=_IFF_UP, change=_IFF_UP) + _attr_str(_IFLA_IFNAME, name)
                      + _attr(_IFLA_LINKINFO, _attr_str(_IFLA_INFO_KIND, "bridge")))

    def set_link(self, ns: str, iface: str, *, up: bool = False, promisc: bool = False, master: str | None = None,
                 gso_max_segs: int | None = None) -> None:
        """`ip link set IFACE [master MASTER] [promisc on] [gso_max_segs N] [up]`, one request."""
        flags = (_IFF_UP if up else 0) | (_IFF_PROMISC if promisc else 0)
        attrs = _attr_str(_IFLA_IFNAME, iface)  # the kernel finds the interface by its name
        words = [f"ip link set {iface}"]
        if master is not None:
            attrs += _attr_u32(_IFLA_MASTER, self.index(ns, master))
            words.append(f"master {master}")
        if promisc:
            words.append("promisc on")
        if gso_max_segs is not None:
            attrs += _attr_u32(_IFLA_GSO_MAX_SEGS, gso_max_segs)
            words.append(f"gso_max_segs {gso_max_segs}")
        if up:
            words.append("up")
        self._request(ns, " ".join(words), _RTM_NEWLINK, 0, _ifinfomsg(flags=flags, change=flags) + attrs)

    def add_address(self, ns: str, iface: str, cidr: str) -> None:
        """An IPv4 address with its prefix length ("10.0.0.1/24") on `iface`, as `ip addr add`
        sets it (local and address both)."""
        address, prefix = cidr.split("/")
        packed = socket.inet_aton(address)
        index = self.index(ns, iface, cache=False)
        self._request(ns, f"ip addr add {cidr} dev {iface}", _RTM_NEWADDR, _NLM_F_CREATE | _NLM_F_EXCL,
                      struct.pack("=BBBBI", socket.AF_INET, int(prefix), 0, 0, index)  # struct ifaddrmsg
                      + _attr(_IFA_LOCAL, packed) + _attr(_IFA_ADDRESS, packed))

    def index(self, ns: str | None, iface: str, cache: bool = True) -> int:
        """`iface`'s ifindex (remembered, for a master that every port asks for)."""
        if cache and (ns, iface) in self._indexes:
            return self._indexes[(ns, iface)]
        reply = self._request(ns, f"ip link show {iface}", _RTM_GETLINK, 0, _ifinfomsg() + _attr_str(_IFLA_IFNAME, iface),
                              reply=_RTM_NEWLINK)
        index = struct.unpack_from("=i", reply, 4)[0]  # struct ifinfomsg's ifi_index
        if cache:
            self._indexes[(ns, iface)] = index
        return index

    def _request(self, ns: str | None, what: str, kind: int, flags: int, body: bytes, reply: int | None = None) -> bytes:
        """Send one message and wait for its answer: the acknowledgement (or, if `reply` is
        given, a message of that type, whose body is returned). A refusal is a MachineError."""
        where = f" in {ns}" if ns else ""
        if ns not in self._sockets:
            self.open([ns])
        with self._lock:
            sock = self._sockets[ns]
            sequence = next(self._sequence)
            header_flags = _NLM_F_REQUEST | flags | (0 if reply else _NLM_F_ACK)
            try:
                sock.send(struct.pack("=IHHII", 16 + len(body), kind, header_flags, sequence, 0) + body)
                while True:
                    for answer, payload, got in _messages(sock.recv(65536)):
                        if got != sequence:
                            continue  # a late answer to a request that an error cut short
                        if answer == _NLMSG_ERROR:
                            code, message = _nlmsgerr(payload)
                            if code == 0:
                                return b""
                            raise MachineError(f"netlink{where}: `{what}` failed: {message or os.strerror(code)}")
                        if answer == reply:
                            return payload
            except OSError as e:  # or no answer in time (TimeoutError)
                raise MachineError(f"netlink{where}: `{what}` failed: {e.strerror or e}") from None


def _rtnl_socket() -> socket.socket:
    """A route netlink socket in this thread's namespace, which says why it refuses a request
    (extended acks) without echoing the request back."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.settimeout(proc.RUN_TIMEOUT_S)  # the kernel answers at once; never wait for ever
    sock.setsockopt(_SOL_NETLINK, _NETLINK_EXT_ACK, 1)
    sock.setsockopt(_SOL_NETLINK, _NETLINK_CAP_ACK, 1)
    return sock


def _ifinfomsg(index: int = 0, flags: int = 0, change: int = 0) -> bytes:
    """struct ifinfomsg: family, type, ifindex, flags, and which flags to change."""
    return struct.pack("=BxHiII", socket.AF_UNSPEC, 0, index, flags, change)


def _attr(kind: int, value: bytes) -> bytes:
    """An attribute (struct rtattr: length, type, value), padded to 4 bytes."""
    return struct.pack("=HH", 4 + len(value), kind) + value + bytes(-len(value) % 4)


def _attr_str(kind: int, value: str) -> bytes:
    return _attr(kind, value.encode() + b"\0")


def _attr_u32(kind: int, value: int) -> bytes:
    return _attr(kind, struct.pack("=I", value))


def _messages(data: bytes) -> Iterator[tuple[int, bytes, int]]:
    """The netlink messages in one read: (type, body, sequence number)."""
    at = 0
    while at + 16 <= len(data):
        length, kind, _, sequence = struct.unpack_from("=IHHI", data, at)
        yield kind, data[at + 16:at + length], sequence
        at += (length + 3) & ~3


def _nlmsgerr(payload: bytes) -> tuple[int, str]:
    """An NLMSG_ERROR's errno (0: an acknowledgement) and the kernel's message, if it gave one:
    the error, the request's header (not its body: NETLINK_CAP_ACK), then attributes."""
    code = -struct.unpack_from("=i", payload)[0]
    message = _attributes(payload, 20, len(payload)).get(_NLMSGERR_ATTR_MSG, b"")
    return code, message.rstrip(b"\0").decode(errors="replace")


_here = Netlink()  # into this process's own namespace, which holds no network's: for veth_pair


def veth_pair(a_ns: str, a_iface: str, b_ns: str, b_iface: str) -> None:
    """A veth pair with one end in each namespace (Netlink.veth_pair)."""
    _here.veth_pair(a_ns, a_iface, b_ns, b_iface)


def single_segments(ns: str, iface: str) -> None:
    """Make a host's TCP hand `iface` one segment per packet.

    TCP builds GSO super-packets whatever the device's features and cuts them up only as they
    leave the qdisc, so a shaping qdisc on a host's own interface would hold up to 64 KB as one
    packet, and a limit of N packets would hold N of them. Segments a switch forwards are
    single frames already, so this only changes a host's own traffic.
    """
    try:
        with Netlink() as netlink:
            netlink.set_link(ns, iface, gso_max_segs=1)
    except MachineError as e:
        log.debug("%s/%s: gso_max_segs 1 refused: %s", ns, iface, e)


# Interfaces' state and offloads ---------------------------------------------------------------

def running(ends: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """Those of the (namespace, interface) ends whose operstate is UP: the kernel's link watch
    sets it as it applies a carrier change and starts the interface's qdisc. (Not IFF_RUNNING:
    that holds for UNKNOWN too, which a new veth is until the link watch first gets to it.) One
    RTM_GETLINK dump per namespace, by a thread of ours that enters each; an interface not
    there is not up."""
    by_ns: dict[str, list[str]] = {}
    for ns, iface in ends:
        by_ns.setdefault(ns, []).append(iface)

    def look(ns: str) -> set[tuple[str, str]]:
        try:
            up = _up_interfaces()
        except OSError as e:
            raise MachineError(f"netlink in {ns}: `ip link show` failed: {e.strerror or e}") from None
        return {(ns, iface) for iface in by_ns[ns] if iface in up}
    return set().union(*_each_inside(by_ns, look).values())


def _up_interfaces() -> set[str]:
    """The names of the interfaces in this thread's namespace whose operstate is UP."""
    with _rtnl_socket() as sock:
        sock.send(struct.pack("=IHHII", 32, _RTM_GETLINK, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0) + _ifinfomsg())
        up: set[str] = set()
        while True:
            for kind, body, _ in _messages(sock.recv(65536)):  # a dump comes at most 32 KB at a time
                if kind == _NLMSG_DONE:
                    return up
                if kind == _NLMSG_ERROR:
                    code = -struct.unpack_from("=i", body)[0]
                    raise OSError(code, os.strerror(code))
                attrs = _attributes(body, 16, len(body))  # past the struct ifinfomsg
                if attrs.get(_IFLA_OPERSTATE, b"\0")[0] == _IF_OPER_UP:
                    up.add(attrs[_IFLA_IFNAME].rstrip(b"\0").decode())


def _attributes(data: bytes, start: int, end: int) -> dict[int, bytes]:
    """A message's attributes (struct rtattr: length, type, then the value), by type."""
    found = {}
    while start + 4 <= end:
        length, kind = struct.unpack_from("=HH", data, start)
        if length < 4:
            break
        found[kind & 0x3FFF] = data[start + 4:start + length]  # without the nested and byte-order flags
        start += (length + 3) & ~3
    return found


def offloads_off(ends: Iterable[tuple[str, str]]) -> None:
    """Turn off segmentation, aggregation and checksum offloads of each (namespace, interface),
    so queues see real frames: what `ethtool -K IFACE tso off gso off gro off sg off tx off rx
    off` does, as one SIOCETHTOOL request per interface from a socket inside its namespace.

    A feature the driver cannot change is left as it is (logged): the datapath counts any
    oversize frame that still gets through. An interface that is not there is an error.
    """
    by_ns: dict[str, list[str]] = {}
    for ns, iface in ends:
        by_ns.setdefault(ns, []).append(iface)
    _each_inside(by_ns, lambda ns: _offloads_off(ns, by_ns[ns]))


def _offloads_off(ns: str, ifaces: list[str]) -> None:
    """In a thread inside `ns`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:  # its requests go to its namespace
        for iface in ifaces:
            try:
                words = _offload_bits(sock, iface)
                # struct ethtool_sfeatures: per word of feature bits, which to set and to what (0: off).
                request = struct.pack(f"II{2 * len(words)}I", _ETHTOOL_SFEATURES, len(words),
                                      *(word for valid in words for word in (valid, 0)))
                flags = _ethtool(sock, iface, bytearray(request))[0]
            except OSError as e:
                if e.errno == errno.ENODEV:
                    raise MachineError(f"no interface {iface} in namespace {ns} to turn offloads off on") from None
                raise MachineError(f"could not turn offloads off on {iface} in namespace {ns}: {e.strerror}") from None
            if flags:  # ETHTOOL_F_UNSUPPORTED (1): fixed features; ETHTOOL_F_WISH (2): ones others hold on
                log.debug("%s/%s: some offloads stay as they were (ethtool flags %#x)", ns, iface, flags)


_offload_words: list[int] = []  # the kernel's feature bits of OFFLOAD_FEATURES, the same for every device


def _offload_bits(sock: socket.socket, iface: str) -> list[int]:
    """OFFLOAD_FEATURES as the kernel's feature bits, in 32-bit words; read once, from `iface`."""
    if not _offload_words:
        names = _ethtool_feature_names(sock, iface)
        words = [0] * ((len(names) + 31) // 32)
        for bit, name in enumerate(names):
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in OFFLOAD_FEATURES.values()):
                words[bit // 32] |= 1 << (bit % 32)
        _offload_words[:] = words
    return _offload_words


def _ethtool(sock: socket.socket, iface: str, request: bytearray) -> tuple[int, bytearray]:
    """One SIOCETHTOOL request on `iface`: the kernel reads and fills `request` (an ethtool
    struct) in place. Its return value (flags, for some) and the request."""
    data = (ctypes.c_char * len(request)).from_buffer(request)
    ifreq = bytearray(struct.pack("16sP", iface.encode(), ctypes.addressof(data)).ljust(_IFREQ_BYTES, b"\0"))
    return fcntl.ioctl(sock.fileno(), _SIOCETHTOOL, ifreq), request


def _ethtool_feature_names(sock: socket.socket, iface: str) -> list[str]:
    """The kernel's feature names, in the order of its feature bits (`ethtool -k` shows them)."""
    _, info = _ethtool(sock, iface, bytearray(struct.pack("IIQI", _ETHTOOL_GSSET_INFO, 0, 1 << _ETH_SS_FEATURES, 0)))
    count = struct.unpack_from("I", info, 16)[0]
    _, strings = _ethtool(sock, iface, bytearray(struct.pack("III", _ETHTOOL_GSTRINGS, _ETH_SS_FEATURES, count)
                                                 + bytes(count * _ETH_GSTRING_LEN)))
    return [strings[12 + i * _ETH_GSTRING_LEN:12 + (i + 1) * _ETH_GSTRING_LEN].split(b"\0")[0].decode()
            for i in range(count)]
