"""Parsers of what the measuring tools print: ping (with -D timestamps), irtt's lines per reply,
iperf3 (--json, and its text interval lines), tcp:tcp_probe tracepoint lines and `ss -tin`.

Pure functions on text, tested on real captured outputs (tests/data/).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from bloatlab.errors import BloatlabError

# "[1732190000.123456] 64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=10.2 ms". Numbers as ping
# prints them, so that float() and int() take every one matched: a decimal with digits on both
# sides of its point, a count of at most 20 digits (int() refuses more than 4300).
_DECIMAL = r"\d+(?:\.\d+)?"
_PING_REPLY = re.compile(
    rf"^(?:\[(?P<ts>\d+\.\d+)\]\s+)?\d+ bytes from .+?: icmp_seq=(?P<seq>\d{{1,20}}) .*?time=(?P<rtt>{_DECIMAL}) ms")
_PING_SUMMARY = re.compile(
    rf"rtt min/avg/max/mdev = (?P<min>{_DECIMAL})/(?P<avg>{_DECIMAL})/(?P<max>{_DECIMAL})/(?P<mdev>{_DECIMAL}) ms")
_PING_COUNTS = re.compile(r"(?<!\d)(?P<tx>\d{1,20}) packets transmitted, (?P<rx>\d{1,20}) received")


def _float(text: Any) -> float:
    """A number a tool printed, as a finite float; ValueError for one that is not (400 digits read
    as infinity): the line it is on is no measurement."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{str(text)[:20]} is no finite number")
    return value


@dataclass(frozen=True)
class PingReply:
    t_s: float | None  # wall-clock receive time (ping -D), None without -D
    seq: int
    rtt_ms: float


@dataclass(frozen=True)
class PingSummary:
    transmitted: int
    received: int
    min_ms: float | None
    avg_ms: float | None
    max_ms: float | None
    mdev_ms: float | None


def parse_ping_replies(text: str) -> list[PingReply]:
    replies = []
    for line in text.splitlines():
        if m := _PING_REPLY.match(line.strip()):
            ts = m.group("ts")
            try:
                replies.append(PingReply(_float(ts) if ts else None, int(m.group("seq")), _float(m.group("rtt"))))
            except ValueError:
                continue
    return replies


def parse_ping_summary(text: str) -> PingSummary:
    counts = _PING_COUNTS.search(text)
    if not counts:
        raise BloatlabError("ping printed no statistics line; did it run?", field="ping")
    rtt = _PING_SUMMARY.search(text)
    try:
        vals = [_float(rtt.group(k)) for k in ("min", "avg", "max", "mdev")] if rtt else [None] * 4
    except ValueError:  # a figure too long to be one
        vals = [None] * 4
    return PingSummary(int(counts.group("tx")), int(counts.group("rx")), *vals)


# irtt client's line per reply (not run quiet): "seq=3 rtt=21.4ms rd=10.2ms sd=11.2ms ipdv=1.1ms"
_IRTT_REPLY = re.compile(rf"^seq=(?P<seq>\d{{1,20}}) rtt=(?P<rtt>{_DECIMAL})(?P<unit>ns|µs|us|ms|s)\b")
_IRTT_UNIT_MS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_irtt_replies(text: str) -> list[tuple[int, float]]:
    """irtt client's per-reply lines: (sequence number, RTT ms) each; its other lines skipped.
    The JSON (-o) has every timestamp; these lines come as the replies do."""
    out = []
    for line in text.splitlines():
        if m := _IRTT_REPLY.match(line.strip()):
            try:
                out.append((int(m["seq"]), _float(m["rtt"]) * _IRTT_UNIT_MS[m["unit"]]))
            except ValueError:
                continue
    return out


@dataclass(frozen=True)
class IperfResult:
    protocol: str  # "TCP" or "UDP"
    sender_bps: float
    receiver_bps: float
    seconds: float
    retransmits: int | None  # TCP
    lost_percent: float | None  # UDP, as the receiver saw it
    jitter_ms: float | None  # UDP
    intervals: list[dict[str, Any]]  # iperf3's own per-interval sums
    # Stopped (a signal) before the receiver's totals came back: the client then prints 0 for
    # them, which is not what the receiver got.
    cut_short: bool = False


