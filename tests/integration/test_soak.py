"""A few minutes' soak, as `bloatlab bench soak` runs one (docs/bench.md has the hour's figures):
a sweep of short runs, then one run, sampled from /proc, judged for growth, nothing left."""

import csv
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.netns


def test_a_short_soak_finds_no_growth_and_leaves_nothing(tmp_path):
    out = tmp_path / "soak"
    done = subprocess.run([sys.executable, "-m", "bloatlab", "bench", "soak", "--runs", "6", "--run", "1s",
                           "--long", "12s", "--out", str(out), "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert all(v["ok"] for v in doc["verdicts"].values()), doc["targets"]
    assert len(doc["run_sizes_mb"]) == 6 and doc["after"]["namespaces"] == 0
    with open(out / "soak-samples.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["phase"] for r in rows} == {"sweep", "long"}
    # every figure was read: the sweep's process through six runs, the long run's datapath
    assert max(int(r["runs_done"]) for r in rows if r["phase"] == "sweep") == 6
    assert sum(1 for r in rows if r["phase"] == "long" and r["datapath_rss_mb"]) >= 8
    assert all(float(r["fds"]) > 2 and float(r["threads"]) >= 1 for r in rows)
    assert max(int(r["namespaces"]) for r in rows) >= 3  # a run's hosts and datapath, seen while it ran
