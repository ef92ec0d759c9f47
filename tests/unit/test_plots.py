"""Figures drawn from a synthetic run directory laid out as docs/results.md says.

The figures are checked for their data (every CSV row is a plotted point, with its value), not
only for existing: "plots silently come out empty" is the failure these tests exist for.
"""

import json
import math
import struct

import matplotlib.image
import numpy as np
import pytest

from bloatlab.analysis.plots import PlotResult, build_figures, plot_run
from bloatlab.errors import BloatlabError

FIGURES = ("cwnd", "queue", "rtt", "rtt_cdf", "rtt_box", "throughput", "fetch")
SERIES = {"cwnd.csv": "cwnd", "queue.csv": "queue", "ping.csv": "rtt", "throughput.csv": "throughput",
          "fetch.csv": "fetch"}
PARAMS = {"maxq": 100, "bw_net": "10mbit", "cc": "reno"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DURATION_S = 20
C0 = np.array([0x1F, 0x77, 0xB4]) / 255  # matplotlib's first cycle colour


def direction(name, queue):
    return {"direction": name, "rate_bps": 10_000_000, "trace_path": None, "delay_ns": 10_000_000,
            "jitter_ns": 0, "loss": 0.0, "seed": 7, "queue": {"discipline": "droptail", **queue}}


def run_json(**overrides):
    return {
        "bloatlab_version": "0.1.0", "name": "bloat-reno", "preset": "bloat",
        "params": PARAMS,
        "spec": {"topology": {"seed": 1, "hosts": [{"name": "h1", "address": "10.0.0.1"},
                                                   {"name": "h2", "address": "10.0.0.2"}],
                              "switches": [{"name": "s0"}],
                              "links": [{"name": "s0-h2", "ends": ["s0", "h2"], "backend": "userspace",
                                         "forward": direction("s0->h2", {"packets": 100, "bytes": None}),
                                         # limited in bytes: no packet limit line for this one
                                         "reverse": direction("h2->s0", {"packets": None, "bytes": 150_000})}]},
                 "workloads": [{"kind": "ping", "name": "ping", "from": "h1", "to": "h2"}], "probes": [],
                 "duration_s": DURATION_S, "seed": 1},
        "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T00:00:21Z", "t0_realtime_s": 1.7e9,
        "complete": True,
        "flows": {"bulk1": {"kind": "bulk", "src": "h1", "dst": "h2", "cc": "reno"},
                  "bulk2": {"kind": "bulk", "src": "h1", "dst": "h2", "cc": "reno"},
                  "web": {"kind": "web", "src": "h2", "dst": "h1", "cc": "reno"}},
        "probes": {"tcp": "tracepoint", "queue": {"s0->h2": "datapath", "h2->s0": "datapath"}},
        **overrides,
    }


def series_rows():
    """The CSV rows (as the strings written) of every series file, per docs/results.md."""
    rng = np.random.default_rng(5)
    cwnd = []
    for flow, n in (("bulk1", 300), ("bulk2", 250)):
        for k, t in enumerate(np.sort(rng.uniform(0, DURATION_S, n))):
            # bulk1's ssthresh is unset (empty) until its first loss; bulk2's never is set
            ssthresh = "" if flow == "bulk2" or k < 50 else f"{40 + k % 7}"
            cwnd.append([f"{t:.6f}", flow, f"{10 + k % 90}", ssthresh, f"{20 + k % 30:.3f}"])
    for fetch in range(1, 5):
        for k in range(30):
            cwnd.append([f"{fetch * 4 + k * 0.01:.6f}", f"web#{fetch}", f"{10 + k}", "", "25.000"])
    cwnd.sort(key=lambda row: float(row[0]))
    queue = []
    for link, n in (("s0->h2", 400), ("h2->s0", 380)):
        queue += [[f"{(k + 1) * DURATION_S / n:.6f}", link, f"{k % 101}", f"{(k % 101) * 1514}", f"{k // 100}"]
                  for k in range(n)]
    queue.sort(key=lambda row: float(row[0]))
    ping = [[f"{0.1 * (k + 1):.3f}", "ping", f"{20 + (k % 50) * 1.5:.3f}"] for k in range(199)]
    throughput = [[f"{0.1 * (k + 1):.1f}", flow, f"{mbps + (k % 10) * 0.1:.3f}"]
                  for k in range(200) for flow, mbps in (("bulk1", 4.0), ("bulk2", 5.0))]
    # fetch 6 failed after curl's 2 s; fetch 13 failed with no time at all
    fetch = [[f"{k:.3f}", "" if k == 13 else f"{0.2 + k * 0.05:.3f}", "web", "0" if k in (6, 13) else "1"]
             for k in range(20)]
    return {"cwnd.csv": (["t_s", "flow", "cwnd_pkts", "ssthresh_pkts", "srtt_ms"], cwnd),
            "queue.csv": (["t_s", "link", "backlog_pkts", "backlog_bytes", "drops"], queue),
            "ping.csv": (["t_s", "probe", "rtt_ms"], ping),
            "throughput.csv": (["t_s", "flow", "mbps"], throughput),
            "fetch.csv": (["t_s", "seconds", "workload", "ok"], fetch)}


def write_csv(path, header, rows):
    path.write_text("".join(",".join(cells) + "\n" for cells in [header, *rows]))


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    (run / "series").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps(run_json()))
    (run / "summary.json").write_text(json.dumps({
        "flows": {"bulk1": {"kind": "bulk", "goodput_mbps": 4.4, "retransmits": 12},
                  "bulk2": {"kind": "bulk", "goodput_mbps": 5.4, "retransmits": 9}},
        "rtt_ms": {"count": 199, "min": 20, "mean": 56, "median": 56, "p95": 90, "p99": 93, "max": 93.5, "lost": 3},
    }))
    for file, (header, rows) in series_rows().items():
        write_csv(run / "series" / file, header, rows)
    return run


