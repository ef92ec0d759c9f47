"""Runs side by side: labels from what differs (parameters, then the backend), two runs' headline
numbers with their relative difference, figures with both runs on one axis, and the report."""

import json
import subprocess
import sys

from bloatlab.analysis import compare
from bloatlab.results.reader import load_run
from bloatlab.results.summary import RunSummary


def as_ns3(run_dir):
    meta = json.loads((run_dir / "run.json").read_text())
    meta["spec"]["backend"] = "ns3"
    (run_dir / "run.json").write_text(json.dumps(meta))


def test_the_same_experiment_from_two_backends_is_labelled_by_backend(make_run):
    a, b = make_run("emulated"), make_run("simulated")
    as_ns3(b)
    runs = [load_run(a), load_run(b)]
    names, shared = compare.labels(runs)
    assert names == ["emulation", "ns3"] and shared["maxq"] == 100
    same = compare.labels([runs[0], load_run(a)])[0]
    assert same == ["emulated #1", "emulated #2"]


def test_differences_are_b_against_a():
    a = {"flows": {"bulk": {"goodput_mbps": 8.0}}, "rtt_ms": {"min": 20.0, "median": 100.0, "p95": 130, "max": 141},
         "queue": {"s0->h2": {"mean_pkts": 50.0, "max_pkts": 100, "drops": 0}}, "fetch_s": {"mean": 0.5}}
    b = {"flows": {"bulk": {"goodput_mbps": 8.4}}, "rtt_ms": {"min": 20.0, "median": 90.0, "p95": None, "max": 141},
         "queue": {"s0->h2": {"mean_pkts": 55.0, "max_pkts": 100, "drops": 3}}}
    diffs = {d.metric: d for d in compare.differences(RunSummary.from_json(a), RunSummary.from_json(b))}
    assert abs(diffs["goodput bulk (Mbit/s)"].relative - 0.05) < 1e-12
    assert abs(diffs["RTT median (ms)"].relative + 0.10) < 1e-12
    assert diffs["RTT p95 (ms)"].b is None and diffs["RTT p95 (ms)"].relative is None
    assert diffs["queue s0->h2 drops"].relative is None, "against 0 there is no ratio"
    assert diffs["fetch mean (s)"].b is None
    table = compare.differences_table(list(diffs.values()), "A", "B")
    assert "+5.0%" in table and "-10.0%" in table


def test_the_cli_writes_figures_with_both_runs_and_a_report(make_run, tmp_path):
    a, b = make_run("emulated"), make_run("simulated")
    as_ns3(b)
    out = tmp_path / "cmp"
    result = subprocess.run([sys.executable, "-m", "bloatlab", "compare", str(a), str(b), "--out", str(out), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [r["backend"] for r in doc["runs"]] == ["emulation", "ns3"]
    assert {d["metric"] for d in doc["differences"]} >= {"goodput bulk (Mbit/s)", "RTT median (ms)"}
    for name in ("compare-rtt-cdf", "compare-throughput", "compare-queue", "compare-cwnd"):
        assert (out / f"{name}.png").stat().st_size > 10_000, name
    figures = compare.figures([load_run(a), load_run(b)], ["emulation", "ns3"])
    assert all(len(fig.axes[0].lines) >= 2 for fig in figures.values()), "every run on each axis"
    report = (out / "report.html").read_text()
    assert "ns3 against emulation" in report and report.count("data:image/png;base64,") == 4
