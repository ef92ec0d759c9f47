"""Fuzz targets: what the measuring tools print, as a run reads it (experiment/parsers.py and the
workloads' collect(), experiment/probes/, nic/), seeded from the real captures in tests/data and
the recorded cs244 run's raw/: lines dropped, repeated, swapped and cut, numbers replaced, junk
inserted, the whole cut short (a tool killed mid-line), or any text at all.

A tool's output is not the user's input: its contract is a result, or the failure its parser
documents (parse_iperf3 and parse_ping_summary: a one-line BloatlabError; the netlink parser: a
MachineError). A run's collect() never raises: what it cannot read becomes the run's error
line, so an odd line from iperf3 never ends a run in a traceback."""

import json
import struct
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloatlab.errors import BloatlabError, MachineError
from bloatlab.experiment import raw
from bloatlab.experiment.clock import Clock
from bloatlab.experiment.parsers import (parse_iperf3, parse_iperf3_intervals, parse_iperf3_text_report,
                                         parse_irtt_replies, parse_ping_replies, parse_ping_summary, parse_ss_tin,
                                         parse_tcp_probe)
from bloatlab.experiment.probes.qdisc import parse_link_name, parse_qdiscs
from bloatlab.experiment.probes.queue import from_qdisc_csv, from_qlog
from bloatlab.experiment.probes.tcp import read_samples
from bloatlab.experiment.workloads import BulkFlow, IrttProbe, PingFlow, UdpFlow
from bloatlab.nic.knobs import parse_features
from bloatlab.nic.measure import ping_outcome, throughput_rows
from bloatlab.results.summary import NicTcp
from bloatlab.specs.model import Bulk, Irtt, Ping, Udp

from fuzzkit import DATA, budget, contract, json_bytes, mutated_bytes, mutated_text, one_line

ARCHIVE = DATA / "run-cs244.tar.xz"


def _recorded(name: str) -> str:
    with tarfile.open(ARCHIVE) as tar:
        return tar.extractfile(name).read().decode()


PING = [(DATA / n).read_text() for n in ("ping.txt", "ping-D.txt", "ping-unreachable.txt")] + \
    [_recorded("raw/ping.ping.txt")]
IPERF_JSON = [(DATA / n).read_text() for n in ("iperf3-tcp.json", "iperf3-udp.json", "iperf3-tcp-interrupted.json",
                                               "iperf3-udp-server-output.json")] + [_recorded("raw/bulk.client.json")]
IPERF_LINES = [(DATA / "iperf3-server-intervals.txt").read_text(), _recorded("raw/bulk.server.txt")]
TCP_PROBE = [(DATA / "tcp_probe.txt").read_text(), "".join(_recorded("raw/tcp_probe.txt").splitlines(True)[:300])]
SS = [(DATA / "ss-tin.txt").read_text()]
ETHTOOL = [(DATA / "ethtool-k-veth.txt").read_text()]
QDISC_DUMP = (DATA / "qdisc-dump.bin").read_bytes()
with tarfile.open(ARCHIVE) as _tar:
    QLOG = _tar.extractfile("raw/qlog/s0-h2.forward.qlog").read()[:32 * 400]  # 400 records
# irtt's client lines (as the live view reads them) and its JSON (-o), in the shape irtt 0.9
# writes the fields collect() reads: no capture of one is in tests/data.
IRTT_LINES = "".join(f"seq={i} rtt={20 + i % 7}.{i % 10}ms rd=10.2ms sd={10 + i % 3}.1ms ipdv={i % 4}.2ms\n"
                     for i in range(30)) + "seq=30 rtt=1.2s rd=n/a sd=n/a ipdv=n/a\nseq=31 rtt=900µs\n"
IRTT_JSON = json.dumps({
    "round_trips": [{"seqno": i, "lost": "false" if i % 9 else "true",
                     "timestamps": {"client": {"send": {"wall": 1795265777_000_000_000 + i * 10**8}}},
                     "delay": {"rtt": 20_000_000 + i * 1000} if i % 9 else {}} for i in range(20)],
    "stats": {"packets_sent": 20, "packets_received": 18, "upstream_loss_percent": 5.0,
              "downstream_loss_percent": 5.0, "ipdv_round_trip": {"mean": 1_200_000}}})
QDISC_CSV = "t_s,iface,kind,qlen_pkts,backlog_bytes,drops\n" + "".join(
    f"{61167.4 + i * 0.005:.6f},s0-eth2,pfifo,{i % 50},{(i % 50) * 1514},{i // 10}\n" for i in range(60))


