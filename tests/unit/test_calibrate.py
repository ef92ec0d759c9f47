"""Calibration's pieces that need no network: reading a measurement (a Flent file as Flent itself
writes one, a run directory), the figures it is judged by, the guess from physics, the test on
a candidate path (a spec bloatlab accepts) and the error. The search itself runs real
emulations: tests/integration/test_calibrate.py."""

import gzip
import json
import math

import pandas as pd
import pytest

from bloatlab.errors import BloatlabError
from bloatlab.lab.calibration import path as cal
from bloatlab.lab.calibration import search
from bloatlab.results.measurement import Flow, Measurement, read_measurement
from bloatlab.specs.experiment import parse_experiment

T0 = 1_795_000_000.0


def flent_file(path, test="tcp_1up", total=30.0, length=20.0, up_mbps=9.0, series_meta=None, sysctls=None):
    """A Flent 2.x data file as Flent writes one: a netperf upload at up_mbps for LENGTH s after
    5 s idle, pings every 0.2 s at 20 ms idle and 60-80 ms under load, raw values with absolute
    times."""
    step = 0.2
    xs = [round(k * step, 3) for k in range(int(total / step) + 1)]
    start, stop = (total - length) / 2, (total - length) / 2 + length
    flow = "TCP upload"
    pings = [20.0 + (60.0 + 20.0 * ((k % 10) / 9) if start + 2 < x <= stop else 0.0) for k, x in enumerate(xs)]
    tput = [up_mbps if start < x <= stop else None for x in xs]
    doc = {"version": 4, "x_values": xs,
           "results": {flow: tput, "Ping (ms) ICMP": pings},
           "raw_values": {flow: [{"t": T0 + x, "val": v} for x, v in zip(xs, tput) if v is not None],
                          "Ping (ms) ICMP": [{"t": T0 + x, "val": v} for x, v in zip(xs, pings)]},
           "metadata": {"NAME": test, "T0": "2026-11-18T07:33:20.000000Z", "TOTAL_LENGTH": total, "LENGTH": length,
                        "STEP_SIZE": step, "SERIES_META": series_meta or {flow: {"CONG_CONTROL": "reno", "DATA_TOS": 0x20}},
                        "SYSCTLS": sysctls or {"net.ipv4.tcp_ecn": 2}}}
    from datetime import datetime, timezone
    doc["metadata"]["T0"] = datetime.fromtimestamp(T0, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def test_a_flent_file_gives_its_test_flows_probes_and_figures(tmp_path):
    m = read_measurement(flent_file(tmp_path / "t.flent.gz"))
    assert m.test == "tcp_1up" and m.duration_s == 30.0 and m.load_window() == (5.0, 25.0)
    assert m.flows == [Flow("TCP upload", "up", "reno", 8, None, 5.0, 25.0)]  # TOS 0x20 is CS1
    assert [(p.name, p.kind, p.interval_s) for p in m.probes] == [("Ping (ms) ICMP", "ping", 0.2)]
    f = m.figures()
    assert f["flow.TCP upload.mean"] == pytest.approx(9.0)
    assert f["up.total.p10"] == f["up.total.p90"] == pytest.approx(9.0)
    assert "down.total.p50" not in f
    assert f["probe.Ping (ms) ICMP.idle.p50"] == pytest.approx(20.0)
    assert 80.0 <= f["probe.Ping (ms) ICMP.load.p50"] <= 100.0 and f["probe.Ping (ms) ICMP.load.p99"] <= 100.0
    assert f["probe.Ping (ms) ICMP.start.p99"] == pytest.approx(20.0)  # the file's first 2 s of load are idle
    assert "probe.Ping (ms) ICMP.start.p50" not in f  # the burst's peak only: its lower part follows chance
    assert m.base_rtt_ms() == pytest.approx(20.0)


def test_a_probe_faster_than_the_files_grid_keeps_its_own_interval(tmp_path):
    """bloatlab's own export writes a 0.2 s grid over a 0.1 s ping: the raw samples tell."""
    path = flent_file(tmp_path / "t.flent.gz")
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    doc["raw_values"]["Ping (ms) ICMP"] = [{"t": T0 + k * 0.1 + 0.003 * (k % 3), "val": 20.0} for k in range(300)]
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    assert read_measurement(path).probes[0].interval_s == pytest.approx(0.1)


def test_a_flent_files_marks_and_cc_fall_back_to_marking_and_the_series_name(tmp_path):
    meta = {"TCP upload": {"MARKING": "EF,EF"}}
    m = read_measurement(flent_file(tmp_path / "t.flent.gz", series_meta=meta, sysctls={"net.ipv4.tcp_ecn": 1}))
    assert m.flows[0].dscp == 46 and m.flows[0].cc is None and m.flows[0].ecn is None
    assert any("congestion control" in n for n in m.notes) and any("tcp_ecn = 1" in n for n in m.notes)


# Named, and compressed with no time in their header: pytest-xdist's workers must collect the
# same test ids (gzip's header holds the second it was written in).
@pytest.mark.parametrize("content, says", [
    (b"not gzip at all", "not a Flent data file"),
    (gzip.compress(b'{"a": 1}', mtime=0), "not a Flent data file (no metadata"),
    (gzip.compress(json.dumps({"metadata": {"NAME": "http"}, "results": {}}).encode(), mtime=0), "Flent's 'http' test"),
    (gzip.compress(json.dumps({"metadata": {"NAME": "ping", "TOTAL_LENGTH": "ten"}, "results": {}}).encode(),
                   mtime=0), "TOTAL_LENGTH"),
], ids=["not-gzip", "no-metadata", "http-test", "length-not-a-number"])
def test_what_is_not_a_measurement_is_a_one_line_error(tmp_path, content, says):
    path = tmp_path / "x.flent.gz"
    path.write_bytes(content)
    with pytest.raises(BloatlabError) as error:
        read_measurement(path)
    assert error.value.field == "MEASUREMENT" and says in error.value.message and "\n" not in error.value.message


def test_a_missing_path_or_a_sweep_is_named(tmp_path, make_sweep):
    with pytest.raises(BloatlabError, match="does not exist"):
        read_measurement(tmp_path / "nothing")
    with pytest.raises(BloatlabError, match="is a sweep; give one of its runs"):
        read_measurement(make_sweep())


def test_the_guess_takes_rate_rtt_and_a_fifos_limit_from_physics(tmp_path):
    m = read_measurement(flent_file(tmp_path / "t.flent.gz", up_mbps=9.0))
    g = cal.guess([m], "droptail")
    assert g.rate_up_bps == pytest.approx(9.0e6 * 1514 / 1448) and g.rate_down_bps == g.rate_up_bps
    assert g.rtt_ms == pytest.approx(20.0 - cal.STACK_RTT_MS)
    # The load's 99th percentile (~100 ms) less the base, over one 1514-byte frame's time at the rate.
    p99 = m.figures()["probe.Ping (ms) ICMP.load.p99"]
    assert g.limit_pkts == round((p99 - g.rtt_ms) / 1e3 / (1514 * 8 / g.rate_up_bps))
    assert cal.guess([m], "codel").limit_pkts is None  # an AQM keeps its own


def test_the_test_on_a_path_is_a_spec_bloatlab_runs_short_or_full(tmp_path):
    m = read_measurement(flent_file(tmp_path / "t.flent.gz"))
    path = cal.PathValues(10e6, 10e6, 20.0, "droptail", 60, loss=0.001, jitter_ms=1.0)
    full = parse_experiment(cal.test_spec(m, path), [], base_dir=tmp_path)
    assert full.duration_ns == 30 * 10**9
    bulk = [w for w in full.workloads if w.kind == "bulk"][0]
    assert (bulk.src, bulk.dst, bulk.cc, bulk.dscp, bulk.start_ns, bulk.stop_ns) == ("client", "server", "reno", 8,
                                                                                      5 * 10**9, 25 * 10**9)
    link = full.topology.links[0]
    assert link.forward.rate_bps == 10e6 and link.forward.delay_ns == 10**7 and link.forward.queue.packets == 60
    assert link.reverse.loss == pytest.approx(0.001) and link.reverse.jitter_ns == 10**6
    short = parse_experiment(cal.test_spec(m, path, load_s=6), [], base_dir=tmp_path)
    bulk = [w for w in short.workloads if w.kind == "bulk"][0]
    assert (short.duration_ns, bulk.start_ns, bulk.stop_ns) == (11 * 10**9, 3 * 10**9, 9 * 10**9)
    # As params: the file calibrate writes takes --set on every fitted value.
    spec = cal.test_spec(m, path, as_params=True)
    other = parse_experiment(spec, ["discipline=codel", "rate_up=5mbit"], base_dir=tmp_path)
    assert other.topology.links[0].forward.queue.discipline == "codel"
    assert other.topology.links[0].forward.rate_bps == 5e6
    assert parse_experiment(spec, [], base_dir=tmp_path).topology == full.topology


def test_the_error_averages_log_ratios_per_group():
    measured = {"up.total.p50": 10.0, "flow.a.mean": 5.0, "probe.p.load.p50": 100.0, "probe.p.idle.p50": 20.0,
                "probe.p.start.p99": 120.0}
    same = search.residuals(measured, dict(measured))
    assert search.error({"m1": same}) == 0.0
    off = search.residuals(measured, {**measured, "up.total.p50": 11.0})
    assert off["up.total.p50"]["relative_error"] == pytest.approx(0.1)
    assert search.error({"m1": off}) == pytest.approx(math.log(1.1) / 5)  # one group of five is off
    assert [search.group_of(n) for n in measured] == ["total", "flow", "load", "idle", "start"]
    missing = search.residuals(measured, {k: v for k, v in measured.items() if k != "flow.a.mean"})
    assert missing["flow.a.mean"]["relative_error"] == -1.0 and math.isnan(missing["flow.a.mean"]["emulated"])
    assert search.error({"m1": missing}) > 1.0


def test_the_correction_moves_rate_rtt_and_limit_as_physics_says(tmp_path):
    m = Measurement("x", "t", 10.0, [Flow("f", "up", "cubic", 0, None, 1.0, 9.0)], [],
                    pd.DataFrame({"t_s": [2.0], "flow": ["f"], "mbps": [9.0]}),
                    pd.DataFrame({"t_s": [0.5], "probe": ["p"], "rtt_ms": [21.0]}))
    c = search.Calibration([m], tmp_path, search.Settings(disciplines=("droptail",)))
    trial = search.Trial(1, "screen", cal.PathValues(10e6, 10e6, 20.0, "droptail", 50), 8.0, tmp_path)
    trial.residuals = {"m1": {
        "up.total.p50": {"measured": 9.0, "emulated": 10.0, "relative_error": -0.1},
        "probe.p.idle.p10": {"measured": 21.0, "emulated": 20.5, "relative_error": 0.02},
        "probe.p.load.p95": {"measured": 81.0, "emulated": 50.5, "relative_error": 0.6}}}
    moved = c._correct(trial)
    assert moved.rate_up_bps == pytest.approx(9e6) and moved.rate_down_bps == moved.rate_up_bps
    assert moved.rtt_ms == pytest.approx(20.5)
    assert moved.limit_pkts == round(50 * (60 / 30) * 0.9)  # twice the queueing delay, at 0.9 of the rate



def test_a_nic_runs_tcp_test_is_an_upload_with_its_ping(make_sweep):
    run = make_sweep(axes=(("txqueuelen", (10, 1000)),), repeat=1, kind="nic") / "txqueuelen=10" / "rep1"
    m = read_measurement(run)
    assert m.test.startswith("bloatlab:nic") and [(f.name, f.direction, f.cc) for f in m.flows] == [("tcp", "up", None)]
    assert m.load_window() == pytest.approx((0.0, 10.0)) and [p.name for p in m.probes] == ["ping"]
    assert set(m.throughput["flow"]) == {"tcp"}  # the UDP test's rows are not a flow of the fit
    f = m.figures()
    assert 8.5 < f["flow.tcp.mean"] < 9.5 and "probe.ping.load.p50" in f


def test_flents_own_aggregates_are_not_flows_or_probes(tmp_path):
    path = tmp_path / "rrul.flent.gz"
    xs = [round(k * 0.2, 1) for k in range(151)]
    series = {name: [1.0 if 5 < x <= 25 else None for x in xs]
              for name in ("TCP upload BE", "TCP upload BK", "TCP upload CS5", "TCP upload EF", "TCP download BE",
                           "TCP download BK", "TCP download CS5", "TCP download EF", "TCP upload sum", "TCP upload avg",
                           "TCP download sum", "TCP download avg", "TCP totals")}
    series.update({name: [20.0] * len(xs) for name in ("Ping (ms) ICMP", "Ping (ms) UDP EF", "Ping (ms) UDP BK",
                                                        "Ping (ms) UDP BE", "Ping (ms) avg")})
    with gzip.open(path, "wt") as f:
        json.dump({"version": 4, "x_values": xs, "results": series,
                   "metadata": {"NAME": "rrul", "TOTAL_LENGTH": 30, "LENGTH": 20, "STEP_SIZE": 0.2}}, f)
    m = read_measurement(path)
    assert [(f.direction, f.dscp) for f in m.flows] == [("up", 0), ("up", 8), ("up", 40), ("up", 46),
                                                         ("down", 0), ("down", 8), ("down", 40), ("down", 46)]
    assert [(p.name, p.kind, p.dscp) for p in m.probes] == [("Ping (ms) ICMP", "ping", 0), ("Ping (ms) UDP EF", "irtt", 46),
                                                            ("Ping (ms) UDP BK", "irtt", 8), ("Ping (ms) UDP BE", "irtt", 0)]
    assert m.figures()["up.total.p50"] == pytest.approx(4.0)  # from the grid: no raw values, no T0
