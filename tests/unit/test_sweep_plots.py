"""A sweep's comparison figures, drawn from a synthetic sweep directory (tests/conftest.py) laid
out as docs/sweeps.md says: which figures exist, what data is in them, what is skipped and why."""

import csv
import json

import numpy as np
import pytest

from bloatlab.analysis.sweep_plots import build_sweep_figures, pick_metrics, plot_sweep
from bloatlab.errors import BloatlabError
from bloatlab.results.reader import load_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EXPERIMENT_FIGURES = ["compare-cwnd", "compare-queue", "compare-rtt", "compare-throughput", "compare-fetch-box",
                      "compare-fetch-cdf", "compare-rtt-box", "compare-rtt-cdf", "compare-throughput-vs-maxq", "compare-delay-vs-maxq",
                      "compare-fetch-vs-maxq", "compare-queue-vs-maxq", "compare-tradeoff"]


def figures_of(out):
    built = build_sweep_figures(load_sweep(out))
    return {d.name: d for d in built.drawn}, built


def column(path, name, where=lambda row: True):
    with open(path, newline="") as f:
        return np.array([float(row[name]) for row in csv.DictReader(f) if where(row)])


def test_every_figure_of_an_experiment_sweep_is_written(make_sweep):
    out = make_sweep()
    result = plot_sweep(out)
    assert result.warnings == []
    assert result.files == [out / "plots" / f"{name}.png" for name in EXPERIMENT_FIGURES]
    for path in result.files:
        assert path.read_bytes()[:8] == PNG_MAGIC, path
    assert {p.suffix for p in plot_sweep(out, svg=True).files} == {".png", ".svg"}


def test_overlays_draw_each_points_first_complete_run(make_sweep):
    out = make_sweep(failed=("maxq=20/rep1",))
    drawn, built = figures_of(out)
    rtt = drawn["compare-rtt"].figure.axes[0]
    lines = {line.get_label(): line for line in rtt.lines}
    # maxq=20's first repetition failed: its line is rep2's, and says so.
    assert set(lines) == {"maxq=20 (rep2)", "maxq=100"}
    for label, run in (("maxq=20 (rep2)", "maxq=20/rep2"), ("maxq=100", "maxq=100/rep1")):
        np.testing.assert_array_equal(lines[label].get_ydata(), column(out / run / "series/ping.csv", "rtt_ms"))
    assert "one line per queue size, packets (maxq)" in drawn["compare-rtt"].figure.get_suptitle()
    # cwnd: the bulk flow only, not the web fetch's connection (web#1).
    cwnd = drawn["compare-cwnd"].figure.axes[0]
    assert [line.get_label() for line in cwnd.lines] == ["maxq=20 (rep2)", "maxq=100"]
    np.testing.assert_array_equal(cwnd.lines[1].get_ydata(), column(out / "maxq=100/rep1/series/cwnd.csv", "cwnd_pkts",
                                                                    lambda row: row["flow"] == "bulk"))
    assert built.warnings == []


def test_fetch_times_pool_every_complete_run_of_a_point(make_sweep):
    out = make_sweep(failed=("maxq=100/rep2",))
    drawn, _ = figures_of(out)
    ok = lambda row: row["ok"] == "1"  # noqa: E731
    fetches = [column(out / f"maxq=20/rep{k}/series/fetch.csv", "seconds", ok) for k in (1, 2)]
    expected = {"maxq=20": np.concatenate(fetches),
                "maxq=100": column(out / "maxq=100/rep1/series/fetch.csv", "seconds", ok)}
    cdf = drawn["compare-fetch-cdf"].figure.axes[0]
    for line, (label, seconds) in zip(cdf.lines, expected.items()):
        assert line.get_label().startswith(f"{label} (median")
        np.testing.assert_array_equal(line.get_xdata()[1:], np.sort(seconds))
        assert line.get_ydata()[0] == 0 and line.get_ydata()[-1] == 1
    box = drawn["compare-fetch-box"].figure.axes[0]
    ticks = [t.get_text() for t in box.get_xticklabels()]
    assert ticks == ["maxq=20\n18 ok, 2 failed\n2 runs", "maxq=100\n9 ok, 1 failed\n1 run"]


