"""The tcp_probe tracepoint and `ss -tine` parsers on outputs captured on this project's test
machine (Linux 6.18, iproute2 6.1) from iperf3 flows across a userspace link of 10 Mbit/s with
5 ms each way, and over IPv6 loopback:

    tcp_probe.txt  a tracefs instance's `trace` file (its header, then events), trimmed; then the
                   first lines of a `trace_pipe` read that fell behind ("CPU:1 [LOST 728 EVENTS]")
    ss-tin.txt     SsProbe's raw file: "# t_s=... host=..." before each poll's ss output, trimmed
"""

from pathlib import Path

import pytest

from bloatlab.errors import BloatlabError
from bloatlab.experiment.parsers import TcpProbeEvent, parse_ss_tin, parse_tcp_probe, split_host_port
from bloatlab.experiment.probes.tcp import read_samples

DATA = Path(__file__).resolve().parents[1] / "data"


# The tracepoint ------------------------------------------------------------------------------

def test_tracepoint_events_skip_the_header_and_lost_notes():
    text = (DATA / "tcp_probe.txt").read_text()
    events = parse_tcp_probe(text)
    # 46 lines: 12 header lines, 33 events, one "CPU:1 [LOST 728 EVENTS]"
    assert len(text.splitlines()) == 46 and len(events) == 33
    families = [(e.family, e.src.startswith("::ffff:")) for e in events]
    # IPv6 loopback, a dual-stack server's IPv4 flows (shown as v4-mapped IPv6), plain IPv4 clients
    assert [families.count(f) for f in [("AF_INET6", False), ("AF_INET6", True), ("AF_INET", False)]] == [8, 14, 11]


def test_tracepoint_event_fields_and_units():
    events = parse_tcp_probe((DATA / "tcp_probe.txt").read_text())
    # "iperf3-17084 [000] ..s2.  3664.222071: tcp_probe: family=AF_INET6 src=[::1]:35198 dest=[::1]:5303
    #  ... data_len=1 snd_nxt=0x881648c0 snd_una=0x881648c0 snd_cwnd=13 ssthresh=2147483647
    #  snd_wnd=65536 srtt=21 rcv_wnd=65536 sock_cookie=108d ..."
    assert events[7] == TcpProbeEvent(
        t_s=3664.222071, cpu=0, family="AF_INET6", src="::1", sport=35198, dst="::1", dport=5303,
        data_len_bytes=1, snd_nxt=0x881648C0, snd_una=0x881648C0, snd_cwnd_pkts=13, ssthresh_pkts=None,
        snd_wnd_bytes=65536, srtt_us=21, rcv_wnd_bytes=65536, sock_cookie=0x108D)
    # The sender of the reno flow after its first loss: ssthresh set, srtt 128 ms of queue.
    sender = events[24]
    assert (sender.t_s, sender.src, sender.sport, sender.dst, sender.dport) == (
        3664.5825, "10.0.0.1", 55804, "10.0.0.2", 5301)
    assert (sender.snd_cwnd_pkts, sender.ssthresh_pkts, sender.srtt_us) == (247, 126, 128198)
    assert (sender.snd_una, sender.snd_nxt, sender.sock_cookie) == (0x49D432A7, 0x49D9CF57, 0x1092)
    # A dual-stack server's socket of an IPv4 flow, before any loss: ssthresh unset.
    server = events[8]
    assert (server.family, server.src, server.sport, server.dst) == ("AF_INET6", "::ffff:10.0.0.2", 5301,
                                                                     "::ffff:10.0.0.1")
    assert (server.snd_cwnd_pkts, server.ssthresh_pkts, server.srtt_us) == (10, None, 10152)


