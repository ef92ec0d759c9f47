"""The figures of a run, drawn from its results directory alone (docs/results.md) into RUN/plots/.

This module owns how a run looks: which series go into which figure, with what units and title,
and that missing data is never silent: a figure whose series file is missing or has no rows
(or lacks a flow or link that run.json promises) says "no data: <reason>" in the picture and in
PlotResult.warnings. It reads the run through bloatlab.results.reader. It uses matplotlib's Figure directly, not pyplot: no global figure registry,
no display, nothing to close.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import textwrap
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from bloatlab.analysis import l4s
from bloatlab.analysis.layout import arrange, legend_beside
from bloatlab.results.files import SERIES_KEYS
from bloatlab.experiment.record import IrttSummary
from bloatlab.results.reader import Run, dig, load_run
from bloatlab.results.summary import RunSummary

WIDTH_IN = 8.0
PANEL_HEIGHT_IN = 4.5
DPI = 120
# How every PNG is written: no software stamp (the same run gives the same bytes), and zlib's
# fastest level, which writes a run's seven figures in 0.19 s less CPU than the default (6) for
# files 18% larger (413 -> 487 KB for cs244's).
PNG_OPTIONS: dict[str, Any] = {"metadata": {"Software": None}, "pil_kwargs": {"compress_level": 1}}
TIME_LABEL = "time since t0 (s)"
# A web fetch's TCP connection is flow "WORKLOAD#N" in cwnd.csv, N its fetch number from 1.
CONNECTION = re.compile(r"^(?P<workload>.+)#\d+$")

Warn = Callable[[str], None]
Series = dict[str, np.ndarray]  # column name -> values, NaN where the cell is empty


@dataclass
class PlotResult:
    files: list[Path] = field(default_factory=list)  # every file written, in order
    warnings: list[str] = field(default_factory=list)  # "rtt.png: series/ping.csv has no rows"
    # The figures saved as plots/NAME.png, by stem in order: a report made right after embeds
    # those files without drawing again.
    drawn: list[str] = field(default_factory=list)


def caption(run: Run) -> str:
    """The run's parameters (and why it is incomplete), for the top of every figure."""
    lines = [textwrap.fill(" ".join(f"{k}={show_value(v)}" for k, v in run.params.items()), 110)]
    if not run.complete and run.incomplete_reason:
        lines.append(f"incomplete: {run.incomplete_reason}")
    return "\n".join(lines)


def plot_run(run_dir: Path, svg: bool = False) -> PlotResult:
    """Draw every figure of the run into RUN/plots/ (PNG, and SVG too with svg=True).

    With a spare core, a forked child draws beside this process: each takes the next figure
    from a shared pipe of figure numbers, so neither waits while the other has work (a figure
    takes 0.1-0.4 s: layout, text, PNG, and a run's seven are most of what it does after its
    experiment ends). Not beside other threads (a sweep's side-by-side runs), whose locks a
    fork could copy held."""
    run = load_run(run_dir)
    names = figures_of(run)  # the costliest first (two panels), so the two end close together
    shared = len(os.sched_getaffinity(0)) > 1 and threading.active_count() == 1
    jobs = _Jobs(len(names)) if shared else None
    child = _Elsewhere(run.path, names, svg, jobs) if jobs else None
    mine: dict[str, tuple[list[Path], list[str]]] = {}
    got: dict[str, tuple[list[Path], list[str]]] = {}
    try:
        mine = _draw_and_save(run, (names[i] for i in jobs) if jobs else names, svg)  # one taken at a time
        got = child.result() if child else {}
    finally:
        if child:
            child.end()
        if jobs:
            jobs.close()
    done = {**got, **mine}
    done.update(_draw_and_save(run, [n for n in names if n not in done], svg))  # the child failed midway
    result = PlotResult(drawn=names)
    for name in names:
        files, warnings = done[name]
        result.files += files
        result.warnings += warnings
    return result


def _draw_and_save(run: Run, names: Iterable[str], svg: bool) -> dict[str, tuple[list[Path], list[str]]]:
    """Each named figure drawn and saved: its files and its warnings."""
    out = {}
    for name in names:
        warnings: list[str] = []
        fig = DRAW[name](run, lambda message, name=name: warnings.append(f"{name}.png: {message}"))
        out[name] = (save_figures({name: fig}, run.path / "plots", svg), warnings)
    return out


