"""Kernel qdisc statistics over rtnetlink: queue length, backlog and drops, cheaply and often.

This probe owns one thing: reading what `tc -s qdisc show` prints, without running tc. A
QdiscReader holds a NETLINK_ROUTE socket created inside the target network namespace (a
socket stays bound to the namespace it was created in, so one setns on a short-lived helper
thread is enough; the calling thread never changes namespace). A read is one RTM_GETQDISC
dump and its reply, a few hundred bytes parsed with `struct`: about 40 us of CPU (the kernel's
share included) for a namespace with three qdiscs, where a `tc` process costs milliseconds;
so a QdiscSampler can follow a queue at 200 Hz for under 1% of one core.

Wire formats (the kernel's uapi headers: linux/netlink.h, linux/rtnetlink.h,
linux/gen_stats.h, linux/pkt_sched.h), all in host byte order:

    nlmsghdr      u32 len, u16 type, u16 flags, u32 seq, u32 pid            16 bytes
    tcmsg         u8 family, u8 pad, u16 pad, i32 ifindex, u32 handle,
                  u32 parent, u32 info                                       20 bytes
    ifinfomsg     u8 family, u8 pad, u16 type, i32 index, u32 flags, u32 change  16 bytes
    nlattr        u16 len, u16 type, then the payload; every attribute (and message)
                  starts on a 4-byte boundary
    nlmsgerr      i32 error (minus an errno; 0 acknowledges), then the request's header

    RTM_NEWQDISC  tcmsg, then attributes:
      TCA_KIND (1)          the qdisc's name, NUL-terminated
      TCA_STATS2 (7)        nested:
        TCA_STATS_BASIC (1)   gnet_stats_basic: u64 bytes, u32 packets (padded to 16)
        TCA_STATS_QUEUE (3)   gnet_stats_queue: u32 qlen, backlog, drops, requeues, overlimits
        TCA_STATS_PKT64 (8)   u64 packets, only when the u32 above has overflowed
      TCA_STATS (3)         the old struct tc_stats, read only when TCA_STATS2 is missing
    RTM_NEWLINK   ifinfomsg, then attributes; IFLA_IFNAME (3) is the interface's name

Handles and parents are the kernel's u32 (major << 16 | minor), which tc writes in hex: 10: is
0x00100000, class 1:1 is 0x00010001; a root qdisc's parent is TC_H_ROOT (0xffffffff).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bloatlab.errors import MachineError

log = logging.getLogger(__name__)

# linux/netlink.h
NETLINK_ROUTE = 0
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER
# linux/rtnetlink.h
RTM_NEWLINK = 16
RTM_GETLINK = 18
RTM_NEWQDISC = 36
RTM_GETQDISC = 38
TCA_KIND = 1
TCA_STATS = 3
TCA_STATS2 = 7
IFLA_IFNAME = 3
IFLA_EXT_MASK = 29
RTEXT_FILTER_SKIP_STATS = 1 << 3  # link dumps without their (large) statistics
# linux/gen_stats.h
TCA_STATS_BASIC = 1
TCA_STATS_QUEUE = 3
TCA_STATS_PKT64 = 8
# linux/pkt_sched.h
TC_H_ROOT = 0xFFFFFFFF
TC_H_INGRESS = 0xFFFFFFF1  # the parent of ingress and clsact
# linux/sched.h
CLONE_NEWNET = 0x40000000

NLMSGHDR = struct.Struct("=IHHII")
TCMSG = struct.Struct("=BBHiIII")
IFINFOMSG = struct.Struct("=BBHiII")
NLATTR = struct.Struct("=HH")
NLMSGERR = struct.Struct("=i")
GNET_STATS_BASIC = struct.Struct("=QI")  # 12 bytes of fields; the kernel pads it to 16
GNET_STATS_QUEUE = struct.Struct("=IIIII")
TC_STATS = struct.Struct("=QIIIIIII")  # bytes, packets, drops, overlimits, bps, pps, qlen, backlog
U64 = struct.Struct("=Q")

NETNS_DIR = Path("/run/netns")
RECV_BUFFER_BYTES = 64 * 1024  # a netlink dump packs at most 32 KiB into one datagram
REPLY_TIMEOUT_S = 2.0

_libc = ctypes.CDLL(None, use_errno=True)


def _align4(n: int) -> int:
    return (n + 3) & ~3


@dataclass(frozen=True)
class QdiscStats:
    """One qdisc's counters at one moment, as `tc -s qdisc show` prints them.

    handle and parent are the kernel's u32 (see handle_str); counters are cumulative since
    the qdisc was created, qlen_pkts and backlog_bytes are the queue right now.
    """

    iface: str
    kind: str  # "htb", "pfifo", "noqueue", ...
    handle: int  # major << 16 | minor; tc writes them in hex: 10: is 0x00100000
    parent: int  # TC_H_ROOT for a root qdisc, else the class it hangs from (1:1)
    qlen_pkts: int
    backlog_bytes: int  # as the qdisc counts them: whole frames, Ethernet header included
    drops: int  # packets
    requeues: int
    overlimits: int
    sent_bytes: int
    sent_pkts: int

    @property
    def is_root(self) -> bool:
        return self.parent == TC_H_ROOT

    @property
    def is_ingress(self) -> bool:
        return self.parent == TC_H_INGRESS


def handle_str(value: int) -> str:
    """A handle or class id in tc's notation: "10:", "1:1", "root"."""
    if value == TC_H_ROOT:
        return "root"
    major, minor = value >> 16, value & 0xFFFF
    return f"{major:x}:" if minor == 0 else f"{major:x}:{minor:x}"