def text_of(seeds: list[str]) -> st.SearchStrategy[str]:
    """A seed as the tool printed it, mutated, or any text."""
    return st.one_of(st.sampled_from(seeds), st.sampled_from(seeds).flatmap(mutated_text), st.text(max_size=200))


@pytest.fixture(scope="module")
def raw_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("raw")


def _clock() -> Clock:
    clock = Clock()
    clock.t0_mono, clock.t0_real = 61167.3, 1795265777.3
    return clock


WORKLOAD = dict(start_ns=0, stop_ns=4 * 10**9, src="h1", dst="h2")


@budget(120)
@given(text=text_of(PING), recovered=st.booleans())
def test_ping_output(raw_dir, text, recovered):
    replies = parse_ping_replies(text)
    assert all(r.rtt_ms >= 0 and r.seq >= 0 for r in replies)
    stated = contract(lambda: parse_ping_summary(text))
    if stated is not None:
        assert stated.transmitted >= 0 and stated.received >= 0
        contract(lambda: ping_outcome(text, 1795265777.3))
    # As a run collects it: never a traceback, whatever ping left.
    probe = PingFlow(Ping(name="ping", kind="ping", **WORKLOAD), None, raw_dir, _clock(), 0)
    probe.started, probe.recovered = True, recovered
    raw.ping(raw_dir, "ping").write_text(text, errors="surrogatepass")
    got = probe.collect()
    assert got.ping_lost >= 0 or recovered
    assert all("\n" not in e for e in got.errors)


@budget(80)
@given(text=text_of(IPERF_JSON), lines=text_of(IPERF_LINES), udp=st.booleans())
def test_iperf3_output(raw_dir, text, lines, udp):
    result = contract(lambda: parse_iperf3(text), field=True)
    if result is not None:
        assert result.protocol in ("TCP", "UDP")
        assert all(isinstance(v, float) for v in (result.sender_bps, result.receiver_bps, result.seconds))
        doc = json.loads(text)
        rows, side = throughput_rows(doc, "tcp", 0.0)  # a nic run's series and summary, from the same JSON
        assert side in ("receiver", "sender") and all(len(r) == 3 for r in rows)
        json.dumps(NicTcp.of(result, doc).to_dict())
    rows = parse_iperf3_intervals(lines.splitlines())
    assert all(isinstance(t, float) and isinstance(mbps, float) for t, mbps in rows)
    report = parse_iperf3_text_report(lines)
    assert all(len(r) == 3 for r in report)
    # As a run collects it: the client's JSON and the server's stamped lines.
    kind, cls = (Udp, UdpFlow) if udp else (Bulk, BulkFlow)
    extra = {"rate_bps": 10**6} if udp else {}
    flow = cls(kind(name="flow", kind="udp" if udp else "bulk", **WORKLOAD, **extra), None, raw_dir, _clock(), 0)
    flow.started = True
    (raw_dir / "flow.client.json").write_text(text, errors="surrogatepass")
    raw.server(raw_dir, "flow").write_text(lines, errors="surrogatepass")
    got = flow.collect()
    assert set(got.flows) == {"flow"} and all("\n" not in e for e in got.errors)


@budget(60)
@given(lines=text_of([IRTT_LINES]), doc=json_bytes(json.loads(IRTT_JSON)))
def test_irtt_output(raw_dir, lines, doc):
    replies = parse_irtt_replies(lines)
    assert all(seq >= 0 and rtt >= 0 for seq, rtt in replies)
    probe = IrttProbe(Irtt(name="irtt", kind="irtt", **WORKLOAD), None, raw_dir, _clock(), 0)
    probe.started = True
    (raw_dir / "irtt.irtt.json").write_bytes(doc)
    raw.irtt_client(raw_dir, "irtt").write_text(lines, errors="surrogatepass")
    got = probe.collect()
    assert all("\n" not in e for e in got.errors)


@budget(50)
@given(text=text_of(TCP_PROBE))
def test_tcp_probe_output(raw_dir, text):
    events = parse_tcp_probe(text)
    assert all(isinstance(e.t_s, float) for e in events)
    path = raw_dir / "tcp_probe.txt"
    path.write_text(text, errors="surrogatepass")
    samples = read_samples(path, "tracepoint")
    assert [s.t_s for s in samples] == sorted(s.t_s for s in samples)


