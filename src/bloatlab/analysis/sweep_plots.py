"""The comparison figures of a sweep (docs/sweeps.md), drawn from its directory alone into OUT/plots/.

This module owns how a sweep's points are compared: time series overlaid one line per point
(from its first complete repetition), web fetch times pooled over every complete repetition,
and each headline metric against the swept parameter with its 95% confidence interval from
aggregate.json. It reads sweep.json, aggregate.json and the run directories, never the engine's
objects, so it draws a finished sweep, an interrupted one and an old one alike.

A figure whose data no run has (a nic sweep has no cwnd, a spec without web workloads no
fetch.csv) is not drawn and is listed in SweepFigures.skipped; data that some points have and
others lack is drawn and warned about.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bloatlab.analysis import l4s
from bloatlab.analysis.plots import (CONNECTION, DPI, PANEL_HEIGHT_IN, PLAIN_TICKS, TIME_LABEL, WIDTH_IN, PlotResult, Warn,
                                     save_figures, series_groups, show_value)
from bloatlab.analysis.layout import legend_beside
from bloatlab.results.files import SERIES_KEYS
from bloatlab.results.reader import Point, Sweep, SweepRun, load_sweep

# A numeric axis spanning this ratio or more is drawn on a log scale (txqueuelen 1..100000).
LOG_SPAN = 100


def varies(sweep: Sweep) -> str:
    """What changes from point to point, in words: "queue discipline (aqm)", "maxq × cc"."""
    names = [n for n, _ in sweep.axes]
    if len(names) == 1:
        return sweep.axis_label(names[0])
    return " × ".join(names) if names else "point (the sweep has no axes)"


# Figures -------------------------------------------------------------------------------------

@dataclass
class Drawn:
    name: str  # file stem, "compare-rtt"
    figure: Figure
    caption: str  # what the figure shows, for the report


@dataclass
class SweepFigures:
    drawn: list[Drawn] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # data some points lack
    skipped: list[str] = field(default_factory=list)  # "compare-cwnd: no run has series/cwnd.csv"


def plot_sweep(out: Path, svg: bool = False) -> PlotResult:
    """Draw the sweep's comparison figures into OUT/plots/compare-*.png (and .svg with svg=True)."""
    figures = build_sweep_figures(load_sweep(out))
    files = save_figures({d.name: d.figure for d in figures.drawn}, Path(out) / "plots", svg)
    return PlotResult(files, figures.warnings)


def build_sweep_figures(sweep: Sweep) -> SweepFigures:
    """Every comparison figure, unsaved, with its caption; what was skipped and why."""
    result = SweepFigures()
    for overlay in _OVERLAYS:
        _overlay_figure(sweep, result, *overlay)
    _fetch_figures(sweep, result)
    _rtt_figures(sweep, result)
    _l4s_figure(sweep, result)
    if sweep.aggregate is None:
        result.warnings.append(f"{sweep.aggregate_problem}: no figures of the metrics against the parameters")
        result.skipped.append(f"metrics against the parameters: {sweep.aggregate_problem}")
        return result
    x_axis = _x_axis(sweep)
    if x_axis is None:
        result.skipped.append("metrics against the parameters: the sweep has no axes")
    else:
        for stem, what, ylabel, groups in _METRIC_FIGURES:
            _metric_figure(sweep, result, x_axis, stem, what, ylabel, groups)
    _tradeoff_figure(sweep, result)
    _cc_plane_figure(sweep, result)
    return result


def _colours(n: int) -> list[Any]:
    if n <= 10:
        return [f"C{i}" for i in range(n)]
    from matplotlib import colormaps
    return list(colormaps["viridis"](np.linspace(0, 0.9, n)))


def _new_figure(title: str, subtitle: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN), dpi=DPI)  # arranged as it is saved
    ax = fig.add_subplot()
    fig.suptitle(title)
    ax.set_title(subtitle, fontsize=8, loc="left")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _fixed(sweep: Sweep) -> str:
    fixed = sweep.meta.get("fixed")
    return " ".join(f"{k}={show_value(v)}" for k, v in fixed.items()) if isinstance(fixed, dict) and fixed else ""


