"""An L4S run's figures and tables (analysis/l4s.py, plots.py, sweep_plots.py, report.py), drawn
from synthetic run and sweep directories laid out as docs/results.md and docs/sweeps.md say: a
classic and a scalable flow, a ping in each queue, dualpi2's p' in queue.csv. The figures are
checked for their data (every reply a point, each percentile where numpy puts it), not only for
existing."""

import json
import re

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from bloatlab.analysis import l4s
from bloatlab.analysis.aggregate import write_aggregate
from bloatlab.analysis.layout import arrange
from bloatlab.analysis.plots import build_figures, figures_of, plot_run
from bloatlab.analysis.report import write_report
from bloatlab.analysis.sweep_plots import build_sweep_figures, plot_sweep
from bloatlab.results.reader import load_run, load_sweep

DURATION_S = 20
START_S = 2  # the flows', after the pings' idle start
LOAD_FROM_S = START_S + l4s.SETTLE_S
L4S_FIGURES = ["l4s_delay", "l4s_delay_cdf", "l4s_throughput", "l4s_marking"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Per discipline: the classic probe's and the scalable probe's queueing delay scale, and the
# scalable flow's goodput (the classic one's is 25 Mbit/s).
SCALE = {"dualpi2": (1.0, 1.0, 22.0), "taildrop": (12.0, 150.0, 12.0)}


def queue(discipline):
    q = {"discipline": discipline, "packets": 1000, "bytes": None}
    if discipline == "dualpi2":
        q.update(packets=10000, target_ns=15_000_000, step_thresh_ns=1_000_000, step_packets=None,
                 coupling_factor=2, ecn_mask="l4s_ect")
    return q


def direction(name, discipline, delay_ns=0):
    return {"direction": name, "rate_bps": 50_000_000, "trace_path": None, "delay_ns": delay_ns, "jitter_ns": 0,
            "loss": 0.0, "seed": 7, "queue": queue(discipline)}


def rows_of(aqm="dualpi2", prob=True):
    """The series' rows (as written) of a run through `aqm`."""
    classic_scale, scalable_scale, scalable_mbps = SCALE[aqm]
    ping = []
    for k in range(1, DURATION_S * 20):
        t = k * 0.05
        loaded = t >= START_S
        # Classic: 11-19 ms of queue; scalable: 0-1.8 ms (dualpi2's); idle: within 0.1 ms of the base.
        c = (15 + (k % 9 - 4)) * classic_scale if loaded else 0.1 * (k % 2)
        s = 0.2 * (k % 10) * scalable_scale if loaded else 0.1 * (k % 2)
        ping += [(f"{t:.3f}", "ping_classic", f"{20 + c:.3f}"), (f"{t:.3f}", "ping_scalable", f"{20 + s:.3f}")]
    throughput = []
    for k in range(1, (DURATION_S - START_S) * 10 + 1):
        t = START_S + k * 0.1
        throughput += [(f"{t:.1f}", "classic", f"{25 + (k % 5) * 0.5:.3f}"),
                       (f"{t:.1f}", "scalable", f"{scalable_mbps + (k % 3):.3f}")]
    # Each flow's smoothed RTT every 10 ms from its start: 20 ms of path and 10-18 ms (classic) or
    # 0.5-1.4 ms (scalable) of queue, times the discipline's scale.
    cwnd = [(f"{START_S + k * 0.01:.3f}", flow, "40", "", f"{20 + extra * scale:.3f}")
            for k in range(1, (DURATION_S - START_S) * 100 + 1)
            for flow, extra, scale in (("classic", 10 + k % 9, classic_scale), ("scalable", 0.5 + 0.1 * (k % 10),
                                                                                 scalable_scale))]
    queue_rows = [(f"{k * 0.016:.6f}", "s0->r", str(k % 40), str(k % 40 * 1514), str(k // 100),
                   *([f"{(k % 7) * 0.02:.4f}"] if prob else [])) for k in range(1, int(DURATION_S / 0.016))]
    return {"ping.csv": ("t_s,probe,rtt_ms", ping), "throughput.csv": ("t_s,flow,mbps", throughput),
            "cwnd.csv": ("t_s,flow,cwnd_pkts,ssthresh_pkts,srtt_ms", cwnd),
            "queue.csv": ("t_s,link,backlog_pkts,backlog_bytes,drops" + (",prob" if prob else ""), queue_rows)}


def write_l4s_run(run, aqm="dualpi2", prob=True, classic_cc="cubic"):
    (run / "series").mkdir(parents=True)
    for name, (header, rows) in rows_of(aqm, prob).items():
        (run / "series" / name).write_text(header + "\n" + "".join(",".join(r) + "\n" for r in rows))
    links = [{"name": "c-s0", "ends": ["c", "s0"], "backend": "userspace",
              "forward": direction("c->s0", "droptail", 20_000_000), "reverse": direction("s0->c", "droptail")},
             {"name": "l-s0", "ends": ["l", "s0"], "backend": "userspace",
              "forward": direction("l->s0", "droptail", 20_000_000), "reverse": direction("s0->l", "droptail")},
             {"name": "s0-r", "ends": ["s0", "r"], "backend": "userspace",
              "forward": direction("s0->r", aqm), "reverse": direction("r->s0", aqm)}]
    bulk = {"kind": "bulk", "start_ns": START_S * 10**9, "stop_ns": DURATION_S * 10**9, "dst": "r", "dscp": 0}
    ping = {"kind": "ping", "start_ns": 0, "stop_ns": DURATION_S * 10**9, "dst": "r", "dscp": 0,
            "interval_ns": 50_000_000}
    workloads = [{**bulk, "name": "classic", "src": "c", "cc": classic_cc},
                 {**bulk, "name": "scalable", "src": "l", "cc": "dctcp", "ecn": "ect1"},
                 {**ping, "name": "ping_classic", "src": "c", "ecn": "not-ect"},
                 {**ping, "name": "ping_scalable", "src": "l", "ecn": "ect1"}]
    meta = {"bloatlab_version": "0.2.0", "name": "l4s", "preset": "l4s", "source": "preset l4s",
            "params": {"aqm": aqm, "rate": "50mbit", "duration": f"{DURATION_S}s"}, "complete": True,
            "started_at": "2026-11-21T10:00:00+00:00", "ended_at": "2026-11-21T10:00:21+00:00",
            "spec": {"duration_s": DURATION_S, "seed": 1, "workloads": workloads,
                     "topology": {"links": [{k: v for k, v in link.items() if k != "backend"} for link in links]}},
            "links": links,
            "flows": {"classic": {"kind": "bulk", "src": "c", "dst": "r", "cc": classic_cc, "dscp": "BE"},
                      "scalable": {"kind": "bulk", "src": "l", "dst": "r", "cc": "dctcp", "dscp": "BE",
                                   "ecn": "ect1"}},
            "probes": {"tcp": "tracepoint", "queue": {"s0->r": "datapath"}}}
    goodput = {name: float(np.mean([float(m) for _, f, m in rows_of(aqm)["throughput.csv"][1] if f == name]))
               for name in ("classic", "scalable")}
    summary = {"complete": True, "duration_s": DURATION_S,
               "flows": {name: {"kind": "bulk", "goodput_mbps": g, "retransmits": 0} for name, g in goodput.items()},
               "queue": {"s0->r": {"mean_pkts": 20.0, "max_pkts": 39, "mean_bytes": 30280.0, "max_bytes": 59046,
                                   "drops": 12, "drops_by_reason": {"dualpi2_classic": 12},
                                   "marks": {"dualpi2_coupled": 300, "dualpi2_step": 200}}}}
    (run / "run.json").write_text(json.dumps(meta))
    (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.fixture
def run_dir(tmp_path):
    return write_l4s_run(tmp_path / "run")


def delays_of(aqm, probe):
    """The probe's (t_s, queueing delay) as written: RTT less its least."""
    rows = [(float(t), float(rtt)) for t, p, rtt in rows_of(aqm)["ping.csv"][1] if p == probe]
    t, rtt = np.array(rows).T
    return t, rtt - rtt.min()


def srtt_of(aqm, flow):
    rows = [(float(t), float(srtt)) for t, f, _, _, srtt in rows_of(aqm)["cwnd.csv"][1] if f == flow]
    return tuple(np.array(rows).T)


def loaded(t, values):
    return values[(t >= LOAD_FROM_S) & (t <= DURATION_S)]


def labels(ax):
    return {line.get_label(): line for line in ax.lines}


def test_an_l4s_run_gets_its_figures_after_every_runs(run_dir, tmp_path):
    run = load_run(run_dir)
    assert figures_of(run)[-4:] == L4S_FIGURES
    roles = l4s.l4s_of(run)
    assert roles.scalable == ("scalable",) and roles.classic == ("classic",)
    assert roles.load_s == (LOAD_FROM_S, DURATION_S) and roles.ecn == {"ping_classic": "Not-ECT", "ping_scalable": "ECT(1)"}
    result = plot_run(run_dir)
    assert [p.stem for p in result.files][-4:] == L4S_FIGURES and result.warnings == []
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in result.files)
    # No scalable flow beside a classic one: none of them (and no marking figure without dualpi2).
    for cc, aqm in (("dctcp", "dualpi2"), ("cubic", "taildrop")):
        other = write_l4s_run(tmp_path / f"{cc}-{aqm}", aqm, classic_cc=cc)
        names = figures_of(load_run(other))
        assert ("l4s_delay" in names) == (cc == "cubic") and "l4s_marking" not in names, (cc, names)


def test_queueing_delay_is_each_probes_rtt_less_its_least_a_panel_each(run_dir):
    figures, warnings = build_figures(run_dir)
    assert warnings == []
    classic_ax, scalable_ax = figures["l4s_delay"].axes
    for ax, probe, ecn, bound in ((classic_ax, "ping_classic", "Not-ECT, C queue", "target 15 ms"),
                                  (scalable_ax, "ping_scalable", "ECT(1), L queue", "step threshold 1 ms")):
        t, delay = delays_of("dualpi2", probe)
        lines = labels(ax)
        (data,) = [line for label, line in lines.items() if label.startswith(f"{probe} ({ecn}), base 20.0 ms")]
        np.testing.assert_array_equal(data.get_xdata(), t)
        np.testing.assert_allclose(data.get_ydata(), delay, atol=1e-9)
        p50, p99 = np.percentile(loaded(t, delay), [50, 99])
        assert list(lines[f"p50 under load {p50:.2f} ms"].get_ydata()) == pytest.approx([p50, p50])
        assert list(lines[f"p99 under load {p99:.2f} ms"].get_ydata()) == pytest.approx([p99, p99])
        assert bound in lines  # what dualpi2 holds this probe's queue to
        assert ax.get_ylabel() == f"{probe}\nqueueing delay (ms)"
    # The scalable probe's queue: 0-1.8 ms under load, so its p99 is 1.8 and its median 0.9.
    assert "p99 under load 1.80 ms" in labels(scalable_ax) and "p50 under load 0.90 ms" in labels(scalable_ax)
    # Each flow beside the probe from its host: its smoothed RTT less that probe's base (20 ms).
    for ax, flow in ((classic_ax, "classic"), (scalable_ax, "scalable")):
        t, srtt = srtt_of("dualpi2", flow)
        p50, p99 = np.percentile(loaded(t, srtt - 20), [50, 99])
        line = labels(ax)[f"{flow}'s smoothed RTT less its probe: p50 {p50:.2f}, p99 {p99:.2f} ms"]
        np.testing.assert_array_equal(line.get_xdata(), t)
        np.testing.assert_allclose(line.get_ydata(), srtt - 20, atol=1e-9)


def test_the_cdf_holds_every_reply_under_load_on_a_log_axis(run_dir):
    figures, _ = build_figures(run_dir)
    (ax,) = figures["l4s_delay_cdf"].axes
    assert ax.get_xscale() == "log"
    samples = [(*delays_of("dualpi2", probe), "replies", "-") for probe in ("ping_classic", "ping_scalable")]
    samples += [(t, srtt - 20, "samples", "--") for t, srtt in (srtt_of("dualpi2", f) for f in ("classic", "scalable"))]
    assert len(ax.lines) == 4 + 2  # and the p50 and p99 guides
    for line, (t, delay, what, style) in zip(ax.lines, samples):
        under = np.sort(loaded(t, delay))
        p50, p99 = np.percentile(under, [50, 99])
        assert line.get_label().endswith(f"p50 {p50:.2f}, p99 {p99:.2f} ms ({under.size} {what})")
        assert line.get_linestyle() == style
        np.testing.assert_allclose(line.get_xdata(), np.maximum(under, l4s.DELAY_FLOOR_MS), atol=1e-9)
        np.testing.assert_allclose(line.get_ydata(), np.arange(1, under.size + 1) / under.size)


def test_the_throughput_balance_bins_each_flow_and_divides(run_dir):
    figures, _ = build_figures(run_dir)
    flows_ax, ratio_ax = figures["l4s_throughput"].axes
    rows = rows_of("dualpi2")["throughput.csv"][1]
    per_second = {}
    for name in ("classic", "scalable"):
        mine = [(float(t), float(m)) for t, f, m in rows if f == name]
        bins = [np.mean([m for t, m in mine if s < t <= s + 1 + 1e-9]) for s in range(START_S, DURATION_S)]
        per_second[name] = np.array(bins)
        (line,) = [line for label, line in labels(flows_ax).items() if label.startswith(f"{name} (")]
        np.testing.assert_allclose(line.get_ydata()[START_S:], per_second[name])
        assert np.isnan(line.get_ydata()[:START_S]).all()  # before the flows start: no interval, no value
    (ratio,) = [line for label, line in labels(ratio_ax).items() if label.startswith("per second")]
    np.testing.assert_allclose(ratio.get_ydata()[START_S:], per_second["scalable"] / per_second["classic"])
    # Under load: the bins from 3 s on (slow start left out); the whole run: summary.json's goodputs.
    under = np.mean(per_second["scalable"][1:]) / np.mean(per_second["classic"][1:])
    whole = np.mean([float(m) for _, f, m in rows if f == "scalable"]) / np.mean([float(m) for _, f, m in rows
                                                                                if f == "classic"])
    assert ratio.get_label() == f"per second; under load {under:.2f}; whole run {whole:.2f}"
    run = load_run(run_dir)
    assert l4s.goodput_ratio(run, l4s.l4s_of(run)) == pytest.approx(under)
    assert ratio_ax.get_yscale() == "log" and "0.5 and 2" in labels(ratio_ax)
    assert "scalable (dctcp, scalable): goodput" in " ".join(labels(flows_ax))


def test_the_marking_figure_draws_p_and_its_coupled_and_classic_probabilities(run_dir, tmp_path):
    figures, _ = build_figures(run_dir)
    (ax,) = figures["l4s_marking"].axes
    lines = labels(ax)
    header, rows = rows_of("dualpi2")["queue.csv"]
    prob = np.array([float(r[-1]) for r in rows])
    np.testing.assert_allclose(lines["p' (base)"].get_ydata(), prob)
    np.testing.assert_allclose(lines["k p' (L queue's coupled marks, k = 2)"].get_ydata(), 2 * prob)
    np.testing.assert_allclose(lines["p'^2 (classic drops and marks)"].get_ydata(), prob ** 2)
    # Without p' over time: said in the picture and as a warning, with what summary.json has instead.
    bare = write_l4s_run(tmp_path / "bare", prob=False)
    figures, warnings = build_figures(bare)
    assert warnings == ["l4s_marking.png: p' over time is not recorded (series/queue.csv has no prob column)"]
    notes = [t.get_text() for t in figures["l4s_marking"].axes[0].texts]
    assert notes[0].startswith("no data: p' over time") and "CE marks: 300 coupled, 200 step, 0 classic" in notes[1]
    assert "drops: 12 classic, 0 overload" in notes[1]


def test_the_figures_fit_their_page_legends_beside(run_dir, tmp_path):
    figures, _ = build_figures(run_dir)  # arranged as they are handed back
    sweep = build_sweep_figures(load_sweep(write_l4s_sweep(tmp_path / "sweep")))
    (compare,) = [d.figure for d in sweep.drawn if d.name == "compare-l4s"]
    arrange(compare)
    for name, fig in [*((n, figures[n]) for n in L4S_FIGURES), ("compare-l4s", compare)]:
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        page, whole = fig.bbox, fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)
        assert page.x0 - 1 <= whole.x0 and whole.x1 <= page.x1 + 1 and page.y0 - 1 <= whole.y0 <= whole.y1 <= page.y1 + 1, name
        for ax in fig.axes:
            legend = ax.get_legend()
            assert legend is None or legend.get_window_extent(renderer).x0 >= ax.bbox.x1, name
            assert ax.bbox.width > 0.4 * page.width, name


def test_a_run_report_has_the_l4s_table_and_figures(run_dir):
    page = write_report(run_dir).read_text()
    table = page.split("<h3>L4S</h3>")[1].split("<h2>")[0]
    t, delay = delays_of("dualpi2", "ping_scalable")
    p50, p99 = np.percentile(loaded(t, delay), [50, 99])
    assert re.search(rf"<td>ping_scalable</td><td>ECT\(1\)</td><td class=\"num\">20.0</td><td class=\"num\">"
                     rf"{p50:.3f}</td><td class=\"num\">{p99:.2f}</td>", table)
    for name in L4S_FIGURES:
        assert f'alt="{name}"' not in page  # each has its caption, not its bare name
    assert re.search(r"<td>classic \(smoothed RTT\)</td><td>classic</td><td class=\"num\">20.0</td>", table)
    # Every run's that it has the series of (no fetch.csv here), then the four of an L4S run.
    assert page.count("<figure>") == 6 + 4 and "Not drawn: fetch (no series/fetch.csv)" in page


def split_classic(run, n=2):
    """The run with its classic flow's load carried by n flows, classic-1 .. classic-n, each with
    1/n of its goodput and its smoothed RTT, named as the l4s preset's classic_flows = n names them."""
    names = [f"classic-{i}" for i in range(1, n + 1)]
    for csv, share in (("throughput.csv", 1 / n), ("cwnd.csv", None)):
        header, *rows = (run / "series" / csv).read_text().splitlines()
        out = []
        for row in rows:
            t, flow, value, *rest = row.split(",")
            if flow != "classic":
                out.append(row)
                continue
            out += [",".join([t, name, f"{float(value) * share:.6f}" if share else value, *rest]) for name in names]
        (run / "series" / csv).write_text("\n".join([header, *out]) + "\n")
    meta, summary = (json.loads((run / f).read_text()) for f in ("run.json", "summary.json"))
    classic, *others = meta["spec"]["workloads"]
    meta["spec"]["workloads"] = [{**classic, "name": name, "group": "classic"} for name in names] + others
    meta["flows"] = {**{name: {**meta["flows"]["classic"], "ecn": "not-ect"} for name in names},
                     "scalable": {**meta["flows"]["scalable"],
                                  "ecn": "ect1 (set where it enters the datapath, on l->s0; the kernel sends ect0)"}}
    goodput = summary["flows"].pop("classic")
    summary["flows"] = {**{name: {**goodput, "goodput_mbps": goodput["goodput_mbps"] / n} for name in names},
                        **summary["flows"]}
    (run / "run.json").write_text(json.dumps(meta))
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_several_flows_of_a_kind_add_up_and_keep_their_own_lines_and_rows(run_dir, tmp_path):
    one = load_run(run_dir)
    split = split_classic(write_l4s_run(tmp_path / "split"))
    run = load_run(split)
    roles = l4s.l4s_of(run)
    assert roles.classic == ("classic-1", "classic-2") and roles.scalable == ("scalable",)
    # The ratio is all the scalable flows' goodput over all the classic ones': as with one flow.
    assert l4s.goodput_ratio(run, roles) == pytest.approx(l4s.goodput_ratio(one, l4s.l4s_of(one)))
    assert l4s.whole_run_ratio(run, roles) == pytest.approx(l4s.whole_run_ratio(one, l4s.l4s_of(one)))
    figures, warnings = build_figures(split)
    assert warnings == []
    flows_ax, ratio_ax = figures["l4s_throughput"].axes
    half = [line for label, line in labels(flows_ax).items() if label.startswith("classic-")]
    (whole,) = [line for label, line in labels(build_figures(run_dir)[0]["l4s_throughput"].axes[0]).items()
                if label.startswith("classic (")]
    assert len(half) == 2 and all(np.allclose(h.get_ydata(), whole.get_ydata() / 2, equal_nan=True) for h in half)
    (ratio,) = [line for label, line in labels(ratio_ax).items() if label.startswith("per second")]
    (ratio_one,) = [line for label, line in labels(build_figures(run_dir)[0]["l4s_throughput"].axes[1]).items()
                    if label.startswith("per second")]
    np.testing.assert_allclose(ratio.get_ydata(), ratio_one.get_ydata())
    # Each flow's own delay, in the panel of the probe from its host.
    classic_ax, _ = figures["l4s_delay"].axes
    assert sum(label.startswith(("classic-1's", "classic-2's")) for label in labels(classic_ax)) == 2
    page = write_report(split).read_text()
    table = page.split("<h3>L4S</h3>")[1].split("<h2>")[0]
    assert "<th>classic flows</th><td>classic-1, classic-2</td>" in table
    assert "<td>classic-1 (smoothed RTT)</td><td>classic</td>" in table and "<td>classic-2 (smoothed RTT)" in table
    # The flows table's ECN column: how each flow got its codepoint.
    assert ("<th>DSCP</th><th>ECN</th></tr>" in page and "<td>classic-2</td><td>bulk</td><td>c</td><td>r</td>"
            "<td>cubic</td><td>BE</td><td>not-ect</td>" in page)
    assert "<td>ect1 (set where it enters the datapath, on l-&gt;s0; the kernel sends ect0)</td>" in page


def write_l4s_sweep(out, disciplines=("dualpi2", "taildrop"), repeat=2):
    points = []
    for aqm in disciplines:
        runs = []
        for rep in range(1, repeat + 1):
            write_l4s_run(out / f"aqm={aqm}" / f"rep{rep}", aqm)
            runs.append({"rep": rep, "dir": f"aqm={aqm}/rep{rep}", "status": "complete", "reason": None,
                         "elapsed_s": 21.0})
        points.append({"label": f"aqm={aqm}", "values": {"aqm": aqm}, "runs": runs})
    sweep = {"format": "bloatlab-sweep/1", "kind": "experiment", "name": "l4s", "source": "preset l4s",
             "axes": [{"name": "aqm", "values": list(disciplines)}], "repeat": repeat, "fixed": {},
             "created": "2026-11-21T10:00:00+00:00", "updated": "2026-11-21T10:05:00+00:00", "status": "complete",
             "axis_labels": {"aqm": "queue discipline"}, "points": points}
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(sweep))
    write_aggregate(sweep, out)
    return out


