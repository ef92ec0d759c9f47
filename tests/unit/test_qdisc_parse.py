"""Parsing rtnetlink qdisc replies: a real captured dump, and hand-built edge cases.

tests/data/qdisc-dump.bin is the reply to one RTM_GETQDISC dump, captured on kernel 6.18 in a
namespace with `lo` (noqueue) and a veth `qa` shaped by htb 1: (class 1:1 at 1 kbit) with
pfifo 10: limit 50 under it. 60 UDP datagrams of 1000 bytes (1042-byte frames) were sent:
the htb bucket let 2 through, 50 waited, 8 were dropped; the 42-byte frame among the sent
bytes is an ARP packet. `tc -s -j qdisc show`, run between two identical dumps, printed
exactly the numbers expected below.
"""

import errno
import struct
from pathlib import Path

import pytest

from bloatlab.errors import MachineError
from bloatlab.experiment.probes.qdisc import NLM_F_MULTI, NLMSG_DONE, NLMSG_ERROR, RTM_GETQDISC, RTM_NEWQDISC, TC_H_INGRESS, TC_H_ROOT, QdiscStats, handle_str, iter_messages, leaf_qdiscs, parse_qdisc, parse_qdiscs

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "qdisc-dump.bin"
IFNAMES = {1: "lo", 2: "qa"}
FRAME_BYTES = 1042  # 1000 UDP payload + 8 UDP + 20 IPv4 + 14 Ethernet


@pytest.fixture(scope="module")
def dump() -> bytes:
    return CAPTURE.read_bytes()


def test_the_capture_is_three_qdiscs_and_done(dump):
    messages = list(iter_messages(dump))
    assert [m[0] for m in messages] == [RTM_NEWQDISC] * 3 + [NLMSG_DONE]
    assert all(flags & NLM_F_MULTI for _t, flags, _s, _p in messages)
    assert {seq for _t, _f, seq, _p in messages} == {2}
    assert sum((len(p) + 16 + 3) // 4 * 4 for _t, _f, _s, p in messages) == len(dump) == 504


def test_captured_dump_parses_to_what_tc_printed(dump):
    lo, htb, pfifo = parse_qdiscs(dump, IFNAMES)
    assert lo == QdiscStats(iface="lo", kind="noqueue", handle=0, parent=TC_H_ROOT, qlen_pkts=0,
                            backlog_bytes=0, drops=0, requeues=0, overlimits=0, sent_bytes=0, sent_pkts=0)
    assert htb == QdiscStats(iface="qa", kind="htb", handle=0x0001_0000, parent=TC_H_ROOT, qlen_pkts=50,
                             backlog_bytes=52100, drops=8, requeues=0, overlimits=1, sent_bytes=2126, sent_pkts=3)
    assert pfifo == QdiscStats(iface="qa", kind="pfifo", handle=0x0010_0000, parent=0x0001_0001, qlen_pkts=50,
                               backlog_bytes=52100, drops=8, requeues=0, overlimits=0, sent_bytes=2126,
                               sent_pkts=3)
    # The physics of the capture: 50 whole frames wait; 2 UDP frames and 1 ARP frame left.
    assert pfifo.backlog_bytes == pfifo.qlen_pkts * FRAME_BYTES
    assert pfifo.sent_bytes == 2 * FRAME_BYTES + 42
    assert pfifo.sent_pkts + pfifo.qlen_pkts + pfifo.drops == 60 + 1


def test_tc_notation_of_the_captured_handles(dump):
    assert [(handle_str(q.handle), handle_str(q.parent)) for q in parse_qdiscs(dump, IFNAMES)] == \
        [("0:", "root"), ("1:", "root"), ("10:", "1:1")]


def test_an_unknown_ifindex_is_named_by_its_number(dump):
    assert [q.iface for q in parse_qdiscs(dump, {})] == ["if1", "if2", "if2"]


def test_the_leaf_is_the_qdisc_that_holds_the_queue(dump):
    qdiscs = parse_qdiscs(dump, IFNAMES)
    assert [q.kind for q in leaf_qdiscs([q for q in qdiscs if q.iface == "qa"])] == ["pfifo"]
    assert [q.kind for q in leaf_qdiscs([q for q in qdiscs if q.iface == "lo"])] == ["noqueue"]


def stats(kind: str, handle: int, parent: int) -> QdiscStats:
    return QdiscStats("x", kind, handle, parent, 0, 0, 0, 0, 0, 0, 0)


def test_leaves_ignore_ingress_and_see_every_unnamed_child():
    # A multiqueue device's default: mq 8001: with a pfifo_fast of handle 0: per tx queue.
    mq = [stats("mq", 0x8001_0000, TC_H_ROOT), stats("pfifo_fast", 0, 0x8001_0001),
          stats("pfifo_fast", 0, 0x8001_0002), stats("ingress", 0xFFFF_0000, TC_H_INGRESS)]
    assert [q.parent for q in leaf_qdiscs(mq)] == [0x8001_0001, 0x8001_0002]
    netem = [stats("htb", 0x0001_0000, TC_H_ROOT), stats("netem", 0x0010_0000, 0x0001_0001)]
    assert [q.kind for q in leaf_qdiscs(netem)] == ["netem"]


# Hand-built messages -------------------------------------------------------------------------

def attr(atype: int, value: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(value), atype) + value
    return raw + b"\0" * (-len(raw) % 4)


def message(mtype: int, payload: bytes, flags: int = 0, seq: int = 7) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(payload), mtype, flags, seq, 0) + payload
    return raw + b"\0" * (-len(raw) % 4)