def _subtitle(sweep: Sweep, *parts: str) -> str:
    fixed = _fixed(sweep)
    return textwrap.fill("; ".join([f"{sweep.name}", *parts] + ([f"fixed: {fixed}"] if fixed else [])), 120)


# Time series, one line per point ------------------------------------------------------------

# name, series, value column, what, y label, drawstyle, keep(key)
_OVERLAYS: tuple[tuple[str, str, str, str, str, str, Callable[[str], bool]], ...] = (
    ("compare-cwnd", "cwnd", "cwnd_pkts", "Congestion window", "cwnd (packets)", "default",
     lambda flow: not CONNECTION.match(flow)),  # the bulk flows; web fetches' connections are short
    ("compare-queue", "queue", "backlog_pkts", "Queue occupancy", "backlog (packets)", "steps-post", lambda link: True),
    ("compare-rtt", "ping", "rtt_ms", "Round-trip time", "RTT (ms)", "default", lambda key: True),
    ("compare-throughput", "throughput", "mbps", "Throughput", "throughput (Mbit/s)", "steps-pre", lambda flow: True),
)


def _overlay_figure(sweep: Sweep, result: SweepFigures, name: str, series: str, column: str,
                    what: str, ylabel: str, drawstyle: str, keep: Callable[[str], bool]) -> None:
    key = SERIES_KEYS.get(series)
    def warn(message: str) -> None:
        result.warnings.append(f"{name}.png: {message}")

    drawn: list[tuple[int, Point, SweepRun, dict[str, Any]]] = []
    lacking: list[str] = []
    for i, point in enumerate(sweep.points):
        complete = point.complete_runs()
        if not complete:
            lacking.append(f"{point.label} (no complete run)")
            continue
        run = sweep.run(complete[0])
        if run is None:
            lacking.append(f"{point.label} (its run.json is unreadable)")
            continue
        groups, reason = series_groups(run, series, ("t_s", column), lambda m, p=point.label: warn(f"{p}: {m}"))
        groups = {k: s for k, s in groups.items() if keep(k)}
        if reason and "no rows" not in reason:
            lacking.append(f"{point.label} ({reason})")
        if reason or not groups:  # no rows: this point's runs have no such flow (load = off)
            continue
        drawn.append((i, point, complete[0], groups))
    if not drawn:
        result.skipped.append(f"{name}: no complete run has data in series/{series}.csv")
        return
    if lacking and len(lacking) < len(sweep.points):
        warn("not drawn for " + "; ".join(lacking))
    words = varies(sweep)
    fig, ax = _new_figure(f"{what} over time, one line per {words}",
                          _subtitle(sweep, "first complete repetition of each point"), TIME_LABEL, ylabel)
    colours = _colours(len(sweep.points))
    styles = ("-", "--", ":", "-.")
    for i, point, run, groups in drawn:
        for j, (k, s) in enumerate(groups.items()):
            label = point.label + (f" {k}" if len(groups) > 1 else "") + (f" (rep{run.rep})" if run.rep != 1 else "")
            ax.plot(s["t_s"], s[column], color=colours[i], ls=styles[j % len(styles)], lw=0.9,
                    drawstyle=drawstyle, label=label)
    ax.set_ylim(bottom=0)
    legend_beside(ax, rows=14)
    result.drawn.append(Drawn(name, fig, f"{what} over time for each sweep point ({words} varies), "
                                         "from the first complete repetition of each point; one line per point"
                                         + (f" and {key}" if key else "") + "."))


# Web fetch times, pooled over every complete repetition -------------------------------------