def column(file, name, where=lambda row: True):
    header, rows = series_rows()[file]
    i = header.index(name)
    return np.array([float(row[i]) if row[i] else math.nan for row in rows if where(row)])


def lines_by_label(ax):
    return {line.get_label(): line for line in ax.lines}


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_every_figure_is_a_png_of_the_expected_size(run_dir):
    result = plot_run(run_dir)
    assert isinstance(result, PlotResult)
    assert result.warnings == []
    assert result.files == [run_dir / "plots" / f"{name}.png" for name in FIGURES]
    for path in result.files:
        data = path.read_bytes()
        assert data[:8] == PNG_MAGIC, path
        width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
        assert (width, height) == ((960, 720) if path.stem == "cwnd" else (960, 540)), path
        # Data, not only axes and a "no data" note: the first series' colour is on the canvas.
        pixels = matplotlib.image.imread(path)[:, :, :3]
        assert (np.abs(pixels - C0).max(axis=2) < 0.1).sum() > 200, path


def test_svg_too_and_the_same_bytes_every_time(run_dir):
    first = plot_run(run_dir, svg=True)
    assert sorted(p.name for p in first.files) == sorted(f"{n}.{ext}" for n in FIGURES for ext in ("png", "svg"))
    drawn = {p: p.read_bytes() for p in first.files}
    for path, data in drawn.items():
        if path.suffix == ".svg":
            assert data.startswith(b"<?xml") and b"<svg" in data and b"<dc:date>" not in data, path
    second = plot_run(run_dir, svg=True)
    assert {p: p.read_bytes() for p in second.files} == drawn


