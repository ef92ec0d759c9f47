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