# Parsing ----------------------------------------------------------------------------------

def iter_messages(data: bytes | memoryview) -> Iterator[tuple[int, int, int, memoryview]]:
    """(type, flags, seq, payload) of every netlink message in `data`, in order."""
    view = memoryview(data)
    offset = 0
    while offset + NLMSGHDR.size <= len(view):
        length, mtype, flags, seq, _pid = NLMSGHDR.unpack_from(view, offset)
        if length < NLMSGHDR.size or offset + length > len(view):
            raise MachineError(f"malformed netlink message at byte {offset}: length {length}")
        yield mtype, flags, seq, view[offset + NLMSGHDR.size:offset + length]
        offset += _align4(length)
    if offset < len(view):
        raise MachineError(f"malformed netlink message at byte {offset}: "
                           f"{len(view) - offset} bytes, shorter than a header")


def iter_attributes(data: bytes | memoryview, offset: int = 0) -> Iterator[tuple[int, memoryview]]:
    """(type, payload) of every attribute in data[offset:]."""
    view = memoryview(data)
    while offset + NLATTR.size <= len(view):
        length, atype = NLATTR.unpack_from(view, offset)
        if length < NLATTR.size or offset + length > len(view):
            raise MachineError(f"malformed netlink attribute at byte {offset}: length {length}")
        yield atype & NLA_TYPE_MASK, view[offset + NLATTR.size:offset + length]
        offset += _align4(length)


def netlink_error(payload: memoryview) -> int:
    """The errno an NLMSG_ERROR (or NLMSG_DONE) message carries; 0 for an acknowledgement."""
    if len(payload) < NLMSGERR.size:
        return 0
    return -NLMSGERR.unpack_from(payload)[0]


def error_text(err: int) -> str:
    """An errno in words; os.strerror takes only a C int (-INT_MIN, 2**31, is none)."""
    try:
        return os.strerror(err)
    except (OverflowError, ValueError):
        return f"error {err}"


