"""Parsers on outputs captured from real runs (tests/data/, made on an emulated
10 Mbit/s link with 5 ms each way)."""

from pathlib import Path

import pytest

from bloatlab.errors import BloatlabError
from bloatlab.experiment.parsers import parse_iperf3, parse_iperf3_intervals, parse_ping_replies, parse_ping_summary

DATA = Path(__file__).resolve().parents[1] / "data"


def test_ping_with_kernel_timestamps():
    text = (DATA / "ping-D.txt").read_text()
    replies = parse_ping_replies(text)
    assert [r.seq for r in replies] == [1, 2, 3, 4, 5]
    assert [r.rtt_ms for r in replies] == [10.2, 10.2, 10.2, 10.2, 12.4]
    assert replies[0].t_s == pytest.approx(1795265777.567473)
    # -i 0.2: receive times 0.2 s apart
    assert replies[1].t_s - replies[0].t_s == pytest.approx(0.2, abs=0.02)
    s = parse_ping_summary(text)
    assert (s.transmitted, s.received) == (5, 5)
    assert s.min_ms <= s.avg_ms <= s.max_ms


def test_ping_without_timestamps_and_ipv6_sources():
    replies = parse_ping_replies((DATA / "ping.txt").read_text())
    assert [r.t_s for r in replies] == [None] * 3
    v6 = parse_ping_replies("64 bytes from fe80::1%h1-eth0: icmp_seq=7 ttl=64 time=0.051 ms\n")
    assert (v6[0].seq, v6[0].rtt_ms) == (7, 0.051)


def test_ping_with_no_reply_has_no_rtt():
    s = parse_ping_summary((DATA / "ping-unreachable.txt").read_text())
    assert (s.transmitted, s.received, s.min_ms) == (2, 0, None)
    with pytest.raises(BloatlabError):
        parse_ping_summary("ping: connect: Network is unreachable\n")


def test_iperf3_tcp():
    r = parse_iperf3((DATA / "iperf3-tcp.json").read_text())
    assert r.protocol == "TCP"
    # 10 Mbit/s link: payload capacity 10e6 * 1448 / 1514 = 9.56 Mbit/s
    assert r.receiver_bps == pytest.approx(9.5073e6, rel=1e-3)
    assert r.retransmits == 0
    assert len(r.intervals) == 2


def test_iperf3_udp():
    r = parse_iperf3((DATA / "iperf3-udp.json").read_text())
    assert r.protocol == "UDP"
    assert r.sender_bps > r.receiver_bps  # 12 Mbit/s offered to a 10 Mbit/s link
    assert r.receiver_bps == pytest.approx(9.67e6, rel=0.01)
    assert r.lost_percent == pytest.approx(14.08, abs=0.01)


def test_iperf3_tcp_stopped_by_a_signal_says_its_receiver_totals_are_missing():
    # SIGTERM to the client 5.7 s into a 30 s test: it prints the sender's totals, and zeros
    # for the receiver's, which never came.
    r = parse_iperf3((DATA / "iperf3-tcp-interrupted.json").read_text())
    assert r.cut_short and r.receiver_bps == 0 and r.sender_bps == pytest.approx(9.07e6, rel=0.01)
    assert not parse_iperf3((DATA / "iperf3-tcp.json").read_text()).cut_short
    assert not parse_iperf3((DATA / "iperf3-udp.json").read_text()).cut_short


def test_iperf3_errors_are_one_line():
    with pytest.raises(BloatlabError, match="iperf3 failed: unable to connect"):
        parse_iperf3('{"start": {}, "intervals": [], "end": {}, "error": "unable to connect to server"}')
    with pytest.raises(BloatlabError, match="no JSON"):
        parse_iperf3("iperf3: error - the server is busy")


def test_iperf3_server_intervals_with_arrival_times():
    lines = (DATA / "iperf3-server-intervals.txt").read_text().splitlines()
    rows = parse_iperf3_intervals(lines)
    # Every interval line but the "receiver" total; headers and banners are skipped.
    assert len(rows) == 16
    assert rows[0] == (3733.491619, pytest.approx(2.31))
    assert rows[5] == (3733.991569, pytest.approx(13.7))
    assert rows[-1] == (3748.517232, pytest.approx(9.49))
    assert all(b[0] > a[0] for a, b in zip(rows, rows[1:]))
    assert parse_iperf3_intervals(["garbage", "1.0 [  5]   0.00-0.10   sec  1 KBytes  100 Kbits/sec"]) == [
        (1.0, pytest.approx(0.1))]
