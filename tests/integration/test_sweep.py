"""Sweeps end to end: real networks, real iperf3, ping and curl, short runs."""

import base64
import hashlib
import json
import re
import subprocess
import sys

import pytest

from bloatlab.specs.experiment import preset_path

pytestmark = pytest.mark.netns


def bloatlab(*argv, timeout=600):
    return subprocess.run([sys.executable, "-m", "bloatlab", *argv], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def two_by_two(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "s"
    # cc=bbr: the cs244 preset's BBR variant.
    # Two at a time (--parallel 2): 10 Mbit/s runs, each its own network and process.
    result = bloatlab("run", "--preset", "cs244", "--sweep", "maxq=20,100", "--sweep", "cc=reno,bbr",
                      "--repeat", "2", "--set", "duration=3s", "--parallel", "2", "--out", str(out), "--quiet")
    return out, result


def test_a_two_by_two_sweep_with_two_repetitions_is_complete(two_by_two):
    out, result = two_by_two
    assert result.returncode == 0, result.stderr
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["status"] == "complete" and sweep["repeat"] == 2 and sweep["fixed"] == {"duration": "3s"}
    assert [a["name"] for a in sweep["axes"]] == ["maxq", "cc"] and sweep["axes"][0]["values"] == [20, 100]
    runs = [r for p in sweep["points"] for r in p["runs"]]
    assert len(runs) == 8 and all(r["status"] == "complete" for r in runs)
    # One backend per link for every point, said in sweep.json, and each run ran on it.
    assert set(sweep["link_backends"]) == {"h1-s0", "s0-h2"}
    for r in runs:
        run = json.loads((out / r["dir"] / "run.json").read_text())
        assert run["complete"]
        assert [link["backend"] for link in run["links"]] == [sweep["link_backends"][n] for n in ("h1-s0", "s0-h2")]
    # Repetitions run with their own seeds.
    seeds = {json.loads((out / "maxq=20,cc=reno" / f"rep{k}" / "run.json").read_text())["spec"]["seed"] for k in (1, 2)}
    assert seeds == {1, 2}
    # One summary line per finished run.
    assert result.stdout.count(" rep ") >= 8 and "[8/8] maxq=100,cc=bbr rep 2" in result.stdout


def test_the_aggregate_has_every_point_and_metric(two_by_two):
    pd = pytest.importorskip("pandas")
    out, _ = two_by_two
    table = pd.read_csv(out / "aggregate.csv")
    assert table["label"].tolist() == ["maxq=20,cc=reno", "maxq=20,cc=bbr", "maxq=100,cc=reno", "maxq=100,cc=bbr"]
    assert table["n"].tolist() == [2, 2, 2, 2]
    for metric in ("flows.bulk.goodput_mbps", "rtt_ms.median", "rtt_ms.p95", "queue.s0->h2.mean_pkts"):
        for stat in ("mean", "sd", "median", "ci95_low", "ci95_high"):
            assert table[f"{metric}.{stat}"].notna().all(), f"{metric}.{stat}"
    assert (table["rtt_ms.p95.ci95_low"] <= table["rtt_ms.p95.mean"]).all()
    # The physics shows through: a five times longer queue, a longer delay under load.
    by_q = table.groupby("maxq")["rtt_ms.p95.mean"].mean()
    assert by_q[100] > by_q[20] + 20, by_q
    series = pd.read_csv(out / "series.csv.gz")
    assert set(series["series"]) >= {"ping", "cwnd", "queue", "throughput"}
    assert set(series["label"]) == set(table["label"]) and set(series["rep"]) == {1, 2}


def test_the_sweep_writes_plots_and_report(two_by_two):
    out, _ = two_by_two
    figures = {p.name for p in (out / "plots").glob("compare-*.png")}
    assert {"compare-rtt.png", "compare-cwnd.png", "compare-queue.png", "compare-throughput.png",
            "compare-fetch-box.png", "compare-fetch-cdf.png", "compare-throughput-vs-maxq.png",
            "compare-delay-vs-maxq.png", "compare-tradeoff.png"} <= figures
    page = (out / "report.html").read_text()
    assert "Sweep report: cs244" in page and "src=\"http" not in page
    assert "link backends (every point)" in page
    assert page.count("data:image/png;base64,") == len(figures)
    # The report shows the figures as plots/ has them, laid out: no legend cut at the image's edge.
    embedded = {base64.b64decode(data) for data in re.findall(r'data:image/png;base64,([^"]+)"', page)}
    assert embedded == {p.read_bytes() for p in (out / "plots").glob("compare-*.png")}
    for label in ("maxq=20,cc=reno", "maxq=20,cc=bbr", "maxq=100,cc=reno", "maxq=100,cc=bbr"):
        assert label in page
    # Every run has its own report too.
    assert (out / "maxq=20,cc=reno" / "rep1" / "report.html").exists()


def test_resume_refuses_another_sweep(tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    fingerprint = hashlib.sha256(preset_path("cs244").read_bytes()).hexdigest()[:16]  # the same spec...
    (out / "sweep.json").write_text(json.dumps({"format": "bloatlab-sweep/1", "kind": "experiment", "name": "cs244",
                                                "source": "preset cs244", "fingerprint": fingerprint,
                                                "axes": [{"name": "maxq", "values": [20]}],  # ...other axes
                                                "repeat": 1, "fixed": {}, "points": []}))
    result = bloatlab("run", "--preset", "cs244", "--sweep", "maxq=20,100", "--out", str(out), "--resume")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "holds another sweep (axes was" in result.stderr