def test_tracepoint_garbage_and_foreign_lines_are_skipped():
    good = ("  iperf3-1  [001] ..s2.  12.500000: tcp_probe: family=AF_INET src=10.0.0.1:40000 "
            "dest=10.0.0.2:5201 mark=0x0 data_len=0 snd_nxt=0x10 snd_una=0x8 snd_cwnd=20 ssthresh=14 "
            "snd_wnd=65535 srtt=10500 rcv_wnd=65535 sock_cookie=2a skbaddr=0 skaddr=0")
    text = "\n".join([
        "garbage \x00 line",
        "  iperf3-1  [001] ..s2.  12.400000: tcp_probe: family=AF_INET src=10.0.0.1:40000 dest=10.0",  # cut short
        "  iperf3-1  [001] ..s2.  12.450000: tcp_retransmit_skb: skbaddr=0 skaddr=0 family=AF_INET",
        "  iperf3-1  [001] ..s2.  12.460000: tcp_probe: src=nonsense dest=10.0.0.2:5201 snd_cwnd=x",
        "CPU:0 [LOST 3 EVENTS]",
        # No irq-info column (trace_options noirq-info) and a task name with spaces:
        good.replace("iperf3-1  [001] ..s2.", "my task-77 [001]"),
        good,
    ])
    events = parse_tcp_probe(text)
    assert [e.t_s for e in events] == [12.5, 12.5]
    assert (events[0].snd_cwnd_pkts, events[0].ssthresh_pkts, events[0].srtt_us, events[0].sock_cookie) == (
        20, 14, 10500, 42)
    assert parse_tcp_probe("") == []


def test_read_samples_of_the_tracepoint_in_ms_and_unmapped():
    samples = read_samples(DATA / "tcp_probe.txt", "tracepoint")
    assert len(samples) == 33
    assert [s.t_s for s in samples] == sorted(s.t_s for s in samples)
    assert samples[0].t_s == 3632.890367  # the trace_pipe part ran earlier: time order, not file order
    server = next(s for s in samples if s.t_s == 3664.23721)
    assert (server.src, server.dst, server.srtt_ms, server.ssthresh_pkts) == ("10.0.0.2", "10.0.0.1", 10.152, None)
    sender = next(s for s in samples if s.t_s == 3664.5825)
    assert (sender.cwnd_pkts, sender.ssthresh_pkts, sender.srtt_ms, sender.snd_una, sender.cookie) == (
        247, 126, 128.198, 0x49D432A7, 0x1092)
    loopback = [s for s in samples if s.src == "::1"]
    assert len(loopback) == 8 and all(s.srtt_ms < 0.1 for s in loopback)


# ss -tine ----------------------------------------------------------------------------------

def test_ss_sockets_stamped_by_poll_lines():
    sockets = parse_ss_tin((DATA / "ss-tin.txt").read_text())
    assert len(sockets) == 14  # the header lines and empty polls give none
    assert {s.host for s in sockets} == {"h1", "h2"}
    first = sockets[0]
    assert (first.t_s, first.host, first.state, first.src, first.sport, first.dst, first.dport) == (
        3664.316662, "h1", "ESTAB", "10.0.0.1", 55796, "10.0.0.2", 5301)
    assert (first.cookie, first.congestion, first.cwnd_pkts, first.srtt_ms, first.rttvar_ms) == (
        0xA3, "bbr", 13, 10.179, 2.901)
    # "ESTAB 0 865296 10.0.0.1:55804 10.0.0.2:5301 timer:(on,180ms,0) ino:371547 sk:1092 ..."
    # "\t ts sack reno wscale:10,10 rto:292 rtt:90.462/0.526 ... cwnd:76 ssthresh:63 ... bytes_acked:2428942"
    sender = next(s for s in sockets if s.t_s == 3666.316709 and s.sport == 55804)
    assert (sender.congestion, sender.cwnd_pkts, sender.ssthresh_pkts, sender.srtt_ms, sender.bytes_acked) == (
        "reno", 76, 63, 90.462, 2428942)
    assert sender.cookie == 0x1092  # the tracepoint's sock_cookie of the same socket
    assert sender.info["rto"] == "292" and sender.info["retrans"].endswith("/176")