class _Jobs:
    """Figure numbers in a pipe, one byte each: iterating takes the next one not yet taken by
    this process or a forked one (a pipe's one-byte read is atomic), until none is left."""

    def __init__(self, count: int):
        self.read, write = os.pipe()
        os.write(write, bytes(range(count)))  # at most a few dozen figures: far below a pipe's buffer
        os.close(write)

    def __iter__(self) -> Iterator[int]:
        while taken := os.read(self.read, 1):
            yield taken[0]

    def close(self) -> None:
        os.close(self.read)


class _Elsewhere:
    """Figures drawn and saved by a forked child, which takes them from `jobs` and hands back
    their files and warnings as JSON through a pipe. A child that fails hands back nothing, and
    what it took is drawn here."""

    def __init__(self, run_dir: Path, names: list[str], svg: bool, jobs: _Jobs):
        read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: its own exit, never the parent's cleanup
            status = 1
            try:
                os.close(read)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                run = load_run(run_dir)
                done = {}
                for i in jobs:  # one at a time: each is handed back only once all are drawn
                    done.update(_draw_and_save(run, [names[i]], svg))
                with os.fdopen(write, "w") as pipe:
                    json.dump({n: ([str(f) for f in files], w) for n, (files, w) in done.items()}, pipe)
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        self.pipe = os.fdopen(read)

    def result(self) -> dict[str, tuple[list[Path], list[str]]]:
        text = self.pipe.read()
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        try:
            doc = json.loads(text) if status == 0 else {}
        except ValueError:
            doc = {}
        return {n: ([Path(f) for f in files], warnings) for n, (files, warnings) in doc.items()}

    def end(self) -> None:
        self.pipe.close()
        if self.pid:  # interrupted before its result: ended and reaped
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0