def parse_qdisc(payload: memoryview, ifnames: Mapping[int, str]) -> QdiscStats:
    """An RTM_NEWQDISC message's payload (tcmsg and attributes) as QdiscStats."""
    if len(payload) < TCMSG.size:
        raise MachineError(f"short RTM_NEWQDISC message: {len(payload)} bytes")
    _family, _pad1, _pad2, ifindex, handle, parent, _info = TCMSG.unpack_from(payload)
    kind = ""
    basic: tuple[int, int] | None = None
    queue: tuple[int, int, int, int, int] | None = None
    pkt64: int | None = None
    old: tuple[int, ...] | None = None
    for atype, value in iter_attributes(payload, TCMSG.size):
        if atype == TCA_KIND:
            kind = bytes(value).split(b"\0", 1)[0].decode("ascii", "replace")
        elif atype == TCA_STATS2:
            for stype, svalue in iter_attributes(value):
                if stype == TCA_STATS_BASIC and len(svalue) >= GNET_STATS_BASIC.size:
                    basic = GNET_STATS_BASIC.unpack_from(svalue)
                elif stype == TCA_STATS_QUEUE and len(svalue) >= GNET_STATS_QUEUE.size:
                    queue = GNET_STATS_QUEUE.unpack_from(svalue)
                elif stype == TCA_STATS_PKT64 and len(svalue) >= U64.size:
                    pkt64 = U64.unpack_from(svalue)[0]
        elif atype == TCA_STATS and len(value) >= TC_STATS.size:
            old = TC_STATS.unpack_from(value)
    if basic is not None and queue is not None:
        sent_bytes, sent_pkts = basic
        qlen, backlog, drops, requeues, overlimits = queue
        if pkt64 is not None:
            sent_pkts = pkt64
    elif old is not None:  # kernels before TCA_STATS2 (2.6.x); no requeue count there
        sent_bytes, sent_pkts, drops, overlimits, _bps, _pps, qlen, backlog = old
        requeues = 0
    else:
        raise MachineError(f"qdisc {handle_str(handle)} ({kind}) came without statistics")
    return QdiscStats(iface=ifnames.get(ifindex, f"if{ifindex}"), kind=kind, handle=handle, parent=parent,
                      qlen_pkts=qlen, backlog_bytes=backlog, drops=drops, requeues=requeues,
                      overlimits=overlimits, sent_bytes=sent_bytes, sent_pkts=sent_pkts)


def qdisc_ifindex(payload: memoryview) -> int:
    return TCMSG.unpack_from(payload)[3]


def parse_qdiscs(data: bytes | memoryview, ifnames: Mapping[int, str]) -> list[QdiscStats]:
    """Every qdisc in a reply (one or more datagrams of a dump, concatenated)."""
    found = []
    for mtype, _flags, _seq, payload in iter_messages(data):
        if mtype == RTM_NEWQDISC:
            found.append(parse_qdisc(payload, ifnames))
        elif mtype in (NLMSG_ERROR, NLMSG_DONE):
            err = netlink_error(payload)
            if err:
                raise MachineError(f"the kernel refused the qdisc request: {error_text(err)}")
    return found


def parse_link_name(payload: memoryview) -> tuple[int, str]:
    """(ifindex, name) of an RTM_NEWLINK message's payload."""
    if len(payload) < IFINFOMSG.size:
        raise MachineError(f"short RTM_NEWLINK message: {len(payload)} bytes")
    index = IFINFOMSG.unpack_from(payload)[3]
    for atype, value in iter_attributes(payload, IFINFOMSG.size):
        if atype == IFLA_IFNAME:
            return index, bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")
    return index, f"if{index}"


def leaf_qdiscs(qdiscs: list[QdiscStats]) -> list[QdiscStats]:
    """The egress qdiscs no other qdisc hangs from: those that hold packets.

    htb 1: with pfifo 10: under class 1:1 gives the pfifo; a lone root qdisc is its own leaf.
    """
    egress = [q for q in qdiscs if not q.is_ingress]
    parent_majors = {q.parent >> 16 for q in egress if not q.is_root}
    return [q for q in egress if (q.handle >> 16) not in parent_majors]


# The socket -------------------------------------------------------------------------------

def namespace_path(netns: str) -> Path:
    """/run/netns/NAME for a name `ip netns` knows; a path (/proc/PID/ns/net) as it is."""
    return Path(netns) if "/" in netns else NETNS_DIR / netns


