"""Flent data files: a run exported as the Flent test of its shape, read back by Flent 2.3 itself
(its resultset loader and `flent -f summary`), with Flent's series names and bloatlab's numbers."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flent.resultset import load as flent_load

from bloatlab.errors import BloatlabError
from bloatlab.results.flent import export, shape
from bloatlab.results.reader import load_run

T0 = 1_795_000_000.0
MARKS = {"be": 0, "bk": 8, "cs5": 40, "ef": 46}


def bulk(name, src, dst, dscp=0):
    return {"name": name, "kind": "bulk", "start_ns": 2 * 10**9, "stop_ns": 8 * 10**9, "src": src, "dst": dst,
            "cc": "cubic", "dscp": dscp}


def probe(name, kind="ping", dscp=0):
    return {"name": name, "kind": kind, "start_ns": 0, "stop_ns": 10 * 10**9, "src": "h1", "dst": "h2", "dscp": dscp}


def write(path, workloads):
    """A finished 10 s run: each flow at a steady rate, each probe at 20 ms idle and 80 ms loaded."""
    (path / "series").mkdir(parents=True)
    flows = [w["name"] for w in workloads if w["kind"] == "bulk"]
    probes = [w["name"] for w in workloads if w["kind"] in ("ping", "irtt")]
    rates = {name: 1.0 + i for i, name in enumerate(flows)}
    rows = ["t_s,flow,mbps"] + [f"{t / 10:.1f},{f},{rates[f]}" for f in flows for t in range(21, 81)]
    (path / "series" / "throughput.csv").write_text("\n".join(rows) + "\n")
    rows = ["t_s,probe,rtt_ms"] + [f"{t / 10:.1f},{p},{80.0 if 20 < t <= 80 else 20.0}" for p in probes
                                    for t in range(1, 100)]
    (path / "series" / "ping.csv").write_text("\n".join(rows) + "\n")
    meta = {"name": "exp", "params": {"maxq": 100}, "complete": True, "started_at": "2026-11-21T10:00:00+00:00",
            "t0_realtime_s": T0, "hosts": [{"name": "h1", "address": "10.0.0.1"}, {"name": "h2", "address": "10.0.0.2"}],
            "spec": {"duration_s": 10.0, "workloads": workloads}}
    (path / "run.json").write_text(json.dumps(meta))
    (path / "summary.json").write_text(json.dumps({"complete": True}))
    return load_run(path)


def flent_summary(path):
    """Flent's own command, from this Python's environment (the test extra installs it)."""
    flent = shutil.which("flent", path=str(Path(sys.executable).parent)) or "flent"
    return subprocess.run([flent, "-i", str(path), "-f", "summary"], capture_output=True, text=True, timeout=60)


def test_one_upload_and_a_ping_is_flents_tcp_nup(tmp_path):
    run = write(tmp_path / "run", [bulk("bulk", "h1", "h2"), probe("ping"),
                                   {"name": "web", "kind": "web", "start_ns": 0, "stop_ns": 10**10,
                                    "server": "h1", "client": "h2"}])
    assert shape(run) == ("tcp_nup", {"upload_streams": 1}, {"bulk": "TCP upload::1", "ping": "Ping (ms) ICMP"},
                          ["web"])
    path = export(run)
    assert path == tmp_path / "run" / "tcp_nup-run.flent.gz"
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    assert doc["version"] == 4 and doc["metadata"]["BLOATLAB_LEFT_OUT"] == ["web"]
    got = flent_load(str(path))
    assert got.meta("NAME") == "tcp_nup" and got.meta("TEST_PARAMETERS") == {"upload_streams": 1}
    assert got.meta("HOST") == "10.0.0.2" and got.meta("LENGTH") == 6.0 and got.meta("STEP_SIZE") == 0.2
    values = [v for v in got.series("TCP upload::1") if v is not None]
    assert len(values) == 30 and set(values) == {1.0}  # 2-8 s on the 0.2 s grid
    pings = np.array([v for v in got.series("Ping (ms) ICMP") if v is not None])
    assert len(pings) == 50 and pings.max() == 80.0 and pings.min() == 20.0
    raw = list(got.raw_series("Ping (ms) ICMP", absolute=True))
    assert len(raw) == 99 and raw[0] == (pytest.approx(T0 + 0.1), 20.0)
    summary = flent_summary(path)
    assert summary.returncode == 0, summary.stderr
    assert "TCP upload::1" in summary.stdout and "Ping (ms) ICMP" in summary.stdout


def test_rrul_marks_give_flents_rrul_series(tmp_path):
    workloads = [bulk(f"up_{m}", "h1", "h2", d) for m, d in MARKS.items()] + \
                [bulk(f"down_{m}", "h2", "h1", d) for m, d in MARKS.items()] + \
                [probe("icmp"), probe("udp_ef", "irtt", 46), probe("udp_be", "irtt", 0)]
    run = write(tmp_path / "rrul", workloads)
    test, params, names, left_out = shape(run)
    assert (test, params, left_out) == ("rrul", {}, [])
    assert names["up_cs5"] == "TCP upload CS5" and names["down_bk"] == "TCP download BK"
    assert names["udp_ef"] == "Ping (ms) UDP EF" and names["icmp"] == "Ping (ms) ICMP"
    path = export(run, tmp_path / "out.flent.gz")
    got = flent_load(str(path))
    assert got.meta("NAME") == "rrul"
    sums = [v for v in got.series("TCP upload sum") if v is not None]
    assert set(sums) == {1.0 + 2 + 3 + 4}
    summary = flent_summary(path)
    assert summary.returncode == 0, summary.stderr
    for series in ("TCP download EF", "TCP upload sum", "Ping (ms) UDP BE"):
        assert series in summary.stdout


def test_rrul_with_every_flow_marked_be_is_flents_rrul_be(tmp_path):
    workloads = [bulk(f"up_{m}", "h1", "h2") for m in MARKS] + [bulk(f"down_{m}", "h2", "h1") for m in MARKS] + \
                [probe("icmp"), probe("udp_ef", "irtt", 46), probe("udp_be", "irtt", 0)]
    run = write(tmp_path / "rrul_be", workloads)
    test, params, names, left_out = shape(run)
    assert (test, params, left_out) == ("rrul_be", {}, ["udp_ef"])  # rrul_be's UDP probes are all BE
    assert [names[f"up_{m}"] for m in MARKS] == ["TCP upload BE", "TCP upload BE2", "TCP upload BE3", "TCP upload BE4"]
    assert names["down_ef"] == "TCP download BE4" and names["udp_be"] == "Ping (ms) UDP BE1"
    path = export(run)
    assert path.name == "rrul_be-rrul_be.flent.gz"
    got = flent_load(str(path))
    assert got.meta("NAME") == "rrul_be"
    assert {v for v in got.series("TCP download sum") if v is not None} == {5.0 + 6 + 7 + 8}
    summary = flent_summary(path)
    assert summary.returncode == 0, summary.stderr
    for series in ("TCP download BE3", "TCP upload sum", "Ping (ms) UDP BE1", "Ping (ms) ICMP"):
        assert series in summary.stdout


def test_pings_alone_are_flents_ping_test(tmp_path):
    run = write(tmp_path / "pings", [probe("ping"), {"name": "web", "kind": "web", "start_ns": 0, "stop_ns": 10**10,
                                                     "server": "h1", "client": "h2"}])
    assert shape(run) == ("ping", {}, {"ping": "Ping (ms) ICMP"}, ["web"])
    summary = flent_summary(export(run))
    assert summary.returncode == 0 and "Ping (ms) ICMP" in summary.stdout, summary.stderr


def test_what_flent_cannot_show_is_a_clear_error(tmp_path):
    mixed = write(tmp_path / "mixed", [bulk("up", "h1", "h2"), bulk("down", "h2", "h1"), probe("ping")])
    with pytest.raises(BloatlabError) as error:
        shape(mixed)
    assert error.value.field == "DIR" and "1 uploads and 1 downloads" in error.value.message
    rpm = write(tmp_path / "rpm", [{"name": "rpm", "kind": "responsiveness", "start_ns": 0, "stop_ns": 10**10,
                                    "server": "h2", "client": "h1"}])
    with pytest.raises(BloatlabError, match="no Flent counterpart"):
        shape(rpm)


def test_the_cli_exports_every_complete_run_of_a_sweep(make_sweep):
    out = make_sweep()
    for run_json in out.glob("*/rep*/run.json"):  # the synthetic sweep's runs: one bulk flow and a ping
        meta = json.loads(run_json.read_text())
        meta["spec"]["workloads"] = [bulk("bulk", "h1", "h2"), probe("ping")]
        run_json.write_text(json.dumps(meta))
    result = subprocess.run([sys.executable, "-m", "bloatlab", "export", "--flent", str(out), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    files = json.loads(result.stdout)["files"]
    complete = sorted(str(p.parent) for p in out.glob("*/rep*/run.json") if json.loads(p.read_text())["complete"])
    assert sorted(f["run"] for f in files) == complete and all(Path(f["file"]).is_file() for f in files)
    refused = subprocess.run([sys.executable, "-m", "bloatlab", "export", "--flent", str(out), "--out", "x.flent.gz"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--out" in refused.stderr


def test_an_exported_file_reads_back_as_a_measurement_with_the_runs_own_figures(tmp_path):
    """What calibrate reads: the Flent file of a run gives the run's figures, under Flent's names."""
    from bloatlab.results.measurement import read_measurement

    run = write(tmp_path / "nup", [bulk("up1", "h1", "h2"), bulk("up2", "h1", "h2"), probe("ping")])
    from_file, from_run = read_measurement(export(run)), read_measurement(run.path)
    assert from_file.test == "tcp_nup" and [f.name for f in from_file.flows] == ["TCP upload::1", "TCP upload::2"]
    rename = {"up1": "TCP upload::1", "up2": "TCP upload::2", "ping": "Ping (ms) ICMP"}
    want = {".".join([k.split(".")[0], rename.get(k.split(".")[1], k.split(".")[1]), *k.split(".")[2:]]): v
            for k, v in from_run.figures().items()}
    assert from_file.figures() == pytest.approx(want) and len(want) == 17  # 2 flows, 3 totals, 12 percentiles
    assert from_file.load_window() == from_run.load_window() == (2.0, 8.0)
