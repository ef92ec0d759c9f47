"""The link benchmark's arithmetic and verdicts: what goodput is counted from, and when a
target is missed. Pure functions, exact expectations; the runs themselves need root."""

import pytest

from bloatlab.bench.link import Case, CaseResult, cases, DeliveredSample, delivered_bytes, goodput_mbps, received_mbps, render, parse_snmp_counter, two_hosts, verdicts

# `ss -tinH state established "dport = :5201"` in the iperf3 client's namespace, captured two
# seconds into a cubic flow over a 10 Mbit/s userspace link: the control connection (bbr, the
# machine's default) and the data connection. With a state filter ss prints no state column.
SS_CLIENT = (
    "0      0      10.0.0.1:57642 10.0.0.2:5201\n"
    "\t bbr wscale:10,10 rto:204 rtt:0.25/0.099 ato:40 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:13 "
    "bytes_sent:185 bytes_acked:186 bytes_received:4 segs_out:8 segs_in:7 data_segs_out:3 data_segs_in:4 "
    "bbr:(bw:75220112bps,mrtt:0.184,pacing_gain:2.88672,cwnd_gain:2.88672) send 602368000bps lastsnd:2004 "
    "lastrcv:2000 lastack:2000 pacing_rate 1318936408bps delivery_rate 75220776bps delivered:4 app_limited "
    "rcv_space:14480 rcv_ssthresh:64088 minrtt:0.184 snd_wnd:65536\n"
    "0      421368 10.0.0.1:57650 10.0.0.2:5201\n"
    "\t cubic wscale:10,10 rto:320 rtt:117.689/0.839 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:103 "
    "ssthresh:21 bytes_sent:2539829 bytes_acked:2390686 segs_out:1757 segs_in:965 data_segs_out:1755 "
    "send 10138178bps lastrcv:2004 pacing_rate 12165768bps delivery_rate 9563304bps delivered:1653 "
    "busy:2000ms unacked:103 rcv_space:14480 rcv_ssthresh:64088 notsent:272224 minrtt:0.134 "
    "snd_wnd:308224                                                                          \n"
)


def test_delivered_bytes_counts_the_data_connection_in_segments_of_its_mss():
    assert delivered_bytes(SS_CLIENT, 5201) == 1653 * 1448
    # tcpi_delivered counts the SYN as well: within a segment of bytes_acked.
    assert abs(delivered_bytes(SS_CLIENT, 5201) - 2390686) < 2 * 1448


def test_delivered_bytes_without_a_connection_is_unknown():
    assert delivered_bytes("", 5201) is None
    assert delivered_bytes(SS_CLIENT, 5301) is None  # another port
    no_info = "0      0      10.0.0.1:57642 10.0.0.2:5201\n"
    assert delivered_bytes(no_info, 5201) is None


def test_goodput_is_the_delivered_payload_over_the_sampled_window():
    window = [DeliveredSample(100.0, 0.004, 1_000_000), DeliveredSample(105.0, 0.006, 7_250_000)]
    assert goodput_mbps(window) == pytest.approx(6_250_000 * 8 / 5 / 1e6)


@pytest.mark.parametrize("window", [[], [DeliveredSample(1.0, 0.0, 10)],
                                    [DeliveredSample(1.0, 0.0, 10), DeliveredSample(1.0, 0.0, 20)]])
def test_goodput_needs_two_samples_apart(window):
    assert goodput_mbps(window) is None


def test_udp_throughput_counts_the_receivers_whole_intervals_after_the_start():
    # The server's intervals of a real 4 s run at 11 Mbit/s into 10 Mbit/s with 10 ms each way.
    report = {"intervals": [{"sum": {"start": start, "seconds": seconds, "bytes": n}} for start, seconds, n in [
        (0.0, 1.0, 1189376),  # left out: before after_s, slow start of the queue
        (1.0, 1.0, 1214400), (2.0, 1.0, 1215872), (3.0, 1.0, 1215872),
        (4.0, 0.245, 172224),  # left out: partial, and partly after the last datagram
    ]]}
    assert received_mbps(report, after_s=1) == pytest.approx((1214400 + 2 * 1215872) * 8 / 3 / 1e6)
    assert received_mbps({}, after_s=1) is None


def result(goodput_mbps: float | None, rate_bps: int = 1_500_000) -> CaseResult:
    capacity = rate_bps * 1448 / 1514 / 1e6
    return CaseResult(Case("userspace", rate_bps, 0), queue_pkts=100, min_rtt_ms=1.06,
                      expected_min_rtt_ms=1.045, tcp_goodput_mbps=goodput_mbps, tcp_capacity_mbps=capacity,
                      unintended_drops=0)


@pytest.mark.parametrize("share, verdict", [(0.995, "ok  "), (0.9705, "ok  "), (1.0295, "ok  "),
                                            (0.96, "MISS"), (1.09, "MISS")])
def test_goodput_must_be_within_three_percent_either_way(share, verdict):
    r = result(share * 1.5 * 1448 / 1514)
    line = next(v for v in verdicts([r]) if "TCP goodput" in v)
    assert line.startswith(verdict), line