def _fetch_times(sweep: Sweep, warn: Warn) -> tuple[list[np.ndarray], list[int], list[int], bool]:
    """Per point: the successful fetches' seconds over all its complete runs, failed fetches,
    runs that had fetch.csv; and whether any run had fetch.csv at all."""
    seconds, failed, runs, any_file = [], [], [], False
    for point in sweep.points:
        ok: list[np.ndarray] = []
        bad = with_file = 0
        for r in point.complete_runs():
            run = sweep.run(r)
            if run is None:
                continue
            groups, reason = series_groups(run, "fetch", ("t_s", "seconds", "ok"),
                                           lambda m, p=point.label, rep=r.rep: warn(f"{p} rep{rep}: {m}"))
            if reason and "is missing" in reason:
                continue
            any_file = True
            with_file += 1
            for s in groups.values():
                ok.append(s["seconds"][(s["ok"] == 1) & np.isfinite(s["seconds"])])
                bad += int((s["ok"] != 1).sum())
        seconds.append(np.concatenate(ok) if ok else np.zeros(0))
        failed.append(bad)
        runs.append(with_file)
    return seconds, failed, runs, any_file


def _fetch_figures(sweep: Sweep, result: SweepFigures) -> None:
    seconds, failed, runs, any_file = _fetch_times(sweep, lambda m: result.warnings.append(f"compare-fetch: {m}"))
    if not any_file:
        result.skipped.append("compare-fetch-box, compare-fetch-cdf: no complete run has series/fetch.csv")
        return
    if not any(len(s) for s in seconds):
        if any(failed):  # fetches were made and all failed: worth a warning; none made (no web workload) is not
            result.warnings.append("compare-fetch: no successful web fetch in any run")
        result.skipped.append("compare-fetch-box, compare-fetch-cdf: no successful web fetch")
        return
    ticks = [f"{len(s)} ok" + (f", {f} failed" if f else "") + f"\n{n} run{'s' if n != 1 else ''}"
             for s, f, n in zip(seconds, failed, runs)]
    _distribution_figures(sweep, result, "fetch", seconds, ticks, what="Web fetch duration", unit="s",
                          samples="fetches", note="successful fetches only")


def _rtt_figures(sweep: Sweep, result: SweepFigures) -> None:
    """RRUL's "box totals" and "ping CDF" across points: every latency probe's round trips,
    pooled over each point's complete repetitions."""
    rtts, runs = [], []
    for point in sweep.points:
        pooled, counted = [], 0
        for r in point.complete_runs():
            run = sweep.run(r)
            if run is None:
                continue
            groups, reason = series_groups(run, "ping", ("t_s", "rtt_ms"), lambda m: None)  # compare-rtt warns
            if reason:
                continue
            counted += 1
            pooled += [s["rtt_ms"][np.isfinite(s["rtt_ms"])] for s in groups.values()]
        rtts.append(np.concatenate(pooled) if pooled else np.zeros(0))
        runs.append(counted)
    if not any(len(r) for r in rtts):
        result.skipped.append("compare-rtt-box, compare-rtt-cdf: no complete run has round trips in series/ping.csv")
        return
    ticks = [f"{len(r)} RTTs\n{n} run{'s' if n != 1 else ''}" for r, n in zip(rtts, runs)]
    _distribution_figures(sweep, result, "rtt", rtts, ticks, what="Round-trip time", unit="ms",
                          samples="round trips", note="every latency probe (ping, irtt, responsiveness) together")