def test_metrics_against_the_axis_are_means_with_their_confidence_intervals(make_sweep):
    out = make_sweep(axes=(("maxq", (20, 60, 100)), ("aqm", ("taildrop", "codel"))), repeat=3)
    aggregate = {p["label"]: p["metrics"] for p in json.loads((out / "aggregate.json").read_text())["points"]}
    drawn, _ = figures_of(out)
    fig = drawn["compare-delay-vs-maxq"].figure
    assert fig.get_suptitle() == "Delay against queue size, packets (maxq), one line per aqm"
    ax = fig.axes[0]
    # One line per aqm value and delay metric, each through the three maxq values.
    bars = {c.get_label(): c for c in ax.containers}  # errorbar's line, caps and bars, labelled
    assert list(bars) == ["RTT median, aqm=taildrop", "RTT median, aqm=codel", "RTT p95, aqm=taildrop",
                          "RTT p95, aqm=codel"]
    container = bars["RTT p95, aqm=codel"]
    line = container.lines[0]
    np.testing.assert_array_equal(line.get_xdata(), [20, 60, 100])
    stats = [aggregate[f"maxq={q},aqm=codel"]["rtt_ms.p95"] for q in (20, 60, 100)]
    np.testing.assert_allclose(line.get_ydata(), [s["mean"] for s in stats])
    # The error bars span the 95% CI.
    segments = container.lines[2][0].get_segments()
    np.testing.assert_allclose([(seg[0][1], seg[1][1]) for seg in segments],
                               [(s["ci95_low"], s["ci95_high"]) for s in stats])
    assert ax.get_xscale() == "linear"


def test_a_wide_numeric_axis_is_logarithmic_and_a_nic_sweep_skips_what_it_lacks(make_sweep):
    out = make_sweep(axes=(("txqueuelen", (1, 10, 100, 1000, 10000, 100000)),), kind="nic")
    drawn, built = figures_of(out)
    assert built.warnings == []
    assert set(drawn) == {"compare-rtt", "compare-rtt-box", "compare-rtt-cdf", "compare-throughput",
                          "compare-throughput-vs-txqueuelen",
                          "compare-delay-vs-txqueuelen", "compare-tradeoff"}
    assert any("compare-cwnd" in s for s in built.skipped) and any("compare-fetch-box" in s for s in built.skipped)
    ax = drawn["compare-throughput-vs-txqueuelen"].figure.axes[0]
    assert ax.get_xscale() == "log"
    assert [c.get_label() for c in ax.containers] == ["TCP receiver", "UDP receiver"]
    assert "ping.avg_ms" in drawn["compare-tradeoff"].caption


def test_a_discipline_axis_says_so_and_no_web_workload_means_no_fetch_figures(make_sweep):
    out = make_sweep(axes=(("aqm", ("taildrop", "red", "codel")),), web=False)
    drawn, built = figures_of(out)
    assert built.warnings == []
    assert "compare-fetch-box" not in drawn and "compare-fetch-vs-aqm" not in drawn
    assert drawn["compare-rtt"].figure.get_suptitle() == \
        "Round-trip time over time, one line per queue discipline (aqm)"
    assert "queue discipline (aqm) varies" in drawn["compare-rtt"].caption
    # A sweep whose spec labels no axis (or from before labels) names it.
    doc = json.loads((out / "sweep.json").read_text())
    del doc["axis_labels"]
    (out / "sweep.json").write_text(json.dumps(doc))
    drawn, _ = figures_of(out)
    assert drawn["compare-rtt"].figure.get_suptitle() == "Round-trip time over time, one line per aqm"
    ax = drawn["compare-throughput-vs-aqm"].figure.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["taildrop", "red", "codel"]


def test_without_aggregate_json_the_time_series_are_still_drawn(make_sweep):
    out = make_sweep(aggregate=False)
    result = plot_sweep(out)
    assert [p.stem for p in result.files] == EXPERIMENT_FIGURES[:8]
    assert result.warnings == ["aggregate.json is missing: no figures of the metrics against the parameters"]