def save_figures(figures: dict[str, Figure], out: Path, svg: bool) -> list[Path]:
    """Each figure as OUT/NAME.png (and .svg), its axes arranged first; the files written, in order."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, fig in figures.items():
        arrange(fig)
        files.append(out / f"{name}.png")
        fig.savefig(files[-1], **PNG_OPTIONS)
        if svg:
            files.append(out / f"{name}.svg")
            # A fixed id salt and no date: the same run gives the same bytes.
            with matplotlib.rc_context({"svg.hashsalt": "bloatlab"}):
                fig.savefig(files[-1], metadata={"Date": None})
    return files


def build_figures(run_dir: Path | Run) -> tuple[dict[str, Figure], list[str]]:
    """Every figure of the run, unsaved but arranged, keyed by file stem ("cwnd"), and the warnings
    about missing data."""
    run = run_dir if isinstance(run_dir, Run) else load_run(run_dir)
    warnings: list[str] = []
    figures = {}
    for name in figures_of(run):
        figures[name] = DRAW[name](run, lambda message, name=name: warnings.append(f"{name}.png: {message}"))
        arrange(figures[name])
    return figures, warnings


def figures_of(run: Run) -> list[str]:
    """The figures a run gets, by file stem in the order they are shown: every run's, then an
    L4S run's (a scalable flow beside a classic one), its marking figure where a probed queue is
    dualpi2."""
    names = list(FIGURES)
    if l4s.l4s_of(run) is not None:
        names += [n for n in L4S_FIGURES if n != "l4s_marking" or l4s.dualpi2_directions(run)]
    return names


def _cwnd_figure(run: Run, warn: Warn) -> Figure:
    fig, (bulk_ax, web_ax) = _figure(run, "Congestion window", panels=2)
    flows, reason = series_groups(run, "cwnd", ("t_s", "cwnd_pkts", "ssthresh_pkts"), warn)
    bulk = {name: s for name, s in flows.items() if not CONNECTION.match(name)}
    for i, (name, s) in enumerate(bulk.items()):
        bulk_ax.plot(s["t_s"], s["cwnd_pkts"], color=f"C{i}", lw=1, label=name)
        if np.isfinite(s["ssthresh_pkts"]).any():  # empty cells (unset ssthresh) leave gaps
            bulk_ax.plot(s["t_s"], s["ssthresh_pkts"], color=f"C{i}", lw=1, ls="--", label=f"{name} ssthresh")
    workloads: dict[str, list[Series]] = {}  # one colour and one legend entry per workload, not per fetch
    for name, s in flows.items():
        if match := CONNECTION.match(name):
            workloads.setdefault(match["workload"], []).append(s)
    for i, (workload, connections) in enumerate(workloads.items()):
        for j, s in enumerate(connections):
            label = f"{workload} ({len(connections)} connections)" if j == 0 else "_nolegend_"
            web_ax.plot(s["t_s"], s["cwnd_pkts"], color=f"C{i}", lw=0.8, label=label)
    # Nothing to miss when no flow was traced: none of its kinds, or the spec turned the probe off.
    traced = run.flows("bulk", "web") and dig(run.meta, "probes", "tcp") != "none"
    if reason:
        if traced:
            warn(reason)
    else:
        _expect(bulk_ax, warn, run.flows("bulk"), bulk, "bulk flow", "cwnd.csv")
        _expect(web_ax, warn, run.flows("web"), workloads, "web workload", "cwnd.csv")
    _finish(bulk_ax, run, "bulk flows\ncwnd (packets)", empty=reason or "no bulk flows in series/cwnd.csv")
    _finish(web_ax, run, "web fetches\ncwnd (packets)", empty=reason or "no web fetch connections in series/cwnd.csv")
    return fig


def _queue_figure(run: Run, warn: Warn) -> Figure:
    fig, (ax,) = _figure(run, "Queue backlog")
    links, reason = series_groups(run, "queue", ("t_s", "backlog_pkts", "drops"), warn)
    for i, (link, s) in enumerate(links.items()):
        drops = s["drops"][np.isfinite(s["drops"])]  # cumulative: the last one is the run's total
        label = f"{link} ({int(drops[-1])} drops)" if drops.size else link
        # A backlog sample holds until the next one.
        ax.step(s["t_s"], s["backlog_pkts"], where="post", color=f"C{i}", lw=1, label=label)
    if reason:
        warn(reason)
    else:
        _expect(ax, warn, run.probed_queues(), links, "link direction", "queue.csv")
    limits = run.queue_limits_pkts()
    for i, link in enumerate(links):
        if link in limits:
            ax.axhline(limits[link], color=f"C{i}", lw=1, ls=":", label=f"{link} limit ({limits[link]} packets)")
    _finish(ax, run, "backlog (packets)", empty=reason)
    return fig


LATENCY_PROBES = ("ping", "irtt", "responsiveness")  # the workloads that write series/ping.csv


def _rtt_figure(run: Run, warn: Warn) -> Figure:
    fig, (ax,) = _figure(run, "Round-trip time")
    probes, reason = _latency(run, warn)
    summary = run.summary if isinstance(run.summary, RunSummary) else None
    for i, (name, s) in enumerate(probes.items()):
        # Lost requests have no row: only summary.json counts them.
        rtt = ((summary.pings or {}).get(name) if len(probes) > 1 else summary.rtt_ms) if summary is not None else None
        lost = rtt.lost if rtt is not None else None
        label = f"{name}: " * bool(name) + f"{len(s['t_s'])} replies" + (f", {lost} lost" if isinstance(lost, int) else "")
        ax.plot(s["t_s"], s["rtt_ms"], ".-", ms=2, lw=0.5, color=f"C{i}", label=label)
    _finish(ax, run, "RTT (ms)", empty=reason)
    return fig


def _latency(run: Run, warn: Warn) -> tuple[dict[str, Series], str | None]:
    """Each latency probe's samples, or why there are none (a warning only if some were due)."""
    probes, reason = series_groups(run, "ping", ("t_s", "rtt_ms"), warn)
    if reason and not any(run.has_workload(kind) for kind in LATENCY_PROBES):
        reason = "no latency probe (ping, irtt or responsiveness)"  # nothing was missed
    elif reason:
        warn(reason)
    return probes, reason