def test_cwnd_plots_every_row_of_every_flow(run_dir):
    figures, warnings = build_figures(run_dir)
    assert warnings == []
    bulk_ax, web_ax = figures["cwnd"].axes
    bulk = lines_by_label(bulk_ax)
    assert set(bulk) == {"bulk1", "bulk1 ssthresh", "bulk2"}  # bulk2 never had an ssthresh
    for flow in ("bulk1", "bulk2"):
        mine = lambda row, flow=flow: row[1] == flow  # noqa: E731
        np.testing.assert_array_equal(bulk[flow].get_xdata(), column("cwnd.csv", "t_s", mine))
        np.testing.assert_array_equal(bulk[flow].get_ydata(), column("cwnd.csv", "cwnd_pkts", mine))
    ssthresh = bulk["bulk1 ssthresh"]
    assert ssthresh.get_linestyle() == "--"
    expected = column("cwnd.csv", "ssthresh_pkts", lambda row: row[1] == "bulk1")
    np.testing.assert_array_equal(ssthresh.get_ydata(), expected)  # NaN (a gap) where unset
    assert np.isnan(expected[:50]).all() and np.isfinite(expected[50:]).all()
    # One line per fetch connection, one legend entry for the workload.
    assert len(web_ax.lines) == 4
    for fetch, line in enumerate(web_ax.lines, start=1):
        expected = column("cwnd.csv", "cwnd_pkts", lambda row, fetch=fetch: row[1] == f"web#{fetch}")
        np.testing.assert_array_equal(line.get_ydata(), expected)
    assert web_ax.get_legend_handles_labels()[1] == ["web (4 connections)"]
    assert texts(figures["cwnd"]) == []
    assert bulk_ax.get_ylabel() == "bulk flows\ncwnd (packets)" and web_ax.get_xlabel() == "time since t0 (s)"


def test_queue_is_a_step_per_direction_with_its_packet_limit(run_dir):
    figures, _ = build_figures(run_dir)
    (ax,) = figures["queue"].axes
    lines = lines_by_label(ax)
    assert set(lines) == {"s0->h2 (3 drops)", "h2->s0 (3 drops)", "s0->h2 limit (100 packets)"}
    for link in ("s0->h2", "h2->s0"):
        line = lines[f"{link} (3 drops)"]
        assert line.get_drawstyle() == "steps-post"
        mine = lambda row, link=link: row[1] == link  # noqa: E731
        np.testing.assert_array_equal(line.get_xdata(), column("queue.csv", "t_s", mine))
        np.testing.assert_array_equal(line.get_ydata(), column("queue.csv", "backlog_pkts", mine))
    limit = lines["s0->h2 limit (100 packets)"]
    assert limit.get_linestyle() == ":" and list(limit.get_ydata()) == [100, 100]
    assert limit.get_color() == lines["s0->h2 (3 drops)"].get_color()
    assert ax.get_ylim()[1] > 100  # the limit line is inside the picture
    assert ax.get_ylabel() == "backlog (packets)"


def test_rtt_throughput_and_fetch_hold_every_row(run_dir):
    figures, _ = build_figures(run_dir)
    (rtt,) = figures["rtt"].axes[0].lines
    np.testing.assert_array_equal(rtt.get_ydata(), column("ping.csv", "rtt_ms"))
    assert rtt.get_label() == "ping: 199 replies, 3 lost"
    assert figures["rtt"].axes[0].get_ylabel() == "RTT (ms)"

    throughput = lines_by_label(figures["throughput"].axes[0])
    assert set(throughput) == {"bulk1 (goodput 4.40 Mbit/s)", "bulk2 (goodput 5.40 Mbit/s)"}
    line = throughput["bulk2 (goodput 5.40 Mbit/s)"]
    assert line.get_drawstyle() == "steps-pre"  # t_s ends the interval the rate was measured over
    np.testing.assert_array_equal(line.get_ydata(), column("throughput.csv", "mbps", lambda r: r[1] == "bulk2"))
    assert figures["throughput"].axes[0].get_ylabel() == "throughput (Mbit/s)"

    fetch = lines_by_label(figures["fetch"].axes[0])
    assert set(fetch) == {"web (18 ok)", "failed (2)"}
    np.testing.assert_array_equal(fetch["web (18 ok)"].get_xdata(), column("fetch.csv", "t_s", lambda r: r[3] == "1"))
    failed = fetch["failed (2)"]
    assert failed.get_marker() == "x" and failed.get_marker() != fetch["web (18 ok)"].get_marker()
    np.testing.assert_array_equal(failed.get_xdata(), [6.0, 13.0])
    np.testing.assert_array_equal(failed.get_ydata(), [0.5, 0.0])  # no time: drawn on the time axis
    assert figures["fetch"].axes[0].get_ylabel() == "fetch duration (s)"