def test_a_point_without_complete_runs_is_warned_about(make_sweep):
    out = make_sweep(failed=("maxq=100/rep1", "maxq=100/rep2"))
    drawn, built = figures_of(out)
    assert [line.get_label() for line in drawn["compare-rtt"].figure.axes[0].lines] == ["maxq=20"]
    assert "compare-rtt.png: not drawn for maxq=100 (no complete run)" in built.warnings


def test_pick_metrics_takes_the_first_group_that_matches():
    groups = ((("flows.*.goodput_mbps", "goodput *"),), (("tcp.receiver_mbps", "TCP"),))
    assert pick_metrics(["flows.a.goodput_mbps", "flows.b.goodput_mbps", "tcp.receiver_mbps"], groups) == \
        [("flows.a.goodput_mbps", "goodput a"), ("flows.b.goodput_mbps", "goodput b")]
    assert pick_metrics(["tcp.receiver_mbps"], groups) == [("tcp.receiver_mbps", "TCP")]
    assert pick_metrics(["flows.a.b.goodput_mbps"], groups) == []  # "*" is one name, not a path


def test_a_directory_without_sweep_json_is_an_error(tmp_path):
    with pytest.raises(BloatlabError, match="no sweep.json") as error:
        plot_sweep(tmp_path)
    assert error.value.field == "DIR"


def test_fetch_csv_without_rows_is_no_warning_but_all_failed_is(make_sweep):
    """A run without a web workload still writes series/fetch.csv, header only: nothing to draw
    and nothing to warn of. Fetches that were made and all failed are worth a warning."""
    out = make_sweep(axes=(("aqm", ("taildrop", "codel")),), web=False)
    files = sorted(out.glob("*/rep*/series"))
    for series in files:
        (series / "fetch.csv").write_text("t_s,seconds,workload,ok\n")
    drawn, built = figures_of(out)
    assert built.warnings == [] and "compare-fetch-box" not in drawn
    for series in files:
        (series / "fetch.csv").write_text("t_s,seconds,workload,ok\n1.0,,web,0\n")
    drawn, built = figures_of(out)
    assert built.warnings == ["compare-fetch: no successful web fetch in any run"]


def test_a_cc_axis_puts_each_scheme_on_the_plane_with_its_one_sigma_ellipse(make_sweep):
    from matplotlib.patches import Ellipse

    from bloatlab.analysis.sweep_plots import ellipse

    out = make_sweep(axes=(("cc", ("reno", "cubic", "bbr")), ("maxq", (20, 100))), repeat=3)
    drawn = {d.name: d for d in build_sweep_figures(load_sweep(out)).drawn}
    plane = drawn["compare-cc-plane"].figure
    assert len(plane.axes) == 2  # a panel per maxq
    ax = plane.axes[0]
    assert ax.xaxis_inverted() and {t.get_text() for t in ax.texts} == {"reno", "cubic", "bbr"}
    assert sum(isinstance(p, Ellipse) for p in ax.patches) == 3
    frame = load_sweep(out).metrics()
    reno = frame[(frame["cc"] == "reno") & (frame["maxq"] == 20)]
    means = [line.get_xydata()[0] for line in ax.lines if line.get_label().startswith("reno")]
    assert means[0] == pytest.approx([reno["rtt_ms.p95"].mean(), reno["flows.bulk.goodput_mbps"].mean()])
    # The ellipse of points along a line lies along it, one standard deviation long each way.
    width, height, angle = ellipse(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0]))
    assert angle % 180 == pytest.approx(np.degrees(np.arctan2(2, 1)))
    assert width == pytest.approx(2 * np.sqrt(1 + 4)) and height == pytest.approx(0, abs=1e-7)
    assert ellipse(np.array([1.0]), np.array([2.0])) is None
    # A sweep without a cc axis has no plane.
    assert "compare-cc-plane" not in {d.name for d in build_sweep_figures(load_sweep(make_sweep())).drawn}