def _rtt_cdf_figure(run: Run, warn: Warn) -> Figure:
    """RRUL's "ping CDF": the share of round trips at or below each RTT, per probe."""
    fig, (ax,) = _figure(run, "Round-trip time distribution", xlabel="RTT (ms)")
    probes, reason = _latency(run, lambda _: None)  # the time plot has said it
    for i, (name, s) in enumerate(probes.items()):
        rtts = np.sort(s["rtt_ms"][np.isfinite(s["rtt_ms"])])
        if rtts.size:
            median = float(np.median(rtts))
            ax.step(rtts, np.arange(1, rtts.size + 1) / rtts.size, where="post", color=f"C{i}", lw=1.2,
                    label=f"{name or 'ping'} (median {median:.1f} ms)")
    if not ax.lines:
        _note(ax, f"no data: {reason or 'no round trips'}")
    ax.set_ylabel("fraction of round trips")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    legend_beside(ax)
    return fig


def _rtt_box_figure(run: Run, warn: Warn) -> Figure:
    """RRUL's "box totals" for latency: a box per probe (quartiles, whiskers at p5 and p95)."""
    fig, (ax,) = _figure(run, "Round-trip time per probe", xlabel="probe")
    probes, reason = _latency(run, lambda _: None)
    data = {name or "ping": s["rtt_ms"][np.isfinite(s["rtt_ms"])] for name, s in probes.items()}
    data = {name: values for name, values in data.items() if values.size}
    if data:
        boxes = ax.boxplot(list(data.values()), whis=(5, 95), showfliers=False, patch_artist=True,
                           medianprops={"color": "black"})
        for i, box in enumerate(boxes["boxes"]):  # each probe in its colour, as in the other figures
            box.set_facecolor(f"C{i}")
        ax.set_xticks(range(1, len(data) + 1), list(data), rotation=20)
    else:
        _note(ax, f"no data: {reason or 'no round trips'}")
    ax.set_ylabel("RTT (ms), whiskers p5-p95")
    ax.set_ylim(bottom=0)
    return fig


def _throughput_figure(run: Run, warn: Warn) -> Figure:
    fig, (ax,) = _figure(run, "Throughput")
    flows, reason = series_groups(run, "throughput", ("t_s", "mbps"), warn)
    for i, (name, s) in enumerate(flows.items()):
        flow = (run.summary.flows or {}).get(name) if isinstance(run.summary, RunSummary) else None
        goodput = flow.goodput_mbps if flow is not None and not isinstance(flow, IrttSummary) else None
        label = f"{name} (goodput {goodput:.2f} Mbit/s)" if isinstance(goodput, (int, float)) else name
        # t_s ends a 100 ms interval: the rate holds over the interval before it.
        ax.step(s["t_s"], s["mbps"], where="pre", color=f"C{i}", lw=1, label=label)
    if reason:
        if run.flows("bulk", "udp"):  # a run of pings and fetches has no throughput to miss
            warn(reason)
    else:
        _expect(ax, warn, run.flows("bulk", "udp"), flows, "flow", "throughput.csv")
    _finish(ax, run, "throughput (Mbit/s)", empty=reason)
    return fig


def _fetch_figure(run: Run, warn: Warn) -> Figure:
    fig, (ax,) = _figure(run, "Web fetch duration", xlabel="fetch start, " + TIME_LABEL)
    workloads, reason = series_groups(run, "fetch", ("t_s", "seconds", "ok"), warn)
    failed_t, failed_s = [], []
    for i, (workload, s) in enumerate(workloads.items()):
        ok = s["ok"] == 1
        ax.plot(s["t_s"][ok], s["seconds"][ok], "o", ms=3, color=f"C{i}", label=f"{workload} ({ok.sum()} ok)")
        failed_t.append(s["t_s"][~ok])
        # A failed fetch without curl's time still shows, on the time axis.
        failed_s.append(np.nan_to_num(s["seconds"][~ok], nan=0.0))
    failed = sum(len(t) for t in failed_t)
    if failed:
        ax.plot(np.concatenate(failed_t), np.concatenate(failed_s), "x", ms=7, mew=1.5, color="red",
                clip_on=False, label=f"failed ({failed})")
    if reason:
        if run.flows("web"):  # a run without web workloads has no fetches to miss
            warn(reason)
    else:
        _expect(ax, warn, run.flows("web"), workloads, "web workload", "fetch.csv")
    _finish(ax, run, "fetch duration (s)", empty=reason)
    return fig


