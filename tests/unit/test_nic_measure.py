"""What a nic run makes of iperf3's JSON and ping's output (captured from real runs): its series,
and its summary's records (results/summary.py)."""

import json
from pathlib import Path

import pytest

from bloatlab.experiment.parsers import parse_iperf3, parse_iperf3_text_report
from bloatlab.lab.nic import headline
from bloatlab.nic.measure import ping_outcome, throughput_rows
from bloatlab.results.summary import NicPing, NicSummary, NicTcp, NicUdp

DATA = Path(__file__).resolve().parents[1] / "data"


def test_tcp_summary_averages_cwnd_and_rtt_over_iperf3s_intervals():
    text = (DATA / "iperf3-tcp.json").read_text()
    doc = json.loads(text)
    s = NicTcp.of(parse_iperf3(text), doc)
    cwnds = [i["streams"][0]["snd_cwnd"] for i in doc["intervals"]]
    rtts = [i["streams"][0]["rtt"] for i in doc["intervals"]]
    assert s.cwnd_kb_mean == pytest.approx(sum(cwnds) / len(cwnds) / 1000)
    assert s.rtt_ms_mean == pytest.approx(sum(rtts) / len(rtts) / 1000)
    assert abs(s.receiver_mbps - 9.507303780) < 1e-6 and s.retransmits == 0


def test_udp_throughput_series_is_the_receivers_from_the_servers_report():
    text = (DATA / "iperf3-udp-server-output.json").read_text()
    doc = json.loads(text)
    s = NicUdp.of(parse_iperf3(text))
    assert s.sender_mbps > 99 and 45 < s.receiver_mbps < 50 and 40 < s.lost_percent < 60
    rows, side = throughput_rows(doc, "udp", offset_s=3.0)
    assert side == "receiver"
    assert rows[0] == (3.1, "udp", 41.9) and all(r[1] == "udp" for r in rows)
    # 100 ms intervals of a 2 s test (the server's last one closes when the test does)
    assert [round(r[0] - 3.0, 2) for r in rows[:20]] == [round(0.1 * k, 2) for k in range(1, 21)]
    assert 2.0 < rows[-1][0] - 3.0 < 2.1


def test_without_a_server_report_the_series_is_the_senders():
    doc = json.loads((DATA / "iperf3-tcp.json").read_text())
    doc.pop("server_output_text", None)
    rows, side = throughput_rows(doc, "tcp", 0.0)
    assert side == "sender" and len(rows) == len(doc["intervals"])


def test_text_report_leaves_out_the_summary_lines():
    text = ("[  5]   0.00-1.00   sec  1.19 MBytes  9.95 Mbits/sec\n"
            "[  5]   1.00-2.00   sec  1.19 MBytes  1.01 Gbits/sec  0.1 ms  0/10 (0%)\n"
            "[  5]   0.00-2.00   sec  2.38 MBytes  9.97 Mbits/sec                  receiver\n")
    assert parse_iperf3_text_report(text) == [(0.0, 1.0, 9.95), (1.0, 2.0, 1010.0)]


def test_ping_summary_and_series_from_ping_D():
    got = ping_outcome((DATA / "ping-D.txt").read_text(), t0_real=1795265777.0)
    assert NicPing.of(got.stated, got.rtts, got.lost).to_dict() == {
        "min_ms": 10.217, "avg_ms": 10.657, "max_ms": 12.364, "mdev_ms": 0.853, "median_ms": 10.2, "count": 5,
        "lost": 0}
    assert abs(got.rows[0][0] - 0.567473) < 1e-6 and got.rows[0][1:] == ("ping", 10.2)


def test_headline_says_a_run_in_one_line_and_survives_nulls():
    line = headline(NicSummary.from_json({
        "tcp": {"receiver_mbps": 47.1, "retransmits": 3, "cwnd_kb_mean": 200.4},
        "udp": {"receiver_mbps": None, "sender_mbps": 100.0, "lost_percent": None},
        "ping": {"min_ms": 10.0, "avg_ms": 20.0, "max_ms": 30.0, "mdev_ms": 5.0}}))
    assert line == ("TCP 47.1 Mbit/s, 3 retr, cwnd 200 KB; UDP - of 100.0 Mbit/s, -% lost; "
                    "ping 10.00/20.00/30.00/5.00 ms")