def tcmsg(ifindex: int = 2, handle: int = 0x0010_0000, parent: int = TC_H_ROOT) -> bytes:
    return struct.pack("=BBHiIII", 0, 0, 0, ifindex, handle, parent, 1)


def test_a_packet_count_past_32_bits_comes_from_tca_stats_pkt64():
    payload = tcmsg() + attr(1, b"bfifo\0") + attr(7, (
        attr(1, struct.pack("=QI4x", 7 * 2**32, 2**32 - 1))  # basic: packets clamped to u32
        + attr(3, struct.pack("=5I", 3, 4500, 9, 1, 2))  # queue
        + attr(8, struct.pack("=Q", 5 * 2**32 + 17))))  # TCA_STATS_PKT64
    q = parse_qdisc(memoryview(payload), {2: "e0"})
    assert (q.kind, q.sent_bytes, q.sent_pkts) == ("bfifo", 7 * 2**32, 5 * 2**32 + 17)
    assert (q.qlen_pkts, q.backlog_bytes, q.drops, q.requeues, q.overlimits) == (3, 4500, 9, 1, 2)


def test_without_tca_stats2_the_old_tc_stats_serve():
    old = struct.pack("=QIIIIIII", 123456, 100, 4, 5, 0, 0, 6, 9000)
    q = parse_qdisc(memoryview(tcmsg() + attr(1, b"pfifo\0") + attr(3, old)), {})
    assert (q.sent_bytes, q.sent_pkts, q.drops, q.overlimits, q.qlen_pkts, q.backlog_bytes, q.requeues) == \
        (123456, 100, 4, 5, 6, 9000, 0)


def test_a_qdisc_without_statistics_is_an_error():
    with pytest.raises(MachineError, match="without statistics"):
        parse_qdisc(memoryview(tcmsg() + attr(1, b"pfifo\0")), {})


def test_an_error_reply_names_the_errno():
    request = struct.pack("=IHHII", 36, RTM_GETQDISC, 0x301, 7, 0)
    reply = message(NLMSG_ERROR, struct.pack("=i", -errno.ENODEV) + request)
    with pytest.raises(MachineError, match="No such device"):
        parse_qdiscs(reply, {})


def test_an_acknowledgement_is_no_error():
    ack = message(NLMSG_ERROR, struct.pack("=i", 0) + struct.pack("=IHHII", 36, RTM_GETQDISC, 1, 7, 0))
    assert parse_qdiscs(ack, {}) == []


@pytest.mark.parametrize("cut", [100, 150, 503])
def test_a_truncated_reply_is_an_error_not_garbage(dump, cut):
    with pytest.raises(MachineError, match="malformed netlink"):
        parse_qdiscs(dump[:cut], IFNAMES)