# An L4S run's figures (analysis/l4s.py) -----------------------------------------------------

MAX_DELAY_PANELS = 4  # probes, one panel each; more share one
PLAIN_TICKS = FuncFormatter(lambda value, _: f"{value:g}")  # a log axis's ticks as 0.5 and 10, not 2^-1 and 10^1


def _probe_label(name: str, roles: l4s.L4sRun, queues: dict[str, l4s.DualPi2Queue]) -> str:
    """"ping_l (ECT(1), L queue)": the probe, its codepoint, and its dualpi2 queue."""
    ecn = roles.ecn.get(name) or ""
    queue = next(iter(queues.values()), None)
    where = f"{queue.queue_of(ecn or 'Not-ECT')} queue" if queue is not None else ""
    return name + (f" ({', '.join(x for x in (ecn, where) if x)})" if ecn or where else "")


def _l4s_delay_figure(run: Run, warn: Warn) -> Figure:
    """Each probe's queueing delay over the run, a panel each (its RTT less its least), with the
    bulk flows from the same host (their smoothed RTT less that base)."""
    roles = l4s.l4s_of(run)
    assert roles is not None  # figures_of draws it only for an L4S run
    delays, reason = l4s.queueing_delays(run, roles)
    if reason and any(run.has_workload(kind) for kind in l4s.LATENCY_KINDS):
        warn(reason)
    flows, _ = l4s.flow_delays(run, roles, delays)  # without a TCP probe, none: the cwnd figure says so
    panels = len(delays) if 1 <= len(delays) <= MAX_DELAY_PANELS else 1
    fig, axes = _figure(run, "Queueing delay per probe, and of the flows beside it", panels=panels)
    queues = l4s.dualpi2_directions(run)
    queue = next(iter(queues.values()), None)
    panel_of = {name: i if panels > 1 else 0 for i, name in enumerate(delays)}
    for i, (name, d) in enumerate(delays.items()):
        ax = axes[panel_of[name]]
        label = f"{_probe_label(name, roles, queues)}, base {d.base_ms:.1f} ms"
        ax.plot(d.t_s, d.delay_ms, ".-", ms=2, lw=0.5, color=f"C{i}", label=label, zorder=3)
        if d.p50_ms is not None and d.p99_ms is not None:
            ax.axhline(d.p50_ms, color=f"C{i}", lw=1, ls="--", label=f"p50 under load {d.p50_ms:.2f} ms", zorder=3)
            ax.axhline(d.p99_ms, color=f"C{i}", lw=1, ls=":", label=f"p99 under load {d.p99_ms:.2f} ms", zorder=3)
        if queue is not None and panels > 1:  # what dualpi2 holds this probe's queue to
            if queue.queue_of(roles.ecn.get(name) or "Not-ECT") == "L":
                if queue.step_ms is not None:
                    ax.axhline(queue.step_ms, color="grey", lw=1, ls="-.", label=f"step threshold {queue.step_ms:g} ms")
            else:
                ax.axhline(queue.target_ms, color="grey", lw=1, ls="-.", label=f"target {queue.target_ms:g} ms")
    for k, (name, d) in enumerate(flows.items()):
        # In the panel of the probe from its host, which shares its base RTT; else the last.
        probe = next((p for p in delays if roles.senders.get(p) == roles.senders.get(name)), None)
        ax = axes[panel_of[probe] if probe is not None else -1]
        stats = f": p50 {d.p50_ms:.2f}, p99 {d.p99_ms:.2f} ms" if d.p50_ms is not None and d.p99_ms is not None else ""
        ax.plot(d.t_s, d.delay_ms, lw=0.8, color=f"C{len(delays) + k}", alpha=0.8, zorder=2,
                label=f"{name}'s smoothed RTT less {'its probe' if probe else 'its least'}{stats}")
    for i, ax in enumerate(axes):
        ax.axvspan(*roles.load_s, color="0.93", zorder=0)  # under load: what p50 and p99 count
        # As many ticks at any panel height: labels that arrange() measured are the ones drawn.
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 5, 10]))
        name = list(delays)[i] if panels > 1 else ""
        _finish(ax, run, f"{name}\nqueueing delay (ms)" if name else "queueing delay (ms)", empty=reason)
    return fig