def test_a_goodput_not_measured_is_a_miss_and_prints_as_a_dash():
    r = result(None)
    assert any(v.startswith("MISS TCP goodput not measured") for v in verdicts([r]))
    head, _, row = render([r]).splitlines()[:3]
    assert "|          -      -% |" in row
    assert len(row) == len(head)  # the dashes keep the columns in place


def test_the_table_says_what_goodput_is():
    text = render([result(1.43)])
    assert "tcpi_delivered" in text and "rate x 1448/1514" in text


def test_the_backends_must_agree_on_goodput_and_on_a_full_queue():
    def case(backend: str, goodput: float, peak: float) -> CaseResult:
        return CaseResult(Case(backend, 10_000_000, 0), queue_pkts=100, min_rtt_ms=0.17, expected_min_rtt_ms=0.157,
                          tcp_goodput_mbps=goodput, tcp_capacity_mbps=9.56, peak_rtt_ms=peak,
                          expected_peak_rtt_ms=121.3)
    lines = verdicts([case("userspace", 9.56, 119.0), case("kernel", 9.55, 120.0)])
    assert "ok   TCP goodput +0.1% from the kernel's 9.55 Mbit/s (3%): userspace    10 Mbit/s   0 ms" in lines
    assert "ok   peak RTT -0.8% from the kernel's 120.00 ms (5%): userspace    10 Mbit/s   0 ms" in lines
    lines = verdicts([case("userspace", 9.0, 119.0), case("kernel", 9.55, 5.7)])  # a kernel queue TSQ kept short
    assert any(v.startswith("MISS TCP goodput -5.8% from the kernel's") for v in lines)
    assert any(v.startswith("MISS peak RTT +1987.7% from the kernel's 5.70 ms") for v in lines)


SNMP = """Ip: Forwarding DefaultTTL InReceives
Ip: 2 64 1200
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 274616 0 50293 12 50293 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 7 0 0 0 0
"""


def test_snmp_counters_are_read_by_group_and_name():
    assert parse_snmp_counter(SNMP, "Udp", "RcvbufErrors") == 50293
    assert parse_snmp_counter(SNMP, "UdpLite", "RcvbufErrors") == 7
    assert parse_snmp_counter(SNMP, "Udp", "NoSuchCounter") is None
    assert parse_snmp_counter("", "Udp", "RcvbufErrors") is None


def test_a_receiver_that_drops_datagrams_is_said_to_be_the_host():
    r = result(1.43)
    r.udp_rcvbuf_drops = 120
    assert "h2's UDP socket dropped 120 datagrams its iperf3 did not read in time (the host's CPU, not the link)" \
        in render([r])
    r.udp_rcvbuf_drops = 0
    assert "UDP socket dropped" not in render([r])


def test_the_unlimited_trio_without_delay_alternates_for_each_round():
    plan = [c for c, _ in cases([10_000_000, None], [0, 10_000_000], {"htb": True, "netem": False}, rounds=3)]
    unlimited = [(c.backend, c.round) for c in plan if c.rate_bps is None and c.delay_ns == 0]
    assert unlimited == [(b, n) for n in (1, 2, 3) for b in ("userspace", "kernel", "veth")]
    assert all(c.round is None and c.backend != "veth" for c in plan if c.rate_bps or c.delay_ns)  # once
    assert "unlimited #2" in Case("kernel", None, 0, 2).label


def test_only_the_veth_baseline_is_a_plain_veth_pair():
    assert two_hosts(Case("veth", None, 0)).links[0].queue_at == "sender"
    assert two_hosts(Case("veth", None, 0)).links[0].backend == "kernel"
    assert two_hosts(Case("kernel", None, 0)).links[0].queue_at == "link"  # a bridge between, as userspace


def test_the_unlimited_target_is_judged_on_the_median_ratio_of_the_rounds():
    def run(backend, n, mbps):
        return CaseResult(Case(backend, None, 0, n), queue_pkts=100, tcp_goodput_mbps=mbps)
    # Round 2's veth run was a fast outlier: that round alone would say 45%.
    results = [run("userspace", 1, 3600), run("kernel", 1, 3800), run("veth", 1, 6800),
               run("userspace", 2, 3600), run("kernel", 2, 4000), run("veth", 2, 8000),
               run("userspace", 3, 3700), run("kernel", 3, 4000), run("veth", 3, 7000)]
    lines = [v for v in verdicts(results) if "unlimited" in v]
    assert lines[0] == "ok   unlimited: 53% (median of 3 rounds: 53% 45% 53%) of the plain veth's goodput (>= 50%)"
    assert lines[1].startswith("note unlimited: the kernel backend's bridge between the same veths keeps 56% ")
    assert lines[1].endswith("bloatlab-link 92% (median of 3 rounds: 95% 90% 92%) of the bridge's")
    results[0] = run("userspace", 1, 3000)
    results[6] = run("userspace", 3, 3400)
    assert next(v for v in verdicts(results) if "unlimited" in v).startswith("MISS unlimited: 45%")