def test_a_sweep_sets_each_disciplines_delays_and_ratio_side_by_side(tmp_path, make_sweep):
    out = write_l4s_sweep(tmp_path / "sweep")
    built = build_sweep_figures(load_sweep(out))
    (drawn,) = [d for d in built.drawn if d.name == "compare-l4s"]
    delay_ax, ratio_ax = drawn.figure.axes
    expected = {}
    for i, aqm in enumerate(("dualpi2", "taildrop")):
        for probe in ("ping_classic", "ping_scalable"):
            t, delay = delays_of(aqm, probe)
            # Two repetitions of the same rows: pooling them leaves the percentiles where they are.
            expected[aqm, probe] = np.percentile(np.concatenate([loaded(t, delay)] * 2), [50, 99])
    for j, probe in enumerate(("ping_classic", "ping_scalable")):
        (median,) = [line for line in delay_ax.lines if line.get_label().startswith(f"{probe}: median")]
        np.testing.assert_allclose(median.get_ydata(), [max(expected[a, probe][0], l4s.DELAY_FLOOR_MS)
                                                        for a in ("dualpi2", "taildrop")])
    assert delay_ax.get_yscale() == "log"
    (ratios,) = [c for c in ratio_ax.containers]  # the error bar of the goodput ratio
    run = load_run(out / "aqm=taildrop/rep1")
    np.testing.assert_allclose(np.asarray(ratios.lines[0].get_ydata(), dtype=float),
                               [l4s.goodput_ratio(load_run(out / f"aqm={a}/rep1"), l4s.l4s_of(run))
                                for a in ("dualpi2", "taildrop")])
    assert [t.get_text() for t in ratio_ax.get_xticklabels()] == ["aqm=dualpi2\n2 runs", "aqm=taildrop\n2 runs"]
    assert built.warnings == []
    assert "compare-l4s.png" in {p.name for p in plot_sweep(out).files}
    # The report's table: one row per discipline, both probes' p50 and p99 and the ratio.
    page = write_report(out).read_text()
    table = page.split("<h3>L4S: each queue's delay and the throughput balance</h3>")[1].split("</table>")[0]
    for aqm in ("dualpi2", "taildrop"):
        row = table.split(f"<td>aqm={aqm}</td>")[1].split("</tr>")[0]
        cells = re.findall(r'<td class="num">([^<]*)</td>', row)
        assert cells[0] == "2"  # n
        for k, probe in enumerate(("ping_classic", "ping_scalable")):
            p50, p99 = expected[aqm, probe]
            assert [float(c) for c in cells[1 + 2 * k:3 + 2 * k]] == pytest.approx([p50, p99], rel=0.01, abs=0.01)
        for k, flow in enumerate(("classic", "scalable")):  # srtt less the probe's base, 20 ms
            t, srtt = srtt_of(aqm, flow)
            p50, p99 = np.percentile(loaded(t, srtt - 20), [50, 99])
            assert [float(c) for c in cells[5 + 2 * k:7 + 2 * k]] == pytest.approx([p50, p99], rel=0.01, abs=0.01)
        ratio = l4s.goodput_ratio(load_run(out / f"aqm={aqm}/rep1"), l4s.l4s_of(run))
        assert cells[9] == f"{ratio:.2f} ± 0.00"  # the same rows in both repetitions
    assert 'alt="For each sweep point (queue discipline (aqm) varies): each latency probe&#x27;s queueing delay' in page
    # A sweep of other runs has no such figure or table, and misses nothing.
    other = build_sweep_figures(load_sweep(make_sweep()))
    assert "compare-l4s" not in {d.name for d in other.drawn} and not any("l4s" in s for s in other.skipped)
    assert "<h3>L4S" not in write_report(make_sweep("other")).read_text()