def _l4s_delay_cdf_figure(run: Run, warn: Warn) -> Figure:
    """Each probe's queueing delay under load as a distribution, and each bulk flow's from its
    smoothed RTT (dashed), on a log axis (1 ms beside 15)."""
    roles = l4s.l4s_of(run)
    assert roles is not None
    fig, (ax,) = _figure(run, "Queueing delay distribution under load", xlabel="queueing delay (ms), log scale")
    delays, reason = l4s.queueing_delays(run, roles)  # the time figure has warned
    flows, _ = l4s.flow_delays(run, roles, delays)
    queues = l4s.dualpi2_directions(run)
    for i, (name, d, what) in enumerate([*((n, d, "replies") for n, d in delays.items()),
                                         *((n, d, "samples") for n, d in flows.items())]):
        loaded = np.sort(d.delay_ms[(d.t_s >= roles.load_s[0]) & (d.t_s <= roles.load_s[1])])
        if loaded.size:
            label = _probe_label(name, roles, queues) if name in delays else f"{name}'s smoothed RTT"
            ax.step(np.maximum(loaded, l4s.DELAY_FLOOR_MS), np.arange(1, loaded.size + 1) / loaded.size, where="post",
                    color=f"C{i}", lw=1.2, ls="-" if name in delays else "--",
                    label=f"{label}\np50 {d.p50_ms:.2f}, p99 {d.p99_ms:.2f} ms ({loaded.size} {what})")
    if not ax.lines:
        _note(ax, f"no data: {reason or 'no reply under load'}")
    else:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(PLAIN_TICKS)
        ax.set_xlim(left=l4s.DELAY_FLOOR_MS)
        for q in (0.5, 0.99):
            ax.axhline(q, color="grey", lw=0.6, ls=":")
    ax.set_ylabel("fraction at most this")
    ax.set_ylim(0, 1.02)
    legend_beside(ax)
    return fig


def _l4s_throughput_figure(run: Run, warn: Warn) -> Figure:
    """Each flow's goodput per second (top) and the scalable flows' over the classic ones' (bottom)."""
    roles = l4s.l4s_of(run)
    assert roles is not None
    fig, (flows_ax, ratio_ax) = _figure(run, "Throughput balance, scalable against classic", panels=2)
    ends, goodput, reason = l4s.binned_goodput(run, roles)
    if reason:
        warn(reason)
    summary = run.summary if isinstance(run.summary, RunSummary) else None
    for i, (name, mbps) in enumerate(goodput.items()):
        role = "scalable" if name in roles.scalable else "classic"
        flow = (summary.flows or {}).get(name) if summary is not None else None
        whole = flow.goodput_mbps if flow is not None and not isinstance(flow, IrttSummary) else None
        cc = dig(run.meta, "flows", name, "cc")
        label = f"{name} ({', '.join(str(x) for x in (cc, role) if x)})" + (
            f": goodput {whole:.2f} Mbit/s" if isinstance(whole, (int, float)) else "")
        flows_ax.step(ends, mbps, where="pre", color=f"C{i}", lw=1.2, label=label)
    ratio = np.zeros(0)
    if goodput and not reason:
        ratio = l4s.ratio_over_time(ends, goodput, roles)
        overall = [f"{what} {value:.2f}" for what, value in (("under load", l4s.goodput_ratio(run, roles)),
                                                              ("whole run", l4s.whole_run_ratio(run, roles)))
                   if value is not None]
        ratio_ax.step(ends, ratio, where="pre", color="black", lw=1.2, label="; ".join(["per second", *overall]))
        ratio_ax.axvspan(*roles.load_s, color="0.93", zorder=0)
        ratio_ax.axhline(1, color="grey", lw=1, ls="--", label="equal")
        for bound in (0.5, 2):
            ratio_ax.axhline(bound, color="grey", lw=0.8, ls=":", label="0.5 and 2" if bound == 2 else "_nolegend_")
    _finish(flows_ax, run, f"goodput (Mbit/s)\nper {l4s.RATIO_BIN_S:g} s", empty=reason)
    _finish(ratio_ax, run, "goodput ratio\nscalable / classic", empty=reason)
    if ratio.size:  # a ratio on a log axis, 2 as far above 1 as 0.5 below (after _finish's limit at 0)
        finite = ratio[np.isfinite(ratio) & (ratio > 0)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 1.0)
        ratio_ax.set_yscale("log", base=2)
        ratio_ax.yaxis.set_major_formatter(PLAIN_TICKS)
        ratio_ax.set_ylim(min(low, 0.5) / 1.2, max(high, 2) * 1.2)
    return fig