def test_ss_unset_ssthresh_is_none_and_ipv6_addresses_lose_brackets():
    sockets = parse_ss_tin((DATA / "ss-tin.txt").read_text())
    early = next(s for s in sockets if s.t_s == 3664.316662 and s.sport == 55804)
    assert (early.cwnd_pkts, early.ssthresh_pkts) == (36, None)  # slow start: ss prints no ssthresh
    loopback = [s for s in sockets if s.src == "::1"]
    assert [(s.sport, s.dport, s.congestion) for s in loopback] == [
        (35198, 5303, "bbr"), (35214, 5303, "cubic"), (5303, 35198, "bbr"), (5303, 35214, "cubic")]
    mapped = next(s for s in sockets if s.host == "h2")
    assert (mapped.src, mapped.dst) == ("::ffff:10.0.0.2", "::ffff:10.0.0.1")


def test_ss_odd_lines():
    text = "\n".join([
        "Failed to find cgroup2 mount",  # ss's warning inside `ip netns exec`
        "State     Recv-Q Send-Q Local Address:Port  Peer Address:PortProcess",
        # A TIME-WAIT socket has no tcp_info line (ss -tane):
        "TIME-WAIT 0      0           10.0.0.1:38040     10.0.0.2:5301 timer:(timewait,59sec,0) ino:0 sk:1077",
        "garbage here \x00",
        "\t rtt:1/1 cwnd:99",  # an info line with no socket line before it
        # With a state filter ss leaves out the State column; with -H, the header:
        "0      0      [fe80::1%h1-eth0]:22 [fe80::2]:40000",
        "\t cubic rtt:bogus cwnd:12 ssthresh:7",
    ])
    sockets = parse_ss_tin(text)
    assert [(s.state, s.src, s.sport, s.dst, s.dport) for s in sockets] == [
        ("TIME-WAIT", "10.0.0.1", 38040, "10.0.0.2", 5301), (None, "fe80::1%h1-eth0", 22, "fe80::2", 40000)]
    assert sockets[0].cookie == 0x1077 and sockets[0].t_s is None
    assert (sockets[1].congestion, sockets[1].cwnd_pkts, sockets[1].ssthresh_pkts, sockets[1].srtt_ms) == (
        "cubic", 12, 7, None)


def test_read_samples_of_ss_keep_stamped_sockets_with_tcp_info():
    samples = read_samples(DATA / "ss-tin.txt", "ss")
    assert len(samples) == 14
    assert all(s.snd_una is None for s in samples)
    assert {(s.src, s.dst) for s in samples if s.dport == 55804} == {("10.0.0.2", "10.0.0.1")}  # unmapped
    assert read_samples(DATA / "tcp_probe.txt", "ss") == []  # no polls in a trace file
    with pytest.raises(Exception, match="use 'tracepoint' or 'ss'"):
        read_samples(DATA / "ss-tin.txt", "netstat")


def test_split_host_port():
    assert split_host_port("10.0.0.1:5201") == ("10.0.0.1", 5201)
    assert split_host_port("[::ffff:10.0.0.2]:5201") == ("::ffff:10.0.0.2", 5201)
    assert split_host_port("*:5201") == ("*", 5201)
    for bad in ("10.0.0.1", ":80", "10.0.0.1:http"):
        with pytest.raises(ValueError):
            split_host_port(bad)


def test_the_tracepoint_filter_can_keep_one_end_of_a_socket():
    from bloatlab.experiment.probes.tcp import TracepointProbe

    probe = TracepointProbe("r1", [5201], Path("raw.txt"), dports=[30000], sports=[40000])
    assert probe.filter == "sport == 5201 || dport == 5201 || dport == 30000 || sport == 40000"
    with pytest.raises(BloatlabError, match="needs the run's ports"):
        TracepointProbe("r1", [], Path("raw.txt"))