def _distribution_figures(sweep: Sweep, result: SweepFigures, stem: str, values: list[np.ndarray], ticks: list[str],
                          *, what: str, unit: str, samples: str, note: str) -> None:
    """compare-STEM-box and compare-STEM-cdf: a box and a CDF of each point's pooled values."""
    words = varies(sweep)
    colours = _colours(len(sweep.points))
    pooled = f"all {samples} of every complete repetition of each point"

    fig, ax = _new_figure(f"{what} for each {words}", _subtitle(sweep, pooled), "", f"{what.lower()} ({unit})")
    positions = np.arange(1, len(sweep.points) + 1)
    present = [i for i, v in enumerate(values) if len(v)]
    ax.boxplot([values[i] for i in present], positions=positions[present], showmeans=True, widths=0.6)
    labels = [f"{p.label}\n{t}" for p, t in zip(sweep.points, ticks)]
    ax.set_xticks(positions, labels, fontsize=8, rotation=30 if len(labels) > 5 else 0)
    ax.set_xlim(0.4, len(sweep.points) + 0.6)
    ax.set_ylim(bottom=0)
    result.drawn.append(Drawn(f"compare-{stem}-box", fig,
                              f"{what} for each sweep point ({words} varies), over {pooled} ({note}): box from "
                              "the first to the third quartile, line at the median, triangle at the mean, "
                              "whiskers to 1.5 × the interquartile range, circles beyond."))

    fig, ax = _new_figure(f"{what} CDF for each {words}", _subtitle(sweep, pooled),
                          f"{what.lower()} ({unit})", f"fraction of {samples} at most this")
    for i, (point, v) in enumerate(zip(sweep.points, values)):
        if len(v):
            ordered = np.sort(v)
            # From 0 at the smallest value, a step up at each one.
            ax.step(np.concatenate([ordered[:1], ordered]), np.arange(len(v) + 1) / len(v), where="post",
                    color=colours[i], label=f"{point.label} (median {np.median(v):.3g} {unit}, {len(v)} {samples})")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    legend_beside(ax, rows=14)
    result.drawn.append(Drawn(f"compare-{stem}-cdf", fig,
                              f"Cumulative distribution of {what.lower()} for each sweep point ({words} varies), "
                              f"over {pooled} ({note})."))


# L4S: each queue's delay and the throughput balance, per point ------------------------------

def _l4s_figure(sweep: Sweep, result: SweepFigures) -> None:
    """compare-l4s: each latency probe's queueing delay under load (median and p99, pooled over
    each point's complete repetitions) and the scalable flows' goodput over the classic ones',
    one column per point. Only for a sweep of L4S runs (analysis/l4s.py): others miss nothing."""
    points = l4s.sweep_l4s(sweep)
    if not points:
        return
    probes, flows = l4s.probes_of(points), l4s.flows_of(points)
    words = varies(sweep)
    fig = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN + 1.5), dpi=DPI)  # arranged as it is saved
    delay_ax, ratio_ax = fig.subplots(2, 1, sharex=True)
    fig.suptitle(f"Queueing delay and throughput balance for each {words}")
    delay_ax.set_title(_subtitle(sweep, "under load, every complete repetition of each point"), fontsize=8, loc="left")
    positions = {p.point.label: i for i, p in enumerate(points)}
    names = [(probe, False) for probe in probes] + [(flow, True) for flow in flows]
    width = 0.6 / max(len(names), 1)
    for j, (name, flow) in enumerate(names):
        xs, p50, p99 = [], [], []
        for p in points:
            if (found := (p.flow_delays if flow else p.delays).get(name)) is not None:
                xs.append(positions[p.point.label] + (j - (len(names) - 1) / 2) * width)
                p50.append(max(found[0], l4s.DELAY_FLOOR_MS))  # a log axis has no 0
                p99.append(max(found[1], l4s.DELAY_FLOOR_MS))
        delay_ax.vlines(xs, p50, p99, color=f"C{j}", lw=2, ls=":" if flow else "-")
        delay_ax.plot(xs, p50, "s" if flow else "o", color=f"C{j}", ms=6,
                      label=f"{name}{' (smoothed RTT)' if flow else ''}: median to p99 (bar top)")
        delay_ax.plot(xs, p99, "_", color=f"C{j}", ms=12, mew=2)
        for x, high in zip(xs, p99):  # upright above its bar's top: as narrow as the bar, clear of the next
            delay_ax.annotate(f"{high:.3g}", (x, high), textcoords="offset points", xytext=(0, 5), ha="center",
                              va="bottom", rotation=90, fontsize=7)
    delay_ax.set_yscale("log")
    low, high = delay_ax.get_ylim()
    delay_ax.set_ylim(low, high * 4)  # room for the labels of the highest
    delay_ax.yaxis.set_major_formatter(PLAIN_TICKS)
    delay_ax.set_ylabel("queueing delay (ms)\nlog scale")
    delay_ax.grid(True, alpha=0.3)
    legend_beside(delay_ax)

    measured = [p for p in points if p.ratios]
    xs = [positions[p.point.label] for p in measured]
    means = [float(np.mean(p.ratios)) for p in measured]
    below = [m - min(p.ratios) for m, p in zip(means, measured)]
    above = [max(p.ratios) - m for m, p in zip(means, measured)]
    if xs:
        ratio_ax.errorbar(xs, means, yerr=[below, above], fmt="s", color="black", ms=6, capsize=4,
                          label="scalable / classic goodput: mean, bars least to most")
        for x, m in zip(xs, means):
            ratio_ax.annotate(f"{m:.2f}", (x, m), textcoords="offset points", xytext=(8, -3), fontsize=7)
    ratio_ax.axhline(1, color="grey", lw=1, ls="--", label="equal")
    for bound in (0.5, 2):
        ratio_ax.axhline(bound, color="grey", lw=0.8, ls=":", label="0.5 and 2" if bound == 2 else "_nolegend_")
    ratio_ax.set_yscale("log", base=2)
    ratio_ax.yaxis.set_major_formatter(PLAIN_TICKS)
    finite = [r for p in points for r in p.ratios if r > 0]
    ratio_ax.set_ylim(min([*finite, 0.5]) / 1.3, max([*finite, 2]) * 1.3)
    ratio_ax.set_ylabel("goodput ratio\nscalable / classic")
    ratio_ax.grid(True, alpha=0.3)
    ratio_ax.set_xticks(range(len(points)), [f"{p.point.label}\n{p.runs} run{'s' if p.runs != 1 else ''}"
                                             for p in points], fontsize=8, rotation=30 if len(points) > 5 else 0)
    ratio_ax.set_xlim(-0.5, len(points) - 0.5)
    legend_beside(ratio_ax)
    lacking = [p.label for p in sweep.points if p.label not in positions]
    if lacking:
        result.warnings.append(f"compare-l4s.png: no complete L4S run for {', '.join(lacking)}")
    result.drawn.append(Drawn("compare-l4s", fig,
                              f"For each sweep point ({words} varies): each latency probe's queueing delay under load "
                              "(its RTT less the least it measured, from 1 s after both kinds of flow run; dots) and each "
                              "bulk flow's (its smoothed RTT less the base of the probe from its host; squares, dotted "
                              "bars), pooled over the point's complete repetitions, marker at the median, bar up to the "
                              "99th percentile (labelled), log scale (top); the scalable flows' goodput over the classic "
                              "flows' "
                              "under load, the mean over the repetitions with bars from the least to the most, "
                              "dotted at 0.5 and 2 (bottom)."))