def test_every_title_names_the_params_and_whether_the_run_is_incomplete(run_dir):
    figures, _ = build_figures(run_dir)
    for fig in figures.values():
        assert "(incomplete)" not in fig.get_suptitle() and "bloat-reno" in fig.get_suptitle()
        assert fig.axes[0].get_title(loc="left") == "maxq=100 bw_net=10mbit cc=reno"
    (run_dir / "run.json").write_text(json.dumps(run_json(complete=False, incomplete_reason="interrupted (Ctrl-C)")))
    figures, _ = build_figures(run_dir)
    for fig in figures.values():
        assert fig.get_suptitle().endswith("(incomplete)")
        assert fig.axes[0].get_title(loc="left") == "maxq=100 bw_net=10mbit cc=reno\nincomplete: interrupted (Ctrl-C)"


def test_a_run_without_pings_has_no_rtt_to_miss(run_dir):
    meta = run_json()
    meta["spec"]["workloads"] = [{"kind": "bulk", "name": "bulk1", "from": "h1", "to": "h2"}]
    (run_dir / "run.json").write_text(json.dumps(meta))
    write_csv(run_dir / "series" / "ping.csv", ["t_s", "rtt_ms"], [])
    figures, warnings = build_figures(run_dir)
    assert not [w for w in warnings if w.startswith("rtt.png")]
    assert texts(figures["rtt"]) == ["no data: no latency probe (ping, irtt or responsiveness)"]


def test_an_empty_ping_series_is_drawn_as_no_data_and_warned(run_dir):
    write_csv(run_dir / "series" / "ping.csv", ["t_s", "rtt_ms"], [])
    result = plot_run(run_dir)
    assert result.warnings == ["rtt.png: series/ping.csv has no rows"]
    assert (run_dir / "plots" / "rtt.png").read_bytes()[:8] == PNG_MAGIC
    figures, _ = build_figures(run_dir)
    assert list(figures["rtt"].axes[0].lines) == []
    assert texts(figures["rtt"]) == ["no data: series/ping.csv has no rows"]


@pytest.mark.parametrize("file", SERIES)
def test_a_missing_series_file_is_drawn_as_no_data_and_warned(run_dir, file):
    (run_dir / "series" / file).unlink()
    result = plot_run(run_dir)
    figure = SERIES[file]
    assert result.warnings == [f"{figure}.png: series/{file} is missing"]
    assert len(result.files) == len(FIGURES) and all(p.read_bytes()[:8] == PNG_MAGIC for p in result.files)
    figures, _ = build_figures(run_dir)
    for name, fig in figures.items():
        notes = texts(fig)
        if name == figure or file == "ping.csv" and name in ("rtt_cdf", "rtt_box"):  # every panel says so
            assert notes == [f"no data: series/{file} is missing"] * len(fig.axes)
        else:
            assert notes == [], name


def test_a_flow_or_link_that_run_json_promises_but_the_series_lacks_is_warned(run_dir):
    meta = run_json()
    meta["flows"]["bulk3"] = {"kind": "bulk", "src": "h1", "dst": "h2", "cc": "cubic"}
    meta["probes"]["queue"]["h1->s0"] = "tc"
    (run_dir / "run.json").write_text(json.dumps(meta))
    figures, warnings = build_figures(run_dir)
    assert warnings == ["cwnd.png: no rows for bulk flow bulk3 in series/cwnd.csv",
                        "queue.png: no rows for link direction h1->s0 in series/queue.csv",
                        "throughput.png: no rows for flow bulk3 in series/throughput.csv"]
    assert texts(figures["queue"]) == ["no data: no rows for link direction h1->s0 in series/queue.csv"]
    assert len(figures["queue"].axes[0].lines) == 3  # the directions that do have rows are still drawn