def parse_iperf3(text: str) -> IperfResult:
    """The client's `iperf3 --json` output; a one-line BloatlabError (field iperf3) for what is
    not iperf3's JSON, or says it failed."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise BloatlabError(f"iperf3 printed no JSON ({e.msg}); first line: {text.strip()[:120]!r}",
                            field="iperf3") from None
    except (ValueError, RecursionError):  # a number of over 4300 digits; arrays nested too deep
        raise BloatlabError("iperf3 printed JSON bloatlab cannot read (a number too long, or nesting too deep)",
                            field="iperf3") from None
    if not isinstance(doc, dict):
        raise BloatlabError(f"iperf3 printed JSON that is not an object: {text.strip()[:120]!r}", field="iperf3")
    try:
        return _iperf3_result(doc)
    except (AttributeError, TypeError, ValueError, OverflowError) as e:  # a section that is not what iperf3 writes
        raise BloatlabError(f"iperf3's JSON is not what iperf3 writes ({e})", field="iperf3") from None


def _iperf3_result(doc: dict[str, Any]) -> IperfResult:
    if "error" in doc and not doc.get("end", {}).get("sum_received") and not doc.get("end", {}).get("sum"):
        raise BloatlabError(f"iperf3 failed: {' '.join(str(doc['error']).split())}", field="iperf3")
    end = doc.get("end", {})
    proto = doc.get("start", {}).get("test_start", {}).get("protocol", "TCP")
    intervals = [i.get("sum", {}) for i in doc.get("intervals", [])]
    if proto == "UDP":
        s = end.get("sum", {})
        # iperf3 >= 3.12 splits sender and receiver sums for UDP; older ones have one sum.
        sent = end.get("sum_sent", s)
        recv = end.get("sum_received", s)
        return IperfResult("UDP", _float(sent.get("bits_per_second", 0.0)), _float(recv.get("bits_per_second", 0.0)),
                           _float(recv.get("seconds", s.get("seconds", 0.0))), None,
                           _float(s.get("lost_percent", recv.get("lost_percent", 0.0))),
                           _float(s.get("jitter_ms", recv.get("jitter_ms", 0.0))), intervals,
                           _cut_short(doc, sent, recv))
    sent, recv = end.get("sum_sent", {}), end.get("sum_received", {})
    return IperfResult("TCP", _float(sent.get("bits_per_second", 0.0)), _float(recv.get("bits_per_second", 0.0)),
                       _float(recv.get("seconds", 0.0)), int(sent.get("retransmits", 0)), None, None, intervals,
                       _cut_short(doc, sent, recv))


def _cut_short(doc: dict[str, Any], sent: dict[str, Any], recv: dict[str, Any]) -> bool:
    """iperf3 said why it stopped ("interrupt - the client has terminated") and its receiver's
    sum is empty though it sent: the receiver's totals never came back."""
    return "error" in doc and not recv.get("bytes") and bool(sent.get("bytes"))


# The tcp:tcp_probe tracepoint ----------------------------------------------------------------
#
# One line of a tracefs `trace` or `trace_pipe` file per event (the kernel's TP_printk of
# include/trace/events/tcp.h, fields as named in events/tcp/tcp_probe/format):
#   "  iperf3-1234  [001] ..s2.  3479.309497: tcp_probe: family=AF_INET src=10.0.0.1:58864
#    dest=10.0.0.2:5301 mark=0x0 data_len=0 snd_nxt=0x887901c7 snd_una=0x887901a2 snd_cwnd=10
#    ssthresh=2147483647 snd_wnd=65160 srtt=20355 rcv_wnd=64512 sock_cookie=105b skbaddr=... skaddr=..."
# The task name before "-PID" may hold any character, spaces too, so the line is found by
# its "[CPU] ... TIMESTAMP: tcp_probe:" part.
_TRACE_EVENT = re.compile(r"\[(?P<cpu>\d+)\]\s+(?:\S+\s+)?(?P<ts>\d+\.\d+):\s+tcp_probe:\s+(?P<body>.*)$")
_TRACE_FIELD = re.compile(r"(\w+)=(\S+)")
TCP_INFINITE_SSTHRESH = 0x7FFFFFFF  # the kernel's "no slow-start threshold yet"


@dataclass(frozen=True)
class TcpProbeEvent:
    """One tcp:tcp_probe event: the socket's state as a segment arrived on it, in the kernel's
    units. The event fires on every segment an established socket receives, so a sender
    reports on each ACK and a receiver on each data segment."""

    t_s: float  # the trace clock's seconds (with trace_clock "mono": CLOCK_MONOTONIC)
    cpu: int
    family: str  # "AF_INET" or "AF_INET6" (a dual-stack socket shows IPv4 as ::ffff:a.b.c.d)
    src: str  # the socket's own address, without brackets
    sport: int
    dst: str  # the peer's address
    dport: int
    data_len_bytes: int  # payload of the arriving segment
    snd_nxt: int  # sequence numbers, 32 bits, wrapping
    snd_una: int
    snd_cwnd_pkts: int
    ssthresh_pkts: int | None  # tcp_current_ssthresh(); None when unset (0x7fffffff)
    snd_wnd_bytes: int
    srtt_us: int  # smoothed RTT; 0 until the socket has an RTT sample
    rcv_wnd_bytes: int
    sock_cookie: int


