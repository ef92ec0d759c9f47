"""Parsers of what the measuring tools print: ping (with -D timestamps) and iperf3 --json.

Pure functions on text, tested on real captured outputs (tests/data/).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .errors import BloatlabError

# "[1732190000.123456] 64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=10.2 ms"
_PING_REPLY = re.compile(
    r"^(?:\[(?P<ts>\d+\.\d+)\]\s+)?\d+ bytes from .+?: icmp_seq=(?P<seq>\d+) .*?time=(?P<rtt>[\d.]+) ms")
_PING_SUMMARY = re.compile(
    r"rtt min/avg/max/mdev = (?P<min>[\d.]+)/(?P<avg>[\d.]+)/(?P<max>[\d.]+)/(?P<mdev>[\d.]+) ms")
_PING_COUNTS = re.compile(r"(?P<tx>\d+) packets transmitted, (?P<rx>\d+) received")


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
            replies.append(PingReply(float(ts) if ts else None, int(m.group("seq")), float(m.group("rtt"))))
    return replies


def parse_ping_summary(text: str) -> PingSummary:
    counts = _PING_COUNTS.search(text)
    if not counts:
        raise BloatlabError("ping printed no statistics line; did it run?", field="ping")
    rtt = _PING_SUMMARY.search(text)
    vals = [float(rtt.group(k)) for k in ("min", "avg", "max", "mdev")] if rtt else [None] * 4
    return PingSummary(int(counts.group("tx")), int(counts.group("rx")), *vals)


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


def parse_iperf3(text: str) -> IperfResult:
    """The client's `iperf3 --json` output."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise BloatlabError(f"iperf3 printed no JSON ({e.msg}); first line: {text.strip()[:120]!r}",
                            field="iperf3") from None
    if "error" in doc and not doc.get("end", {}).get("sum_received") and not doc.get("end", {}).get("sum"):
        raise BloatlabError(f"iperf3 failed: {doc['error']}", field="iperf3")
    end = doc.get("end", {})
    proto = doc.get("start", {}).get("test_start", {}).get("protocol", "TCP")
    intervals = [i.get("sum", {}) for i in doc.get("intervals", [])]
    if proto == "UDP":
        s = end.get("sum", {})
        # iperf3 >= 3.12 splits sender and receiver sums for UDP; older ones have one sum.
        sent = end.get("sum_sent", s)
        recv = end.get("sum_received", s)
        return IperfResult("UDP", float(sent.get("bits_per_second", 0.0)), float(recv.get("bits_per_second", 0.0)),
                           float(recv.get("seconds", s.get("seconds", 0.0))), None,
                           float(s.get("lost_percent", recv.get("lost_percent", 0.0))),
                           float(s.get("jitter_ms", recv.get("jitter_ms", 0.0))), intervals)
    sent, recv = end.get("sum_sent", {}), end.get("sum_received", {})
    return IperfResult("TCP", float(sent.get("bits_per_second", 0.0)), float(recv.get("bits_per_second", 0.0)),
                       float(recv.get("seconds", 0.0)), int(sent.get("retransmits", 0)), None, None, intervals)