@budget(80)
@given(text=text_of(SS))
def test_ss_output(raw_dir, text):
    sockets = parse_ss_tin(text)
    assert all(s.cwnd_pkts is None or s.cwnd_pkts >= 0 for s in sockets)
    path = raw_dir / "ss.txt"
    path.write_text(text, errors="surrogatepass")
    read_samples(path, "ss")


@budget(200)
@given(data=st.one_of(mutated_bytes(QDISC_DUMP), st.binary(max_size=120)), ifnames=st.sampled_from([{}, {2: "qa"}]))
def test_qdisc_netlink_dump(data, ifnames):
    try:
        qdiscs = parse_qdiscs(data, ifnames)
    except MachineError as e:
        one_line(e, field=False)
    else:
        assert all(q.qlen_pkts >= 0 and q.sent_bytes >= 0 for q in qdiscs)
    # An RTM_NEWLINK's payload (ifinfomsg, then IFLA_IFNAME): what names the interfaces.
    contract(lambda: parse_link_name(memoryview(data[16:])), field=False)


@budget(100)
@given(text=text_of(ETHTOOL))
def test_ethtool_features(text):
    features = parse_features(text)
    assert all(f.parent is None or f.parent in features for f in features.values())


@budget(60)
@given(qlog=st.one_of(mutated_bytes(QLOG), st.binary(max_size=200)), csv=text_of([QDISC_CSV]),
       duration=st.sampled_from([0.0, 0.2, 4.0]))
def test_queue_records(raw_dir, qlog, csv, duration):
    """The datapath's queue log (binary records) and a kernel qdisc's samples, as a run reads them."""
    (raw_dir / "q.qlog").write_bytes(qlog)
    (raw_dir / "q.csv").write_text(csv, errors="surrogatepass")
    for read, path in ((from_qlog, raw_dir / "q.qlog"), (from_qdisc_csv, raw_dir / "q.csv")):
        trace = contract(lambda: read(path, 61167.3), field=False)
        if trace is None:
            continue
        summary = trace.summary(duration)
        json.dumps(summary.to_dict())
        rows = trace.rows("s0->h2", duration)
        assert all(0.0 <= r[0] <= duration for r in rows)


# Found by fuzzing: each defect's smallest input, as a plain test ------------------------------

def test_ping_lines_whose_numbers_do_not_read_are_skipped():
    # "[\d.]+" matched ".", which float() refuses; a 5000-digit count int() refuses.
    assert parse_ping_replies("64 bytes from h2: icmp_seq=1 ttl=64 time=. ms\n") == []
    assert parse_ping_replies(f"64 bytes from h2: icmp_seq={'1' * 5000} ttl=64 time=1.0 ms\n") == []
    for text in ("1 packets transmitted, 1 received\nrtt min/avg/max/mdev = 1.2.3/1/1/1 ms\n",
                 f"{'1' * 5000} packets transmitted, 1 received\n"):
        stated = contract(lambda: parse_ping_summary(text))
        assert stated is None or stated.min_ms is None


def test_irtt_lines_whose_numbers_do_not_read_are_skipped():
    assert parse_irtt_replies(f"seq={'1' * 5000} rtt=1ms\nseq=1 rtt=1..2ms\nseq=2 rtt=3ms\n") == [(2, 3.0)]


@pytest.mark.parametrize("text", ["[]", "7", '{"end": []}', '{"start": {"test_start": 5}}', '{"end": {"sum_sent": {"bits_per_second": "x"}}}',
                                  "[" * 100_000 + "]" * 100_000, '{"x": ' + "1" * 5000 + "}",
                                  '{"error": "line one\\nline two"}'])
def test_iperf3_json_that_is_not_iperf3s_is_a_one_line_error(text):
    # TypeError, AttributeError, ValueError, RecursionError escaped; an error of two lines.
    with pytest.raises(BloatlabError) as caught:
        parse_iperf3(text)
    one_line(caught.value)


def test_irtt_json_that_is_not_irtts_is_the_runs_error_line(raw_dir):
    # KeyError, TypeError and RecursionError escaped collect(): a run ended in a traceback.
    probe = IrttProbe(Irtt(name="irtt", kind="irtt", **WORKLOAD), None, raw_dir, _clock(), 0)
    probe.started = True
    for doc in ('{"round_trips": [{"lost": "false", "delay": {"rtt": 1}}], "stats": {}}',
                '{"round_trips": 5, "stats": {}}', "[" * 100_000 + "]" * 100_000):
        (raw_dir / "irtt.irtt.json").write_text(doc)
        got = probe.collect()
        assert len(got.errors) == 1 and "\n" not in got.errors[0] and not got.ping