def split_host_port(text: str) -> tuple[str, int]:
    """ "10.0.0.1:5201" / "[::ffff:10.0.0.2]:5201" / "[fe80::1%eth0]:22" -> (address, port)."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"no address:port in {text!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def parse_tcp_probe(text: str) -> list[TcpProbeEvent]:
    """tcp_probe events in tracefs output. Header lines ("# tracer: nop"), "CPU:N [LOST M
    EVENTS]" notes of trace_pipe, other events and malformed lines are skipped."""
    events = []
    for line in text.splitlines():
        if line.startswith("#") or not (m := _TRACE_EVENT.search(line)):
            continue
        f = dict(_TRACE_FIELD.findall(m.group("body")))
        try:
            src, sport = split_host_port(f["src"])
            dst, dport = split_host_port(f["dest"])
            ssthresh = int(f["ssthresh"])
            events.append(TcpProbeEvent(
                t_s=_float(m.group("ts")), cpu=int(m.group("cpu")), family=f.get("family", ""),
                src=src, sport=sport, dst=dst, dport=dport, data_len_bytes=int(f["data_len"]),
                snd_nxt=int(f["snd_nxt"], 16), snd_una=int(f["snd_una"], 16),
                snd_cwnd_pkts=int(f["snd_cwnd"]),
                ssthresh_pkts=None if ssthresh >= TCP_INFINITE_SSTHRESH else ssthresh,
                snd_wnd_bytes=int(f["snd_wnd"]), srtt_us=int(f["srtt"]), rcv_wnd_bytes=int(f["rcv_wnd"]),
                sock_cookie=int(f["sock_cookie"], 16)))
        except (KeyError, ValueError):
            continue  # a truncated or foreign line: not an event we can read
    return events


# ss -tin -----------------------------------------------------------------------------------
#
# `ss -tine FILTER` prints a socket line, then (for sockets with TCP state) an indented line of
# tcp_info (see ss(8)):
#   "ESTAB 0      762904      10.0.0.1:38048     10.0.0.2:5301 timer:(on,332ms,0) ino:366356 sk:9a <->"
#   "\t ts sack reno wscale:10,10 rto:332 rtt:128.548/3.979 mss:1448 ... cwnd:125 ssthresh:125 ..."
# rtt is srtt/rttvar in ms; cwnd and ssthresh in packets (ss leaves ssthresh out while it is
# unset); sk: (with -e) is the socket cookie in hex, the tracepoint's sock_cookie.
# bloatlab's SsProbe writes a line "# t_s=SECONDS host=NAME" before each poll's output; the
# sockets after it carry that time and host.
_SS_POLL = re.compile(r"^#\s*t_s=(?P<ts>\d+(?:\.\d+)?)\s+host=(?P<host>\S+)")
_SS_INFO_FLAGS = {"ts", "sack", "ecn", "ecnseen", "fastopen", "app_limited"}


@dataclass(frozen=True)
class SsSocket:
    t_s: float | None  # the poll's time (SsProbe: CLOCK_MONOTONIC seconds), None in plain ss output
    host: str | None  # the host polled, None in plain ss output
    state: str | None  # "ESTAB", "TIME-WAIT", ...; None when ss was given a state filter
    src: str  # local address, without brackets
    sport: int
    dst: str  # peer address
    dport: int
    cookie: int | None  # sk: (ss -e)
    congestion: str | None  # the congestion control algorithm ("cubic", "reno", ...)
    cwnd_pkts: int | None  # None: no tcp_info line (a TIME-WAIT socket, say)
    ssthresh_pkts: int | None  # None: unset
    srtt_ms: float | None
    rttvar_ms: float | None
    bytes_acked: int | None
    info: dict[str, str]  # every key:value of the tcp_info line, as printed


