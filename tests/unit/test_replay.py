"""`bloatlab replay` end to end: the real bloatlab-replay binary (cargo build --release first)."""

import csv
import json
import re
import subprocess
from pathlib import Path

import pytest

from bloatlab.cli.main import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def binary():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "bloatlab-replay"], cwd=REPO, check=True)
    return REPO / "target" / "release" / "bloatlab-replay"


def run(argv, capsys):
    """The replay command as the CLI runs it: (exit status, stdout, stderr)."""
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def fates(out_dir):
    with open(out_dir / "fates.csv", newline="") as f:
        return list(csv.DictReader(f))


def write_trace(path, rows, header="t_ns,size_bytes,flow,ecn"):
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_trace_at_a_known_rate_gives_exact_departure_times(tmp_path, capsys):
    # 1500-byte frames at 12 Mbit/s take exactly 1 ms each: a burst of four leaves 1 ms apart,
    # after 2 ms of delay; a fifth arriving at 10 ms finds the link idle.
    trace = write_trace(tmp_path / "a.csv", [(0, 1500, 1, 0)] * 4 + [(10_000_000, 1500, 2, 0)])
    status, out, err = run(["replay", "--queue", "discipline=droptail,packets=10", "--rate", "12mbit",
                            "--delay", "2ms", "--arrivals", str(trace), "--out", str(tmp_path / "o")], capsys)
    assert (status, err) == (0, "")
    rows = fates(tmp_path / "o")
    assert list(rows[0]) == ["id", "t_arrival_ns", "size_bytes", "flow", "fate", "t_ns", "reason", "sojourn_ns"]
    got = [(r["id"], r["fate"], int(r["t_ns"]), int(r["sojourn_ns"]), r["reason"]) for r in rows]
    assert got == [("0", "departed", 3_000_000, 0, ""), ("1", "departed", 4_000_000, 1_000_000, ""),
                   ("2", "departed", 5_000_000, 2_000_000, ""), ("3", "departed", 6_000_000, 3_000_000, ""),
                   ("4", "departed", 13_000_000, 0, "")]
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["packets"] == summary["departed"] == 5
    assert summary["sojourn_ns"] == {"p50": 1_000_000, "p95": 3_000_000, "p99": 3_000_000, "max": 3_000_000}
    assert "replayed 5 packets through droptail" in out
    assert json.loads((tmp_path / "o" / "replay.json").read_text())["queue"] == {
        "discipline": "droptail", "packets": 10, "bytes": None}


def test_codel_over_an_overloaded_link_drops_with_reason_codel(tmp_path, capsys):
    status, out, err = run(["replay", "--queue", "discipline=codel,target=5ms,packets=1000", "--rate", "10mbit",
                            "--synthetic", "poisson", "--load", "1.2", "--flows", "4", "--packets", "20000",
                            "--out", str(tmp_path / "o")], capsys)
    assert (status, err) == (0, "")
    rows = fates(tmp_path / "o")
    assert sorted(int(r["id"]) for r in rows) == list(range(20000)), "one fate per packet"
    dropped = [r for r in rows if r["fate"] == "dropped"]
    assert dropped and {r["reason"] for r in dropped} == {"codel"}
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["dropped"]["codel"] == len(dropped) == summary["dropped_total"]
    # 1.2x overload: CoDel must shed about a sixth of the packets; the link stays busy. Over
    # 20000 Poisson gaps the share's sd is 0.006: the bounds are 5.7 and 7.9 sigma, odds 1e-8
    # for any seed (the default seed makes it the same every run).
    assert 0.12 < len(dropped) / 20000 < 0.2
    assert 9.9e6 < summary["throughput_bps"] <= 10e6
    assert "(codel " in out


def test_ecn_capable_packets_are_marked_instead(tmp_path, capsys):
    status, _, err = run(["replay", "--queue", "discipline=codel,ecn=true", "--rate", "10mbit", "--synthetic",
                          "constant", "--load", "1.5", "--ecn", "ect0", "--packets", "5000",
                          "--out", str(tmp_path / "o")], capsys)
    assert (status, err) == (0, "")
    marked = [r for r in fates(tmp_path / "o") if r["reason"] == "codel"]
    assert marked and all(r["fate"] == "departed" for r in marked)