# Metrics against the swept parameter ---------------------------------------------------------

# For each figure, groups of (metric pattern, line label); the first group that matches any
# metric of aggregate.json is drawn ("*" stands for a flow or link name). Experiment runs have
# flows.*/rtt_ms.*, nic runs tcp.*/udp.*/ping.*.
_THROUGHPUT = ((("flows.*.goodput_mbps", "goodput *"),),
               (("tcp.receiver_mbps", "TCP receiver"), ("udp.receiver_mbps", "UDP receiver")),
               (("tcp.*_mbps", "TCP *"), ("udp.*_mbps", "UDP *")))
_DELAY = ((("rtt_ms.median", "RTT median"), ("rtt_ms.p95", "RTT p95")),
          (("ping.avg_ms", "ping RTT mean"),))
# file stem (compare-STEM-vs-AXIS), what, y label, metric groups
_METRIC_FIGURES = (
    ("throughput", "Throughput", "throughput (Mbit/s)", _THROUGHPUT),
    ("delay", "Delay", "RTT (ms)", _DELAY),
    ("fetch", "Web fetch time", "mean fetch duration (s)", ((("fetch_s.mean", "mean fetch duration"),),)),
    ("queue", "Queue occupancy", "mean backlog (packets)", ((("queue.*.mean_pkts", "mean backlog *"),),)),
    ("rpm", "Responsiveness", "round trips per minute (RPM)", ((("responsiveness.rpm", "RPM"),
                                                                   ("responsiveness.foreign_rpm", "foreign RPM"),
                                                                   ("responsiveness.loaded_rpm", "loaded RPM")),)),
    ("bloat", "Latency increase under load", "mean RTT under load - idle (ms)",
     ((("bufferbloat.increase_ms", "latency increase"),),)),
)


