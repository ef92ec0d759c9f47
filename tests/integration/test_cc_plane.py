"""The cc-plane preset: reno, cubic and bbr through a 20 Mbit/s tail-drop bottleneck of 100
packets, simulated in ns-3 (two repetitions each, 10 s), land on the throughput-delay plane as
physics has them: all three fill the link, and BBR's RTT p95 is well below the loss-based
ones', which fill the queue (100 packets at 20 Mbit/s are 61 ms over the 20 ms base). The
sweep draws compare-cc-plane.png with one mean and one ellipse per scheme."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bloatlab.analysis.sweep_plots import build_sweep_figures
from bloatlab.results.reader import load_sweep

RATE_MBPS = 20.0


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    out = tmp_path_factory.mktemp("cc-plane") / "sweep"
    done = subprocess.run([sys.executable, "-m", "bloatlab", "run", "--preset", "cc-plane", "--backend", "ns3", "--quiet",
                           "--sweep", "cc=reno,cubic,bbr", "--repeat", "2", "--set", "duration=10s", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return out


def test_each_scheme_lands_where_physics_puts_it(plane):
    frame = load_sweep(plane).metrics()
    assert sorted(frame["cc"].unique()) == ["bbr", "cubic", "reno"] and len(frame) == 6
    means = frame.groupby("cc")[["flows.flow.goodput_mbps", "rtt_ms.p95"]].mean()
    assert (means["flows.flow.goodput_mbps"] > 0.9 * RATE_MBPS * 1448 / 1514).all(), means
    for lossy in ("reno", "cubic"):
        assert means.loc[lossy, "rtt_ms.p95"] > 20 + 0.8 * 100 * 1514 * 8 / (RATE_MBPS * 1e3), means
        assert means.loc["bbr", "rtt_ms.p95"] < means.loc[lossy, "rtt_ms.p95"] - 15, means


def test_the_sweep_draws_the_plane(plane):
    from matplotlib.patches import Ellipse

    assert (plane / "plots" / "compare-cc-plane.png").stat().st_size > 10_000
    figure = {d.name: d for d in build_sweep_figures(load_sweep(plane)).drawn}["compare-cc-plane"].figure
    ax = figure.axes[0]
    assert {t.get_text() for t in ax.texts} == {"reno", "cubic", "bbr"}
    assert sum(isinstance(p, Ellipse) for p in ax.patches) == 3
    assert "as Pantheon draws schemes" in (plane / "report.html").read_text()  # its caption, beside it
    assert json.loads((plane / "sweep.json").read_text())["axes"][0]["name"] == "cc"
