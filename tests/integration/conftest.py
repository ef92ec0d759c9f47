"""Fixtures shared by the integration tests."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.testbed.network import leftovers, remove_network


@pytest.fixture
def names():
    """Network names for one test; whatever the test leaves of them is removed afterwards."""
    used: list[str] = []

    def new(name: str) -> str:
        used.append(name)
        return name

    yield new
    for name in used:
        if leftovers(name):
            remove_network(name)
        assert not leftovers(name), f"network {name} left traces behind"


@pytest.fixture
def datapath_binary():
    try:
        return binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built (make setup)")


@pytest.fixture
def summary_reads_back():
    """summary.json as a run wrote it, once held equal, key for key and in order, to what its
    record (RunSummary) gives back."""
    return _summary_reads_back


def _summary_reads_back(run_dir: Path) -> dict:
    from bloatlab.results.summary import RunSummary

    text = (run_dir / "summary.json").read_text()
    doc = json.loads(text)
    assert json.dumps(RunSummary.from_json(doc).to_dict()) == json.dumps(doc)
    return doc


@pytest.fixture
def flent_summary():
    """`bloatlab export --flent RUN`, then Flent's own summary of the file it wrote."""
    return _flent_summary


def _flent_summary(run_dir: Path) -> str:
    export = subprocess.run([sys.executable, "-m", "bloatlab", "export", "--flent", str(run_dir), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert export.returncode == 0, export.stderr
    (exported,) = json.loads(export.stdout)["files"]
    flent = Path(sys.executable).parent / "flent"
    shown = subprocess.run([str(flent), "-i", exported["file"], "-f", "summary"], capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout



@pytest.fixture(scope="session")
def at_once():
    """run_at_once (below), for module fixtures."""
    return run_at_once


# One experiment in a child process: {"spec": a spec as a dict} or {"preset": NAME, "sets": [...]},
# and "out"; it prints the outcome as `bloatlab run --json` does.
_CHILD = """
import json, sys
from pathlib import Path
from bloatlab.lab.run import run_experiment
from bloatlab.specs.experiment import load_preset, parse_experiment
job = json.loads(sys.argv[1])
exp = (load_preset(job["preset"], job["sets"]) if "preset" in job
       else parse_experiment(job["spec"], [], base_dir=Path("."), source="test"))
print(json.dumps(run_experiment(exp, Path(job["out"]), progress=False).to_dict()))
"""


def run_at_once(jobs: dict[str, dict], out: Path, at_once: int = 2) -> dict:
    """Independent experiments, `at_once` of them side by side (each its own network and
    datapath), into out/NAME: their Outcomes by name. For fixtures whose runs are judged by
    medians, means and counts at 10-20 Mbit/s, which two or three runs sharing two cores leave
    as they are; the suite's minutes are the reason."""
    from bloatlab.lab.outcome import Outcome
    from bloatlab.results.summary import RunSummary

    waiting = list(jobs.items())
    running: dict[str, subprocess.Popen] = {}
    done: dict[str, Outcome] = {}
    try:
        while waiting or running:
            while waiting and len(running) < at_once:
                name, job = waiting.pop(0)
                running[name] = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps({**job, "out": str(out / name)})],
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            name = next(iter(running))
            stdout, stderr = running.pop(name).communicate(timeout=300)
            assert stdout.strip(), f"{name}: {stderr}"
            doc = json.loads(stdout.strip().splitlines()[-1])
            done[name] = Outcome(Path(doc["run_dir"]), RunSummary.from_json(doc["summary"]), doc["complete"],
                                 doc["reason"], doc["warnings"], [Path(p) for p in doc["plots"]], doc["interrupted"],
                                 Path(doc["report"]) if doc["report"] else None)
    finally:
        for child in running.values():  # a failed fixture stops the rest, which end as Ctrl-C ends a run
            child.terminate()
            child.communicate(timeout=60)
    return done