# Figures only some experiments have data for: not listed as skipped where they have none.
ONLY_WHERE_MEASURED = {"rpm", "bloat"}


def match_metric(pattern: str, name: str) -> str | None:
    """The part "*" stands for when NAME matches PATTERN ("" without a "*"), else None."""
    head, star, tail = pattern.partition("*")
    if not star:
        return "" if name == pattern else None
    if name.startswith(head) and name.endswith(tail) and len(name) > len(head) + len(tail):
        middle = name[len(head):len(name) - len(tail)]
        return middle if "." not in middle else None
    return None


def pick_metrics(names: Iterable[str], groups: tuple[tuple[tuple[str, str], ...], ...]) -> list[tuple[str, str]]:
    """(metric, label) of the first group that matches any of NAMES."""
    names = list(names)
    for group in groups:
        found = [(name, label.replace("*", star).strip()) for pattern, label in group for name in names
                 if (star := match_metric(pattern, name)) is not None]
        if found:
            return found
    return []


def _numeric(values: list[Any]) -> bool:
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _x_axis(sweep: Sweep) -> str | None:
    """The axis the metrics are drawn against: the first numeric one, else the first."""
    axes = sweep.axes
    for name, values in axes:
        if _numeric(values):
            return name
    return axes[0][0] if axes else None


def _mean_ci(stats: dict[str, Any] | None) -> tuple[float, float, float, int]:
    """mean, the CI's distance below and above it (0 where there is none), n."""
    if not stats or not isinstance(stats.get("mean"), (int, float)):
        return math.nan, 0.0, 0.0, 0
    mean, low, high = float(stats["mean"]), stats.get("ci95_low"), stats.get("ci95_high")
    below = mean - low if isinstance(low, (int, float)) else 0.0
    above = high - mean if isinstance(high, (int, float)) else 0.0
    return mean, below, above, int(stats.get("n") or 0)


def _metric_figure(sweep: Sweep, result: SweepFigures, x_axis: str, stem: str, what: str, ylabel: str,
                   groups: tuple[tuple[tuple[str, str], ...], ...]) -> None:
    metrics = pick_metrics(sweep.metric_names(), groups)
    name = f"compare-{stem}-vs-{x_axis}"
    if not metrics:
        if stem not in ONLY_WHERE_MEASURED:  # a sweep without a responsiveness test misses nothing
            result.skipped.append(f"{name}: aggregate.json has no {what.lower()} metric")
        return
    values = dict(sweep.axes)[x_axis]
    numeric = _numeric(values)
    others = [n for n, _ in sweep.axes if n != x_axis]
    # One line per combination of the other axes' values, in the order the points come.
    lines: dict[str, list[Point]] = {}
    for point in sweep.points:
        key = ",".join(f"{n}={show_value(point.values.get(n))}" for n in others)
        lines.setdefault(key, []).append(point)
    words = sweep.axis_label(x_axis)
    fig, ax = _new_figure(f"{what} against {words}" + (f", one line per {' × '.join(others)}" if others else ""),
                          _subtitle(sweep, "mean over the complete repetitions; bars: 95% confidence interval"),
                          words, ylabel)
    colours = _colours(len(lines))
    markers = ("o", "s", "^", "D", "v")
    styles = ("-", "--", ":", "-.")
    drawn = 0
    for j, (metric, label) in enumerate(metrics):
        for i, (key, points) in enumerate(lines.items()):
            xs, ys, below, above = [], [], [], []
            for point in points:
                if point.values.get(x_axis) not in values:
                    continue
                mean, lo, hi, n = _mean_ci(sweep.metric(point, metric))
                if n == 0:
                    continue
                position = values.index(point.values[x_axis])
                # Categories side by side a little, so the error bars of two lines do not hide each other.
                xs.append(point.values[x_axis] if numeric else position + (i - (len(lines) - 1) / 2) * 0.08)
                ys.append(mean)
                below.append(lo)
                above.append(hi)
            if not xs:
                continue
            order = np.argsort(xs)
            text = label + (f", {key}" if key else "")
            ax.errorbar(np.asarray(xs, float)[order], np.asarray(ys)[order],
                        yerr=[np.asarray(below)[order], np.asarray(above)[order]], color=colours[i],
                        ls=styles[j % len(styles)] if numeric else "none", marker=markers[j % len(markers)],
                        ms=5, capsize=3, lw=1.2, label=text)
            drawn += 1
    if not drawn:
        result.skipped.append(f"{name}: no point has a value of {', '.join(m for m, _ in metrics)}")
        return
    if numeric:
        positive = [v for v in values if v > 0]
        if len(positive) == len(values) and max(values) / min(values) >= LOG_SPAN:
            ax.set_xscale("log")
        ax.set_xticks(sorted(values), [show_value(v) for v in sorted(values)], fontsize=8)
        ax.minorticks_off()
    else:
        ax.set_xticks(range(len(values)), [show_value(v) for v in values])
        ax.set_xlim(-0.5, len(values) - 0.5)
    ax.set_ylim(bottom=0)
    legend_beside(ax, rows=14)
    names = ", ".join(m for m, _ in metrics)
    result.drawn.append(Drawn(name, fig, f"{what} ({names}) against {words}"
                              + (f", one line per value of {' × '.join(others)}" if others else "")
                              + ": mean over each point's complete repetitions, error bars the 95% confidence "
                                "interval of the mean (none where a point has fewer than two runs)."))