def _socket_in_namespace(path: Path) -> socket.socket:
    """A NETLINK_ROUTE socket bound to the network namespace at `path`.

    setns(2) moves only the calling thread, and a socket belongs to the namespace it was
    created in; so a helper thread enters, creates the socket and ends, and no thread of ours
    is ever left in the wrong namespace.
    """
    result: dict[str, object] = {}

    def enter() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns: {os.strerror(err)}")
            finally:
                os.close(fd)
            result["socket"] = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                             NETLINK_ROUTE)
        except BaseException as e:  # handed to the caller below
            result["error"] = e

    thread = threading.Thread(target=enter, name=f"bloatlab-setns-{path.name}")
    thread.start()
    thread.join()
    error = result.get("error")
    if isinstance(error, FileNotFoundError):
        raise MachineError(f"no network namespace {path.name} ({path} does not exist)")
    if isinstance(error, PermissionError) or (isinstance(error, OSError) and error.errno == errno.EPERM):
        raise MachineError(f"cannot enter network namespace {path.name}: needs root (CAP_SYS_ADMIN)")
    if isinstance(error, OSError):
        raise MachineError(f"cannot open a netlink socket in namespace {path.name}: {error.strerror}")
    if error is not None:
        raise error  # type: ignore[misc]
    sock = result["socket"]
    assert isinstance(sock, socket.socket)
    return sock


class QdiscReader:
    """Reads qdisc statistics in one network namespace over rtnetlink.

        with QdiscReader("bloatlab.t1.s0") as reader:
            for q in reader.read(["s0-eth1"]):
                print(q.kind, q.qlen_pkts, q.drops)

    Not thread-safe: one thread at a time per reader (a QdiscSampler has its own).
    """

    def __init__(self, netns: str):
        self.netns = netns
        self._path = namespace_path(netns)
        self._sock = _socket_in_namespace(self._path)
        try:
            self._sock.bind((0, 0))  # the kernel picks our port id
            self._sock.settimeout(REPLY_TIMEOUT_S)
        except BaseException:
            self._sock.close()
            raise
        self._buf = bytearray(RECV_BUFFER_BYTES)
        self._seq = 0
        self._ifnames: dict[int, str] = {}
        self._ifindex: dict[str, int] = {}

    # Requests -----------------------------------------------------------------------------

    def _request(self, mtype: int, flags: int, body: bytes) -> bytes:
        """Send one request; return its whole reply (every datagram up to NLMSG_DONE for a dump).

        A socket failure or timeout is a MachineError; an errno the kernel answers with is a
        _NetlinkError, which the caller words for what it asked.
        """
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        seq = self._seq
        header = NLMSGHDR.pack(NLMSGHDR.size + len(body), mtype, NLM_F_REQUEST | flags, seq, 0)
        try:
            self._sock.send(header + body)
        except OSError as e:
            raise MachineError(f"netlink request in namespace {self.netns} failed: {e.strerror}") from e
        chunks = []
        while True:
            try:
                n = self._sock.recv_into(self._buf, 0, socket.MSG_TRUNC)
            except TimeoutError:
                raise MachineError(f"no netlink reply within {REPLY_TIMEOUT_S:g} s "
                                   f"in namespace {self.netns}") from None
            except OSError as e:
                raise MachineError(f"netlink receive in namespace {self.netns} failed: {e.strerror}") from e
            if n > len(self._buf):
                raise MachineError(f"a netlink reply of {n} bytes overflowed the {len(self._buf)}-byte buffer")
            chunk = bytes(memoryview(self._buf)[:n])
            done = False
            for rtype, rflags, rseq, payload in iter_messages(chunk):
                if rseq != seq:
                    continue  # a late reply to an earlier request (one that timed out)
                if rtype in (NLMSG_ERROR, NLMSG_DONE):  # a dump's DONE carries its error too
                    err = netlink_error(payload)
                    if err:
                        raise _NetlinkError(err)
                    done = True
                elif not rflags & NLM_F_MULTI:
                    done = True
            chunks.append(chunk)
            if done:
                return b"".join(chunks)

    def _refresh_links(self) -> None:
        body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0)
        body += NLATTR.pack(NLATTR.size + 4, IFLA_EXT_MASK) + struct.pack("=I", RTEXT_FILTER_SKIP_STATS)
        try:
            reply = self._request(RTM_GETLINK, NLM_F_DUMP, body)
        except _NetlinkError as e:
            raise MachineError(f"cannot list interfaces in namespace {self.netns}: {e}") from None
        names = dict(parse_link_name(payload) for mtype, _f, _s, payload in iter_messages(reply)
                     if mtype == RTM_NEWLINK)
        self._ifnames = names
        self._ifindex = {name: index for index, name in names.items()}

    def ifindex(self, iface: str) -> int:
        """The interface's index in this namespace; MachineError if there is none."""
        if iface not in self._ifindex:
            self._refresh_links()  # created since we last looked?
        try:
            return self._ifindex[iface]
        except KeyError:
            have = ", ".join(sorted(self._ifindex)) or "none"
            raise MachineError(f"no interface {iface} in namespace {self.netns} (it has: {have})") from None

    def _dump(self) -> list[tuple[int, int, int, memoryview]]:
        """(ifindex, handle, parent, payload) of every visible qdisc in the namespace.

        A dump rather than a GET of one qdisc: the kernel answers a GET only with NLM_F_ECHO
        and then also multicasts the answer to every RTNLGRP_TC listener (`tc monitor`), 100s
        of times a second. A GET costs about 15 us against a small dump's 40 us; not worth it.
        """
        body = TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0)
        try:
            reply = self._request(RTM_GETQDISC, NLM_F_DUMP, body)
        except _NetlinkError as e:
            raise MachineError(f"cannot list qdiscs in namespace {self.netns}: {e}") from None
        # The kernel dumps the whole namespace whatever tcm_ifindex says; callers filter.
        return [(*TCMSG.unpack_from(payload)[3:6], payload) for mtype, _f, _s, payload in iter_messages(reply)
                if mtype == RTM_NEWQDISC]

    def read(self, ifaces: list[str] | None = None) -> list[QdiscStats]:
        """Every visible qdisc of `ifaces` (default: all interfaces), in the kernel's order
        (per interface the root first)."""
        wanted = {self.ifindex(name) for name in ifaces} if ifaces is not None else None
        qdiscs = self._dump()
        if any(index not in self._ifnames for index, _h, _p, _m in qdiscs):
            self._refresh_links()
        return [parse_qdisc(payload, self._ifnames) for index, _h, _p, payload in qdiscs
                if wanted is None or index in wanted]

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> QdiscReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NetlinkError(Exception):
    """An errno the kernel answered a request with; turned into a MachineError by the caller."""

    def __init__(self, err: int):
        super().__init__(error_text(err))
        self.errno = err