def test_a_run_without_web_fetches_says_so_in_the_web_panel_without_a_warning(run_dir):
    meta = run_json()
    del meta["flows"]["web"]
    (run_dir / "run.json").write_text(json.dumps(meta))
    header, rows = series_rows()["cwnd.csv"]
    write_csv(run_dir / "series" / "cwnd.csv", header, [row for row in rows if "#" not in row[1]])
    figures, warnings = build_figures(run_dir)
    assert [w for w in warnings if w.startswith("cwnd.png")] == []
    bulk_ax, web_ax = figures["cwnd"].axes
    assert len(bulk_ax.lines) == 3 and len(web_ax.lines) == 0
    assert [t.get_text() for t in web_ax.texts] == ["no data: no web fetch connections in series/cwnd.csv"]


def test_rows_that_are_not_numbers_are_skipped_with_a_warning(run_dir):
    path = run_dir / "series" / "ping.csv"
    path.write_text(path.read_text().replace("t_s,rtt_ms", "t_s, rtt_ms") + "20.0,timeout\n21.0\n")
    figures, warnings = build_figures(run_dir)
    assert warnings == ["rtt.png: series/ping.csv: skipped 2 of 201 rows whose cells are not numbers"]
    np.testing.assert_array_equal(figures["rtt"].axes[0].lines[0].get_ydata(), column("ping.csv", "rtt_ms"))


def test_a_series_without_its_columns_is_no_data(run_dir):
    (run_dir / "series" / "throughput.csv").write_text("t_s,flow,goodput\n0.1,bulk1,4.0\n")
    _, warnings = build_figures(run_dir)
    assert warnings == ["throughput.png: series/throughput.csv has no column mbps"]


@pytest.mark.parametrize("make", [lambda d: d.mkdir(), lambda d: None], ids=["empty directory", "no directory"])
def test_a_directory_without_run_json_is_an_error(tmp_path, make):
    run_dir = tmp_path / "not-a-run"
    make(run_dir)
    with pytest.raises(BloatlabError) as error:
        plot_run(run_dir)
    assert error.value.field == "DIR"
    assert error.value.message == f"{run_dir} is not a bloatlab run directory (no run.json)"
    assert not (run_dir / "plots").exists()


def test_several_probes_each_get_a_line_a_cdf_and_a_box(run_dir):
    rows = [[f"{0.1 * k:.3f}", probe, f"{base + k % 10:.3f}"] for k in range(1, 101) for probe, base in
            (("icmp", 20.0), ("udp_ef", 30.0))]
    write_csv(run_dir / "series" / "ping.csv", ["t_s", "probe", "rtt_ms"], rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["pings"] = {"icmp": {"lost": 1}, "udp_ef": {"lost": 0}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    figures, warnings = build_figures(run_dir)
    assert warnings == []
    assert set(lines_by_label(figures["rtt"].axes[0])) == {"icmp: 100 replies, 1 lost", "udp_ef: 100 replies, 0 lost"}
    cdf = lines_by_label(figures["rtt_cdf"].axes[0])
    assert set(cdf) == {"icmp (median 24.5 ms)", "udp_ef (median 34.5 ms)"}
    line = cdf["udp_ef (median 34.5 ms)"]
    np.testing.assert_array_equal(line.get_xdata(), np.sort([30.0 + k % 10 for k in range(1, 101)]))
    assert line.get_ydata()[-1] == 1.0 and line.get_ydata()[0] == 0.01
    box = figures["rtt_box"].axes[0]
    assert [t.get_text() for t in box.get_xticklabels()] == ["icmp", "udp_ef"]


def test_a_ping_series_of_0_2_0_without_probes_still_draws(run_dir):
    write_csv(run_dir / "series" / "ping.csv", ["t_s", "rtt_ms"], [["0.1", "20.5"], ["0.2", "21.5"]])
    figures, warnings = build_figures(run_dir)
    assert warnings == []
    (line,) = figures["rtt"].axes[0].lines
    np.testing.assert_array_equal(line.get_ydata(), [20.5, 21.5])


def _plot_recording_children(run_dir, monkeypatch, cores):
    """plot_run with `cores` usable; the pids it forked."""
    import os

    forked = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(cores)))
    monkeypatch.setattr(os, "fork", fork)
    result = plot_run(run_dir)
    return result, forked, {p: p.read_bytes() for p in result.files}