def test_a_netlink_reply_cut_short_or_with_errno_int_min_is_a_machine_error():
    # parse_link_name raised struct.error; os.strerror(2**31) OverflowError.
    with pytest.raises(MachineError):
        parse_link_name(memoryview(b""))
    error = struct.pack("=IHHII", 20, 2, 0, 1, 0) + struct.pack("=i", -2**31)  # NLMSG_ERROR, error INT_MIN
    with pytest.raises(MachineError) as caught:
        parse_qdiscs(error, {})
    one_line(caught.value, field=False)


def test_a_qdisc_sample_cut_short_is_skipped(raw_dir):
    # np.genfromtxt raised ValueError for the line a killed run left half written.
    path = raw_dir / "cut.csv"
    path.write_text(QDISC_CSV.splitlines(True)[0] + "61167.4,s0-eth2,pfifo,3,4542,0\n61167.405,s0-e")
    trace = from_qdisc_csv(path, 61167.3)
    assert list(trace.pkts) == [3]


def test_iperf3_intervals_cut_short_are_left_out_of_a_nic_runs_figures():
    # throughput_rows raised KeyError ('end'); NicTcp.of TypeError on a stream that is no object.
    doc = json.loads(IPERF_JSON[0])
    del doc["intervals"][0]["sum"]["end"]
    doc["intervals"][1]["streams"] = [5]
    rows, side = throughput_rows(doc, "tcp", 0.0)
    assert side == "sender" and len(rows) == len(doc["intervals"]) - 1
    NicTcp.of(parse_iperf3(json.dumps(doc)), doc)


def test_iperf3_interval_lines_whose_numbers_do_not_read_are_skipped():
    # "[\d.]+" matched "1.2.3", which float() refuses: a run's series ended in a traceback.
    lines = ["12.5 [  5]   0.00-0.10   sec  28.3 KBytes  1.2.3 Mbits/sec", "12.6 [  5]   0.10-0.20   sec  28.3 KBytes  2.5 Mbits/sec"]
    assert parse_iperf3_intervals(lines) == [(12.6, 2.5)]
    assert parse_iperf3_text_report("[  5]   0.1.0-0.20   sec  28.3 KBytes  2.5 Mbits/sec\n") == []


def test_ss_counts_that_int_does_not_take_are_none():
    # "²".isdigit() is true and int("²") a ValueError; so is int() of 5000 digits.
    for cwnd in ("²", "1" * 5000):
        text = f"ESTAB 0 0 10.0.0.1:1 10.0.0.2:2\n\t cubic cwnd:{cwnd} rtt:1.5/0.5\n"
        assert parse_ss_tin(text)[0].cwnd_pkts is None


def test_a_qdisc_sample_that_is_no_utf8_is_skipped(raw_dir):
    # np.genfromtxt raised UnicodeDecodeError.
    path = raw_dir / "bytes.csv"
    path.write_bytes(QDISC_CSV.splitlines(True)[0].encode() + b"61167.4,s0-eth2,pfifo,3,4542,0\n\xed\xa0,1\n")
    assert list(from_qdisc_csv(path, 61167.3).pkts) == [3]


def test_numbers_too_long_to_be_floats_are_no_measurement():
    # float() reads 400 digits as infinity, which reached the live view's bins (math.floor raised).
    huge = "9" * 400 + ".5"
    assert parse_ping_replies(f"[{huge}] 64 bytes from h2: icmp_seq=1 ttl=64 time=1.0 ms\n") == []
    event = next(line for line in TCP_PROBE[0].splitlines() if parse_tcp_probe(line))
    stamp = event.split("tcp_probe:")[0].split()[-1].rstrip(":")
    assert parse_tcp_probe(event.replace(stamp, huge)) == []
    assert parse_iperf3_intervals([f"{huge} [  5]   0.00-0.10   sec  28.3 KBytes  2.5 Mbits/sec"]) == []


def test_a_ping_killed_before_its_statistics_loses_no_negative_count(raw_dir):
    # The requests lost were max(seq) - replies: -1 for a lone reply of icmp_seq=0.
    probe = PingFlow(Ping(name="ping", kind="ping", **WORKLOAD), None, raw_dir, _clock(), 0)
    probe.started = True
    raw.ping(raw_dir, "ping").write_text("0 bytes from 0: icmp_seq=0 time=0 ms")
    assert probe.collect().ping_lost == 0