# Sampling ---------------------------------------------------------------------------------

CSV_HEADER = "t_s,iface,kind,qlen_pkts,backlog_bytes,drops\n"
FLUSH_EVERY_S = 0.2  # the samples reach the file at least this often: within the live view's hold (live/follow.py HOLD_S)


class QdiscSampler:
    """Samples the queue of one interface's leaf qdisc into a CSV file, on its own thread.

        with QdiscSampler("bloatlab.t1.s0", "s0-eth1", Path("queue-s0.csv")):
            run_the_workload()

    The leaf is the qdisc that holds the packets: under htb 1: + pfifo 10: the pfifo, on an
    interface with a single root qdisc that one (see leaf_qdiscs); an interface with several
    leaves is refused. Rows are `t_s,iface,kind,qlen_pkts,backlog_bytes,drops`, with t_s the
    time.monotonic() (CLOCK_MONOTONIC) at which the request left, drops cumulative.

    Samples follow a fixed grid of interval_s from start(); a sample that comes late moves
    the grid instead of bunching the next ones up. After stop(): `samples`, `mean_interval_s`
    (between consecutive samples), `max_interval_s` and `cpu_s` (the thread's own CPU time).
    An error on the thread ends the sampling; stop() raises it (once), `error` keeps it.
    """

    def __init__(self, netns: str, iface: str, path: Path, interval_s: float = 0.005):
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, not {interval_s!r}")
        self.netns = netns
        self.iface = iface
        self.path = Path(path)
        self.interval_s = interval_s
        self.leaf: QdiscStats | None = None  # the qdisc followed, as first seen
        self.samples = 0
        self.mean_interval_s: float | None = None
        self.max_interval_s: float | None = None
        self.cpu_s = 0.0
        self.error: BaseException | None = None
        self._reader: QdiscReader | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error_raised = False

    def start(self) -> QdiscSampler:
        """Find the leaf and start sampling; MachineError here for a missing namespace,
        interface or an ambiguous queue. A second start() does nothing."""
        if self._thread is not None:
            return self
        reader = QdiscReader(self.netns)
        try:
            qdiscs = reader.read([self.iface])
            leaves = leaf_qdiscs(qdiscs)
            if len(leaves) != 1:
                found = ", ".join(f"{q.kind} {handle_str(q.handle)}" for q in leaves) or "none"
                raise MachineError(f"{self.iface} in namespace {self.netns} has {len(leaves)} leaf qdiscs "
                                   f"({found}); the sampler follows exactly one queue")
            out = self.path.open("w", buffering=64 * 1024)
        except BaseException:
            reader.close()
            raise
        self.leaf = leaves[0]
        self._reader = reader
        out.write(CSV_HEADER)
        self._thread = threading.Thread(target=self._run, args=(out,), daemon=True,
                                        name=f"bloatlab-qdisc-{self.iface}")
        self._thread.start()
        return self

    def _run(self, out) -> None:
        assert self._reader is not None and self.leaf is not None
        reader, leaf, iface = self._reader, self.leaf, self.iface
        index = reader.ifindex(iface)
        key = (index, leaf.handle, leaf.parent)
        names = {index: iface}
        cpu0 = time.thread_time()
        first_t = last_t = None
        max_gap = 0.0
        samples = 0
        try:
            next_t = flushed = time.monotonic()
            while not self._stop.is_set():
                t = time.monotonic()
                payload = next((m for i, h, p, m in reader._dump() if (i, h, p) == key), None)
                if payload is None:
                    raise MachineError(f"the {leaf.kind} qdisc {handle_str(leaf.handle)} on {iface} "
                                       f"in namespace {self.netns} is gone")
                q = parse_qdisc(payload, names)
                if q.kind != leaf.kind:
                    raise MachineError(f"the {leaf.kind} qdisc {handle_str(leaf.handle)} on {iface} "
                                       f"in namespace {self.netns} was replaced by {q.kind}")
                out.write(f"{t:.6f},{iface},{q.kind},{q.qlen_pkts},{q.backlog_bytes},{q.drops}\n")
                samples += 1
                if last_t is not None:
                    max_gap = max(max_gap, t - last_t)
                else:
                    first_t = t
                last_t = t
                if t - flushed >= FLUSH_EVERY_S:  # a reader follows the file as it grows (bloatlab view)
                    out.flush()
                    flushed = t
                next_t += self.interval_s
                now = time.monotonic()
                if next_t < now:
                    next_t = now  # late: skip the missed slots rather than catch up in a burst
                else:
                    self._stop.wait(next_t - now)
        except BaseException as e:
            self.error = e
            log.warning("qdisc sampler on %s in %s stopped: %s", iface, self.netns, e)
        finally:
            self.samples = samples
            if samples > 1:
                self.mean_interval_s = (last_t - first_t) / (samples - 1)
                self.max_interval_s = max_gap
            self.cpu_s = time.thread_time() - cpu0
            out.close()

    def stop(self) -> None:
        """Stop sampling and close the file. Raises the thread's error, if it had one (once)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self.error is not None and not self._error_raised:
            self._error_raised = True
            raise self.error

    def __enter__(self) -> QdiscSampler:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.stop()
            return
        try:
            self.stop()
        except BaseException as e:  # do not hide the body's own exception behind ours
            log.error("qdisc sampler on %s also failed: %s", self.iface, e)