def _l4s_marking_figure(run: Run, warn: Warn) -> Figure:
    """dualpi2's base probability p' over the run, the L queue's coupled k p' and the classic p'^2."""
    fig, (ax,) = _figure(run, "DualPI2 marking probability")
    queues = l4s.dualpi2_directions(run)
    probs, reason = l4s.base_probability(run, queues)
    if reason:
        warn(reason)
    if reason:  # and what summary.json has instead: p' at the end, the marks and drops over the run
        _note(ax, f"no data: {reason}")
        ax.text(0.5, 0.4, "\n".join(_dualpi2_totals(run, link) for link in queues), transform=ax.transAxes,
                ha="center", va="top", fontsize=9)
    for i, (link, (t_s, prob)) in enumerate(probs.items()):
        k = queues[link].coupling_factor
        prefix = f"{link}: " if len(probs) > 1 else ""
        ax.step(t_s, prob, where="post", color=f"C{i}", lw=1.2, label=f"{prefix}p' (base)")
        ax.step(t_s, np.minimum(k * prob, 1), where="post", color=f"C{i}", lw=1, ls="--",
                label=f"{prefix}k p' (L queue's coupled marks, k = {k})")
        ax.step(t_s, prob ** 2, where="post", color=f"C{i}", lw=1, ls=":", label=f"{prefix}p'^2 (classic drops and marks)")
    _finish(ax, run, "probability", empty=reason)
    return fig


def _dualpi2_totals(run: Run, link: str) -> str:
    """A dualpi2 direction's p' at the end and its marks and drops by kind, from summary.json."""
    summary = run.summary if isinstance(run.summary, RunSummary) else None
    figures = (summary.dualpi2 or {}).get(link) if summary is not None else None
    queue = (summary.queue or {}).get(link) if summary is not None else None
    marks = (queue.marks if queue is not None else None) or {}
    drops = (queue.drops_by_reason if queue is not None else None) or {}
    marked = ", ".join(f"{marks.get(f'dualpi2_{kind}', 0)} {kind}" for kind in ("coupled", "step", "classic"))
    dropped = ", ".join(f"{drops.get(f'dualpi2_{kind}', 0)} {kind}" for kind in ("classic", "overload"))
    end = f": p' {figures.prob:.4g} at the end" if figures is not None and figures.prob is not None else ""
    return f"{link}{end}\nover the run, CE marks: {marked}; drops: {dropped}"


_warmed = False


def warm() -> None:
    """Draw, to nothing, a figure with what the real ones hold (two panels, every printable
    character at each size they use, each kind of line, a box plot, a legend beside), so that
    the first real one does not pay for loading fonts, caching glyphs and the code paths' first
    use (0.14-0.37 s of CPU over a run's seven figures here); a fork inherits it all.

    Once per process: matplotlib caches a font per thread (up to 64), and a sweep warms from a
    new thread each run, so every run kept two more open font files and ~5 MB that no figure
    used (bench soak found it)."""
    global _warmed
    if _warmed:
        return
    _warmed = True
    import io
    import string

    fig = Figure(figsize=(4, 3), dpi=DPI)
    top, bottom = fig.subplots(2, 1, sharex=True)
    text = string.printable.strip()
    fig.suptitle(text)
    top.set_title(text, fontsize=8, loc="left")
    top.plot([0, 1], [0, 1], ".-", ms=2, lw=0.5, label="dots")
    top.plot([0, 1], [1, 0], ls="--", label="dashed")
    top.step([0, 1], [0, 1], where="post", label="step")
    top.axhline(0.5, ls=":")
    top.boxplot([[0, 1, 2]], whis=(5, 95), showfliers=False, patch_artist=True)
    bottom.plot([0, 1], [0, 1], "o", ms=3)
    bottom.plot([0, 1], [1, 0], "x", ms=7, mew=1.5, clip_on=False)
    bottom.set_ylabel("two\nlines")
    bottom.set_xlabel(text)
    _note(bottom, "note")
    legend_beside(top)
    arrange(fig)
    fig.savefig(io.BytesIO(), format="png", **PNG_OPTIONS)