@pytest.mark.parametrize("rows, header, field", [
    ([(0, 1500, 1, 0), (10, 1500, 1, 0), (5, 1500, 1, 0)], None, "line 4, column t_ns"),
    ([(0, 1500, 1)], "t_ns,size_bytes,flow", "line 1, column ecn: missing column"),
    ([(0, 30, 1, 0)], None, "line 2, column size_bytes"),
    ([(0, 1500, 1, 7)], None, "line 2, column ecn"),
])
def test_bad_traces_give_one_line_naming_line_and_column(tmp_path, capsys, rows, header, field):
    trace = write_trace(tmp_path / "a.csv", rows, header or "t_ns,size_bytes,flow,ecn")
    status, _, err = run(["replay", "--queue", "discipline=droptail", "--rate", "10mbit", "--arrivals", str(trace),
                          "--out", str(tmp_path / "o")], capsys)
    assert status == 2
    assert err.count("\n") == 1 and f"--arrivals {trace}: {field}" in err


@pytest.mark.parametrize("argv, field", [
    (["--queue", "discipline=codle"], "--queue.discipline:"),
    (["--queue", "discipline=codel,target=200ms,interval=100ms"], "--queue.target: target (200ms) must be below"),
    (["--queue", "discipline=codel,target"], "--queue:"),
    (["--queue", "discipline=droptail", "--rate", "10 mbit"], "--rate:"),
    (["--queue", "discipline=droptail", "--load", "-1"], "--load:"),
    (["--queue", "discipline=droptail", "--size", "30"], "--size:"),
    (["--queue", "discipline=droptail", "--synthetic", "on-off"], "--on:"),
])
def test_bad_options_give_one_line_naming_the_flag(tmp_path, capsys, argv, field):
    base = {"--rate": "10mbit", "--synthetic": "poisson", "--load": "1.2", "--packets": "10"}
    flags = dict(zip(argv[::2], argv[1::2]))
    merged = [x for k, v in {**base, **flags}.items() for x in (k, v)]
    status, _, err = run(["replay", *merged, "--out", str(tmp_path / "o")], capsys)
    assert status == 2
    assert err.count("\n") == 1 and f"bloatlab: error: {field}" in err


def test_on_off_arrivals_pause(tmp_path, capsys):
    status, _, err = run(["replay", "--queue", "discipline=droptail", "--rate", "unlimited", "--synthetic", "on-off",
                          "--pps", "1000", "--on", "10ms", "--off", "90ms", "--packets", "25",
                          "--out", str(tmp_path / "o")], capsys)
    assert (status, err) == (0, "")
    t = [int(r["t_arrival_ns"]) for r in fates(tmp_path / "o")]
    assert t[9] == 9_000_000 and t[10] == 100_000_000 and t[21] == 201_000_000


def test_bench_replay_takes_a_discipline_by_its_alias(capsys):
    status, out, _ = run(["bench", "replay", "--disciplines", "taildrop", "--packets", "0.01", "--repeat", "1"], capsys)
    assert status == 0
    assert re.search(r"^  droptail\s+\d", out, re.M), out


def test_replay_json_is_the_summary_alone_on_stdout(tmp_path, capsys):
    status, out, err = run(["replay", "--queue", "discipline=codel,packets=100", "--rate", "10mbit", "--synthetic",
                            "poisson", "--load", "1.5", "--packets", "2000", "--out", str(tmp_path / "o"), "--json"],
                           capsys)
    doc = json.loads(out)  # the whole of stdout is one document
    assert status == 0 and doc["summary"]["packets"] == 2000 and doc["summary"]["discipline"] == "codel"
    assert doc["files"]["fates"] == str(tmp_path / "o" / "fates.csv")
    assert json.loads((tmp_path / "o" / "summary.json").read_text()) == doc["summary"]


def test_bench_replay_json_and_its_verdict(capsys):
    status, out, err = run(["bench", "replay", "--disciplines", "codel", "--packets", "0.01", "--repeat", "1",
                            "--json"], capsys)
    doc = json.loads(out)
    verdict = doc["target"]["verdict"]
    assert verdict in ("ok", "MISS") and status == (0 if verdict == "ok" else 1)
    assert doc["disciplines"]["codel"]["best_pps"] > 0
    assert "codel" in err  # the table, with --json on stderr
