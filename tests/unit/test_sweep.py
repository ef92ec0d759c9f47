"""The sweep engine's bookkeeping: order, sweep.json, --resume, interruption. The runs here
are stand-ins that write a summary (the engine never looks inside a run); real sweeps run in
tests/integration/test_sweep.py."""

import io
import json
import os

import pytest

from bloatlab.analysis.report import finish_sweep
from bloatlab.errors import BloatlabError
from bloatlab.lab.executors import RunResult
from bloatlab.results.summary import NicSummary
from bloatlab.lab.sweep import Axis, label, points, run_sweep

AXES = [Axis("maxq", (20, 100)), Axis("cc", ("reno", "bbr"))]


class Runs:
    """run_one for the engine: records calls; interrupts or fails on request."""

    def __init__(self, interrupt_at=None, fail_at=None):
        self.calls = []
        self.interrupt_at, self.fail_at = interrupt_at, fail_at

    def __call__(self, values, rep, run_dir, tick):
        self.calls.append((label(values), rep))
        tick(0.5)
        if len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        if len(self.calls) == self.fail_at:
            raise RuntimeError("the machine broke")
        run_dir.mkdir(parents=True)
        summary = {"complete": True, "ping": {"median_ms": values["maxq"] + rep}}  # a nic run's, as the sweep's kind
        (run_dir / "summary.json").write_text(json.dumps(summary))
        return RunResult(True, NicSummary.from_json(summary))


def sweep(out, runs, **kw):
    args = dict(kind="nic", name="t", source="test", axes=AXES, repeat=2, fixed={"duration": "1s"},
                run_one=runs, estimate_s=1.0, headline=lambda s: f"rtt {s.ping.median_ms}",
                finish=finish_sweep, progress=False, stream=io.StringIO())
    return run_sweep(out, **{**args, **kw})


def test_points_are_the_cross_product_first_axis_slowest():
    assert [label(p) for p in points(AXES)] == ["maxq=20,cc=reno", "maxq=20,cc=bbr", "maxq=100,cc=reno",
                                                 "maxq=100,cc=bbr"]
    assert label({}) == "all" and points([]) == [{}]


def test_a_sweep_runs_every_point_and_repetition(tmp_path):
    runs = Runs()
    outcome = sweep(tmp_path / "s", runs)
    assert outcome.complete and outcome.done == outcome.runs == 8
    assert runs.calls[:3] == [("maxq=20,cc=reno", 1), ("maxq=20,cc=reno", 2), ("maxq=20,cc=bbr", 1)]
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert doc["status"] == "complete" and doc["axes"][0] == {"name": "maxq", "values": [20, 100]}
    assert doc["points"][3]["runs"][1]["dir"] == "maxq=100,cc=bbr/rep2"
    agg = json.loads((tmp_path / "s" / "aggregate.json").read_text())
    assert agg["points"][0]["metrics"]["ping.median_ms"]["mean"] == 21.5


def test_interrupt_keeps_completed_runs_and_resume_runs_only_the_rest(tmp_path):
    out = tmp_path / "s"
    first = Runs(interrupt_at=3)
    outcome = sweep(out, first)
    assert outcome.interrupted and not outcome.complete and outcome.done == 2
    doc = json.loads((out / "sweep.json").read_text())
    statuses = [r["status"] for p in doc["points"] for r in p["runs"]]
    assert statuses == ["complete", "complete", "incomplete"] + ["pending"] * 5
    (out / "maxq=20,cc=bbr" / "rep1").mkdir(parents=True)  # what the interrupted run left
    (out / "maxq=20,cc=bbr" / "rep1" / "junk").write_text("x")

    with pytest.raises(BloatlabError, match="already holds a sweep; add --resume"):
        sweep(out, Runs())
    with pytest.raises(BloatlabError, match="holds another sweep .repeat"):
        sweep(out, Runs(), resume=True, repeat=3)
    with pytest.raises(BloatlabError, match="another version of test"):
        sweep(out, Runs(), resume=True, fingerprint="edited")
    second = Runs()
    outcome = sweep(out, second, resume=True)
    assert outcome.complete and len(second.calls) == 6
    assert ("maxq=20,cc=reno", 1) not in second.calls and second.calls[0] == ("maxq=20,cc=bbr", 1)
    assert not (out / "maxq=20,cc=bbr" / "rep1" / "junk").exists()


def test_a_sweep_another_process_runs_is_not_resumed(tmp_path):
    out = tmp_path / "s"
    sweep(out, Runs(interrupt_at=1))
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["owner"]["pid"] == os.getpid()
    doc["status"] = "running"  # as if this process were still running it
    (out / "sweep.json").write_text(json.dumps(doc))
    with pytest.raises(BloatlabError, match=f"being run by another bloatlab .pid {os.getpid()}"):
        sweep(out, Runs(), resume=True)
    doc["owner"]["pid"] = 2**22 + 1  # no such process: a crashed sweep is resumed
    (out / "sweep.json").write_text(json.dumps(doc))
    assert sweep(out, Runs(), resume=True).complete


def test_a_failing_run_stops_the_sweep_and_is_recorded(tmp_path):
    with pytest.raises(RuntimeError, match="machine broke"):
        sweep(tmp_path / "s", Runs(fail_at=2))
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    run = doc["points"][0]["runs"][1]
    assert run["status"] == "failed" and "machine broke" in run["reason"] and doc["status"] == "incomplete"
    assert (tmp_path / "s" / "aggregate.csv").exists()


def test_resume_needs_a_sweep_and_a_new_sweep_an_empty_directory(tmp_path):
    with pytest.raises(BloatlabError, match="no sweep to resume"):
        sweep(tmp_path / "none", Runs(), resume=True)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(BloatlabError, match="not empty"):
        sweep(tmp_path / "full", Runs())


def test_a_local_sweep_imports_no_ray(tmp_path):
    """Without --cluster nothing changes: the local executor runs it, and Ray is never imported."""
    import subprocess
    import sys
    from pathlib import Path

    code = f"""
import io, json, sys
from pathlib import Path
from bloatlab.analysis.report import finish_sweep
from bloatlab.lab.executors import RunResult, executor
from bloatlab.lab.sweep import Axis, run_sweep
from bloatlab.results.summary import NicSummary

def run_one(values, rep, run_dir, tick):
    run_dir.mkdir(parents=True)
    summary = {{"complete": True, "ping": {{"median_ms": values["maxq"] + rep}}}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return RunResult(True, NicSummary.from_json(summary))

outcome = run_sweep(Path({str(tmp_path / 's')!r}), kind="nic", name="t", source="test", axes=[Axis("maxq", (20, 100))],
                    repeat=2, fixed={{}}, run_one=run_one, estimate_s=1.0, headline=str, finish=finish_sweep,
                    executor=executor("local"), progress=False, stream=io.StringIO())
print(outcome.done, "ray" in sys.modules)
"""
    src = Path(__file__).resolve().parents[2] / "src"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(src)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4", "False"]