def _ss_socket(line: str, t_s: float | None, host: str | None) -> SsSocket | None:
    tokens = line.split()
    # Without a state filter the first column is the state; with one, ss leaves it out.
    state = None if tokens and tokens[0].isdigit() else (tokens[0] if tokens else None)
    cols = tokens[1:] if state else tokens
    if len(cols) < 4 or not (cols[0].isdigit() and cols[1].isdigit()):
        return None
    try:
        src, sport = split_host_port(cols[2])
        dst, dport = split_host_port(cols[3])
    except ValueError:
        return None
    cookie = next((int(t[3:], 16) for t in cols[4:] if re.fullmatch(r"sk:[0-9a-f]+", t)), None)
    return SsSocket(t_s, host, state, src, sport, dst, dport, cookie, None, None, None, None, None, None, {})


def _with_info(sock: SsSocket, line: str) -> SsSocket:
    info: dict[str, str] = {}
    congestion = None
    for token in line.split():
        key, colon, value = token.partition(":")
        if colon:
            info.setdefault(key, value)
        elif not info and token not in _SS_INFO_FLAGS and re.fullmatch(r"[a-z][a-z0-9_]*", token):
            congestion = token  # the bare word before the first key:value
    srtt = rttvar = None
    if m := re.fullmatch(r"(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)", info.get("rtt", "")):
        srtt, rttvar = float(m.group(1)), float(m.group(2))
        if not (math.isfinite(srtt) and math.isfinite(rttvar)):
            srtt = rttvar = None

    def number(key: str) -> int | None:  # ASCII digits, as many as a 64-bit counter has: what int() takes
        return int(info[key]) if re.fullmatch(r"[0-9]{1,20}", info.get(key, "")) else None

    return SsSocket(sock.t_s, sock.host, sock.state, sock.src, sock.sport, sock.dst, sock.dport, sock.cookie,
                    congestion, number("cwnd"), number("ssthresh"), srtt, rttvar, number("bytes_acked"), info)


def parse_ss_tin(text: str) -> list[SsSocket]:
    """Sockets in `ss -tin` (or -tine) output, with SsProbe's poll lines stamping them.

    The header line ("State Recv-Q ..."), ss's warnings and malformed lines are skipped; a
    socket with no tcp_info line (TIME-WAIT) has cwnd_pkts None."""
    sockets: list[SsSocket] = []
    t_s: float | None = None
    host: str | None = None
    last: SsSocket | None = None  # the socket line an info line would belong to
    for line in text.splitlines():
        if (m := _SS_POLL.match(line)) and math.isfinite(float(m.group("ts"))):
            t_s, host, last = float(m.group("ts")), m.group("host"), None
        elif line[:1] in (" ", "\t"):
            if last is not None and line.strip():
                sockets[-1] = _with_info(last, line)
            last = None
        elif (sock := _ss_socket(line, t_s, host)) is not None:
            sockets.append(sock)
            last = sock
        else:
            last = None  # a header, a warning or garbage
    return sockets


# "[  5]   0.00-0.10   sec   128 KBytes  10.5 Mbits/sec" (UDP servers add jitter and loss);
# the end-of-test lines close with "sender" or "receiver".
_IPERF_INTERVAL = re.compile(
    rf"^\[\s*\d+\]\s+(?P<start>{_DECIMAL})-(?P<end>{_DECIMAL})\s+sec\s+[\d.]+\s+\w?Bytes\s+"
    rf"(?P<rate>{_DECIMAL})\s+(?P<unit>[KMGT]?)bits/sec(?P<rest>.*)$")
_BIT_UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_iperf3_intervals(lines: list[str]) -> list[tuple[float, float]]:
    """iperf3's text interval reports, each line prefixed with the time it arrived
    ("12.345678 [  5] 0.00-0.10 sec ..."): (arrival time, Mbit/s) per interval. The rate
    is iperf3's own, printed to three significant digits."""
    rows = []
    for line in lines:
        stamp, _, report = line.partition(" ")
        m = _IPERF_INTERVAL.match(report.strip())
        if not m or m["rest"].strip().endswith(("sender", "receiver")):
            continue
        try:
            t, rate = _float(stamp), _float(m["rate"])
        except ValueError:
            continue
        rows.append((t, rate * _BIT_UNITS[m["unit"]] / 1e6))
    return rows


def parse_iperf3_text_report(text: str) -> list[tuple[float, float, float]]:
    """The interval lines of an iperf3 text report (a server's, as a client's
    --get-server-output brings it): (start s, end s, Mbit/s) each, summary lines left out."""
    rows = []
    for line in text.splitlines():
        m = _IPERF_INTERVAL.match(line.strip())
        if m and not m["rest"].strip().endswith(("sender", "receiver")):
            try:
                rows.append((_float(m["start"]), _float(m["end"]), _float(m["rate"]) * _BIT_UNITS[m["unit"]] / 1e6))
            except ValueError:
                continue
    return rows