def test_a_spare_core_draws_figures_the_same_and_is_reaped(run_dir, monkeypatch):
    """With two cores a forked child draws figures too: the same files, bytes and warnings, in
    the same order, as drawing all of them here; the child is reaped."""
    import os

    (run_dir / "series" / "fetch.csv").unlink()  # a warning from the child's half
    alone, none, alone_bytes = _plot_recording_children(run_dir, monkeypatch, cores=1)
    assert none == [] and alone.warnings == ["fetch.png: series/fetch.csv is missing"]
    shared, forked, shared_bytes = _plot_recording_children(run_dir, monkeypatch, cores=2)
    assert len(forked) == 1
    assert (shared.files, shared.warnings, shared.drawn) == (alone.files, alone.warnings, alone.drawn)
    assert shared_bytes == alone_bytes
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0], os.WNOHANG)


def test_a_child_that_fails_leaves_its_figures_to_the_parent(run_dir, monkeypatch):
    import os

    from bloatlab.analysis import plots

    parent, real = os.getpid(), plots._draw_and_save

    def draw(run, names, svg):
        if os.getpid() != parent:
            raise RuntimeError("the child breaks")
        return real(run, names, svg)

    monkeypatch.setattr(plots, "_draw_and_save", draw)
    result, forked, drawn = _plot_recording_children(run_dir, monkeypatch, cores=2)
    assert len(forked) == 1 and result.warnings == []
    assert [p.stem for p in result.files] == list(FIGURES) and all(d[:8] == PNG_MAGIC for d in drawn.values())


def test_the_two_draw_from_one_queue_each_figure_once(run_dir, monkeypatch, tmp_path):
    """Parent and child take the next figure as each finishes one: every figure is drawn exactly
    once, and a parent slowed down (0.2 s a figure) leaves the child a share."""
    import os
    import time

    from bloatlab.analysis import plots

    parent, real, log = os.getpid(), plots._draw_and_save, tmp_path / "drawn.txt"

    def draw(run, names, svg):
        out = {}
        for name in names:
            if os.getpid() == parent:
                time.sleep(0.2)
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {name}\n")
            out.update(real(run, [name], svg))
        return out

    monkeypatch.setattr(plots, "_draw_and_save", draw)
    result, forked, _ = _plot_recording_children(run_dir, monkeypatch, cores=2)
    drawn = [line.split() for line in log.read_text().splitlines()]
    assert sorted(name for _, name in drawn) == sorted(FIGURES)
    assert {int(pid) for pid, _ in drawn} == {parent, forked[0]}
    assert [p.stem for p in result.files] == list(FIGURES)


def test_warming_from_a_new_thread_each_run_keeps_no_more_fonts_open(monkeypatch):
    """A sweep warms the plotting from a new thread each run, and matplotlib caches its fonts per
    thread: each run kept two more font files open and ~5 MB (bench soak found it)."""
    import os
    import threading

    from bloatlab.analysis import plots

    def open_fonts() -> int:
        names = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                names.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                continue
        return sum(1 for n in names if n.endswith((".ttf", ".otf")))

    monkeypatch.setattr(plots, "_warmed", False)
    before = open_fonts()
    for _ in range(4):
        thread = threading.Thread(target=plots.warm)
        thread.start()
        thread.join()
    assert open_fonts() - before <= 2