def _tradeoff_figure(sweep: Sweep, result: SweepFigures) -> None:
    names = sweep.metric_names()
    throughput = pick_metrics(names, _THROUGHPUT)
    delay = pick_metrics(names, ((("rtt_ms.p95", "RTT p95"),), (("ping.avg_ms", "ping RTT mean"),)))
    if not throughput or not delay:
        result.skipped.append("compare-tradeoff: aggregate.json lacks a throughput or a delay metric")
        return
    delay_metric, delay_label = delay[0]
    fig, ax = _new_figure(f"Throughput against {delay_label}, one marker per configuration",
                          _subtitle(sweep, "mean over the complete repetitions; bars: 95% confidence intervals"),
                          f"{delay_label} (ms)", "throughput (Mbit/s)")
    colours = _colours(len(sweep.points))
    markers = ("o", "s", "^", "D", "v")
    drawn, top_x, top_y = 0, 0.0, 0.0
    for i, point in enumerate(sweep.points):
        x, xlo, xhi, nx = _mean_ci(sweep.metric(point, delay_metric))
        for j, (metric, label) in enumerate(throughput):
            y, ylo, yhi, ny = _mean_ci(sweep.metric(point, metric))
            if not nx or not ny:
                continue
            text = point.label + (f" {label}" if len(throughput) > 1 else "")
            ax.errorbar([x], [y], xerr=[[xlo], [xhi]], yerr=[[ylo], [yhi]], color=colours[i],
                        marker=markers[j % len(markers)], ms=6, capsize=3, ls="none", label=text)
            ax.annotate(point.label, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7)
            top_x, top_y = max(top_x, x + xhi), max(top_y, y + yhi)
            drawn += 1
    if not drawn:
        result.skipped.append("compare-tradeoff: no point has both a throughput and a delay")
        return
    # From zero, with room for the labels beside the markers.
    ax.set_xlim(0, max(top_x, 1e-9) * 1.15)
    ax.set_ylim(0, max(top_y, 1e-9) * 1.15)
    legend_beside(ax, rows=14)
    result.drawn.append(Drawn("compare-tradeoff", fig,
                              f"Throughput ({', '.join(m for m, _ in throughput)}) against {delay_label} "
                              f"({delay_metric}): one marker per sweep point, at the means over its complete "
                              "repetitions, error bars the 95% confidence intervals both ways. Up and to the "
                              "left is better."))