def _figure(run: Run, what: str, panels: int = 1, xlabel: str = TIME_LABEL) -> tuple[Figure, list[Axes]]:
    """A titled figure of stacked panels sharing the time axis; the caption names the run's params."""
    fig = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN + 1.5 * (panels - 1)), dpi=DPI)  # arranged as it is saved
    axes = list(fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0])
    fig.suptitle(f"{what}: {run.name}" + (" (incomplete)" if not run.complete else ""))
    axes[0].set_title(caption(run), fontsize=8, loc="left")
    axes[-1].set_xlabel(xlabel)
    return fig, axes


def _finish(ax: Axes, run: Run, ylabel: str, empty: str | None) -> None:
    """Units, limits from zero over the whole run, a legend beside the panel; an empty panel says why."""
    if not ax.lines and not ax.texts:
        _note(ax, f"no data: {empty or 'nothing to draw'}")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    lows, highs = [0.0], [run.duration_s]
    for a in ax.figure.axes:
        if np.isfinite(a.dataLim.x0) and np.isfinite(a.dataLim.x1):
            lows.append(a.dataLim.x0)
            highs.append(a.dataLim.x1)
    if max(highs) > min(lows):
        ax.set_xlim(min(lows), max(highs))
    legend_beside(ax)


def _note(ax: Axes, text: str) -> None:
    """Red text in the panel: centred when it has nothing drawn, in a corner beside data."""
    empty = not ax.lines
    ax.text(0.5 if empty else 0.01, 0.5 if empty else 0.02, text, transform=ax.transAxes, color="red",
            ha="center" if empty else "left", va="center" if empty else "bottom",
            fontsize=11 if empty else 8, wrap=True)


def _expect(ax: Axes, warn: Warn, expected: Iterable[str], present: Mapping[str, Any], what: str,
            file: str) -> None:
    """Name what run.json promises but the series lacks, so a missing flow or link is never silent."""
    lacking = [name for name in expected if name not in present]
    if lacking:
        message = f"no rows for {what} {', '.join(lacking)} in series/{file}"
        warn(message)
        _note(ax, f"no data: {message}")


def series_groups(run: Run, name: str, columns: tuple[str, ...], warn: Warn) -> tuple[dict[str, Series], str | None]:
    """series/NAME.csv's rows grouped by its key column (one group "" without one), in order of
    first appearance, each of `columns` as floats; or no groups and why there is no data."""
    series = run.read_series(name, columns)
    if series.problem:
        return {}, series.problem
    if series.warning:
        warn(series.warning)
    frame = series.frame
    key = SERIES_KEYS.get(name)
    grouped = frame.groupby(key, sort=False) if key else [("", frame)]
    return {str(k): {c: g[c].to_numpy(dtype=float) for c in columns} for k, g in grouped}, None


def show_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


# Every run's figures, by file stem, in the order they are shown.
FIGURES: dict[str, Callable[[Run, Warn], Figure]] = {
    "cwnd": _cwnd_figure, "queue": _queue_figure, "rtt": _rtt_figure, "rtt_cdf": _rtt_cdf_figure,
    "rtt_box": _rtt_box_figure, "throughput": _throughput_figure, "fetch": _fetch_figure}
# An L4S run's, after them (figures_of).
L4S_FIGURES: dict[str, Callable[[Run, Warn], Figure]] = {
    "l4s_delay": _l4s_delay_figure, "l4s_delay_cdf": _l4s_delay_cdf_figure,
    "l4s_throughput": _l4s_throughput_figure, "l4s_marking": _l4s_marking_figure}
DRAW = {**FIGURES, **L4S_FIGURES}