# The throughput-delay plane of congestion controls ---------------------------------------------

CC_AXIS = "cc"


def ellipse(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float, float] | None:
    """The one-sigma ellipse of points: (width, height, angle in degrees) about their mean, from
    their covariance's eigenvectors; None under two points."""
    if len(xs) < 2:
        return None
    values, vectors = np.linalg.eigh(np.cov(np.vstack([xs, ys])))
    values = np.clip(values, 0.0, None)
    angle = math.degrees(math.atan2(vectors[1, 1], vectors[0, 1]))  # of the larger eigenvalue's vector
    return 2 * math.sqrt(values[1]), 2 * math.sqrt(values[0]), angle


def _cc_plane_figure(sweep: Sweep, result: SweepFigures) -> None:
    """Pantheon's plane: each congestion control at its throughput against its delay's 95th
    percentile, every run a dot, the mean a marker in a one-sigma ellipse; a panel per value of
    the other axes."""
    from matplotlib.patches import Ellipse

    names = [n for n, _ in sweep.axes]
    if CC_AXIS not in names:
        return  # only a sweep of congestion controls has one
    frame = sweep.metrics()
    goodputs = [c for c in frame.columns if match_metric("flows.*.goodput_mbps", c) is not None]
    if frame.empty or not goodputs or "rtt_ms.p95" not in frame.columns:
        result.skipped.append("compare-cc-plane: no complete run has a flow's goodput and an RTT p95")
        return
    frame = frame.assign(_tput=frame[goodputs].sum(axis=1, min_count=1), _delay=frame["rtt_ms.p95"])
    others = [n for n in names if n != CC_AXIS]
    panels = list(frame.groupby(others, sort=False)) if others else [((), frame)]
    fig = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN * len(panels)), dpi=DPI)
    fig.suptitle("Congestion controls on the throughput-delay plane")
    schemes = list(dict.fromkeys(str(v) for v in frame[CC_AXIS]))
    colours = dict(zip(schemes, _colours(len(schemes))))
    for k, (key, rows) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, k + 1)
        key = key if isinstance(key, tuple) else (key,)
        where = ", ".join(f"{n}={show_value(v)}" for n, v in zip(others, key))
        ax.set_title(_subtitle(sweep, *([where] if where else []),
                               "dots: runs; marker: their mean; ellipse: one sigma"), fontsize=8, loc="left")
        for cc, runs in rows.groupby(CC_AXIS, sort=False):
            xs, ys = runs["_delay"].to_numpy(dtype=float), runs["_tput"].to_numpy(dtype=float)
            ok = np.isfinite(xs) & np.isfinite(ys)
            xs, ys = xs[ok], ys[ok]
            if not len(xs):
                continue
            colour = colours[str(cc)]
            ax.scatter(xs, ys, s=10, color=colour, alpha=0.5)
            ax.plot([xs.mean()], [ys.mean()], "o", color=colour, ms=7, label=f"{cc} (n={len(xs)})")
            ax.annotate(str(cc), (xs.mean(), ys.mean()), textcoords="offset points", xytext=(6, 6), fontsize=8)
            shape = ellipse(xs, ys)
            if shape is not None:
                width, height, angle = shape
                ax.add_patch(Ellipse((xs.mean(), ys.mean()), width, height, angle=angle, fill=False, color=colour,
                                     lw=1.2))
        ax.set_xlabel("RTT p95 under load (ms), lower to the right")
        ax.set_ylabel("goodput (Mbit/s)")
        ax.grid(True, alpha=0.3)
        ax.autoscale_view()
        ax.invert_xaxis()
        legend_beside(ax)
    result.drawn.append(Drawn("compare-cc-plane", fig,
                              "Each congestion control's goodput against its RTT's 95th percentile (ping, under load), "
                              "as Pantheon draws schemes: every complete run a dot, their mean a marker, and the "
                              "one-sigma ellipse of the runs (their covariance) around it. The delay axis runs "
                              "backwards: better is up and to the right."
                              + (f" One panel per value of {' × '.join(others)}." if others else "")))
