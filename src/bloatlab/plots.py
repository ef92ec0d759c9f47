"""The figures of a run, drawn from its results directory alone (docs/results.md) into RUN/plots/.

This module owns how a run looks: which series go into which figure, with what units and title,
and that missing data is never silent: a figure whose series file is missing or has no rows
(or lacks a flow or link that run.json promises) says "no data: <reason>" in the picture and in
PlotResult.warnings. It uses matplotlib's Figure directly, not pyplot: no global figure registry,
no display, nothing to close.
"""

from __future__ import annotations

import csv
import json
import math
import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .errors import BloatlabError

WIDTH_IN = 8.0
PANEL_HEIGHT_IN = 4.5
DPI = 120
TIME_LABEL = "time since t0 (s)"
# A web fetch's TCP connection is flow "WORKLOAD#N" in cwnd.csv, N its fetch number from 1.
_CONNECTION = re.compile(r"^(?P<workload>.+)#\d+$")

Warn = Callable[[str], None]
Series = dict[str, np.ndarray]  # column name -> values, NaN where the cell is empty


@dataclass
class PlotResult:
    files: list[Path] = field(default_factory=list)  # every file written, in order
    warnings: list[str] = field(default_factory=list)  # "rtt.png: series/ping.csv has no rows"


@dataclass(frozen=True)
class _Run:
    """What the figures take from a run directory: run.json, and summary.json for labels."""

    dir: Path
    meta: dict[str, Any]
    summary: dict[str, Any]  # {} when absent: it only adds numbers to legends

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or self.dir.name)

    @property
    def incomplete(self) -> bool:
        # A run.json without `complete` was never finished properly: do not vouch for it.
        return self.meta.get("complete") is not True

    @property
    def caption(self) -> str:
        params = self.meta.get("params")
        items = params.items() if isinstance(params, dict) else ()
        lines = [textwrap.fill(" ".join(f"{k}={_show(v)}" for k, v in items), 110)]
        if self.incomplete and self.meta.get("incomplete_reason"):
            lines.append(f"incomplete: {self.meta['incomplete_reason']}")
        return "\n".join(lines)

    @property
    def duration_s(self) -> float:
        duration = _dig(self.meta, "spec", "duration_s")
        return float(duration) if isinstance(duration, (int, float)) else 0.0

    def flows(self, *kinds: str) -> list[str]:
        flows = self.meta.get("flows")
        return [n for n, f in flows.items() if _dig(f, "kind") in kinds] if isinstance(flows, dict) else []

    def has_workload(self, kind: str) -> bool:
        """Whether the spec has a workload of `kind`; True when run.json does not say."""
        workloads = _dig(self.meta, "spec", "workloads")
        if not isinstance(workloads, list):
            return True
        return any(isinstance(w, dict) and w.get("kind") == kind for w in workloads)

    def probed_queues(self) -> list[str]:
        queues = _dig(self.meta, "probes", "queue")
        return list(queues) if isinstance(queues, dict) else []

    def queue_limits_pkts(self) -> dict[str, int]:
        """Packet limit per link direction ("s0->h2"); directions limited in bytes have none."""
        limits = {}
        links = _dig(self.meta, "spec", "topology", "links")
        for link in links if isinstance(links, list) else []:
            for which in ("forward", "reverse"):
                direction, packets = _dig(link, which, "direction"), _dig(link, which, "queue", "packets")
                if isinstance(direction, str) and isinstance(packets, int):
                    limits[direction] = packets
        return limits


def plot_run(run_dir: Path, svg: bool = False) -> PlotResult:
    """Draw every figure of the run into RUN/plots/ (PNG, and SVG too with svg=True)."""
    figures, warnings = build_figures(run_dir)
    return PlotResult(_save(figures, Path(run_dir) / "plots", svg), warnings)


def _save(figures: dict[str, Figure], out: Path, svg: bool) -> list[Path]:
    """Each figure as OUT/NAME.png (and .svg); the files written, in order."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, fig in figures.items():
        files.append(out / f"{name}.png")
        fig.savefig(files[-1], metadata={"Software": None})
        if svg:
            files.append(out / f"{name}.svg")
            # A fixed id salt and no date: the same run gives the same bytes.
            with matplotlib.rc_context({"svg.hashsalt": "bloatlab"}):
                fig.savefig(files[-1], metadata={"Date": None})
    return files


def build_figures(run_dir: Path) -> tuple[dict[str, Figure], list[str]]:
    """Every figure of the run, unsaved, keyed by file stem ("cwnd"), and the warnings about missing data."""
    run = _load_run(Path(run_dir))
    warnings: list[str] = []
    figures = {}
    for name, draw in (("cwnd", _cwnd_figure), ("queue", _queue_figure), ("rtt", _rtt_figure),
                       ("throughput", _throughput_figure), ("fetch", _fetch_figure)):
        figures[name] = draw(run, lambda message, name=name: warnings.append(f"{name}.png: {message}"))
    return figures, warnings


def _cwnd_figure(run: _Run, warn: Warn) -> Figure:
    fig, (bulk_ax, web_ax) = _figure(run, "Congestion window", panels=2)
    flows, reason = _read_series(run, "cwnd.csv", "flow", ("t_s", "cwnd_pkts", "ssthresh_pkts"), warn)
    bulk = {name: s for name, s in flows.items() if not _CONNECTION.match(name)}
    for i, (name, s) in enumerate(bulk.items()):
        bulk_ax.plot(s["t_s"], s["cwnd_pkts"], color=f"C{i}", lw=1, label=name)
        if np.isfinite(s["ssthresh_pkts"]).any():  # empty cells (unset ssthresh) leave gaps
            bulk_ax.plot(s["t_s"], s["ssthresh_pkts"], color=f"C{i}", lw=1, ls="--", label=f"{name} ssthresh")
    workloads: dict[str, list[Series]] = {}  # one colour and one legend entry per workload, not per fetch
    for name, s in flows.items():
        if match := _CONNECTION.match(name):
            workloads.setdefault(match["workload"], []).append(s)
    for i, (workload, connections) in enumerate(workloads.items()):
        for j, s in enumerate(connections):
            label = f"{workload} ({len(connections)} connections)" if j == 0 else "_nolegend_"
            web_ax.plot(s["t_s"], s["cwnd_pkts"], color=f"C{i}", lw=0.8, label=label)
    if reason:
        warn(reason)
    else:
        _expect(bulk_ax, warn, run.flows("bulk"), bulk, "bulk flow", "cwnd.csv")
        _expect(web_ax, warn, run.flows("web"), workloads, "web workload", "cwnd.csv")
    _finish(bulk_ax, run, "bulk flows\ncwnd (packets)", empty=reason or "no bulk flows in series/cwnd.csv")
    _finish(web_ax, run, "web fetches\ncwnd (packets)", empty=reason or "no web fetch connections in series/cwnd.csv")
    return fig


def _queue_figure(run: _Run, warn: Warn) -> Figure:
    fig, (ax,) = _figure(run, "Queue backlog")
    links, reason = _read_series(run, "queue.csv", "link", ("t_s", "backlog_pkts", "drops"), warn)
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


def _rtt_figure(run: _Run, warn: Warn) -> Figure:
    fig, (ax,) = _figure(run, "Ping round-trip time")
    pings, reason = _read_series(run, "ping.csv", None, ("t_s", "rtt_ms"), warn)
    # Lost requests have no row: only summary.json counts them.
    lost = _dig(run.summary, "rtt_ms", "lost")
    for s in pings.values():
        label = f"{len(s['t_s'])} replies" + (f", {lost} lost" if isinstance(lost, int) else "")
        ax.plot(s["t_s"], s["rtt_ms"], ".-", ms=2, lw=0.5, label=label)
    if reason and not run.has_workload("ping"):
        reason = "no ping workload"  # nothing was missed
    elif reason:
        warn(reason)
    _finish(ax, run, "RTT (ms)", empty=reason)
    return fig


def _throughput_figure(run: _Run, warn: Warn) -> Figure:
    fig, (ax,) = _figure(run, "Throughput")
    flows, reason = _read_series(run, "throughput.csv", "flow", ("t_s", "mbps"), warn)
    for i, (name, s) in enumerate(flows.items()):
        goodput = _dig(run.summary, "flows", name, "goodput_mbps")
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


def _fetch_figure(run: _Run, warn: Warn) -> Figure:
    fig, (ax,) = _figure(run, "Web fetch duration", xlabel="fetch start, " + TIME_LABEL)
    workloads, reason = _read_series(run, "fetch.csv", "workload", ("t_s", "seconds", "ok"), warn)
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


def _figure(run: _Run, what: str, panels: int = 1, xlabel: str = TIME_LABEL) -> tuple[Figure, list[Axes]]:
    """A titled figure of stacked panels sharing the time axis; the caption names the run's params."""
    fig = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN + 1.5 * (panels - 1)), dpi=DPI, layout="constrained")
    axes = list(fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0])
    fig.suptitle(f"{what}: {run.name}" + (" (incomplete)" if run.incomplete else ""))
    axes[0].set_title(run.caption, fontsize=8, loc="left")
    axes[-1].set_xlabel(xlabel)
    return fig, axes


def _finish(ax: Axes, run: _Run, ylabel: str, empty: str | None) -> None:
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
    handles, labels = ax.get_legend_handles_labels()
    if handles:  # beside the axes: a legend must never hide data
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0,
                  ncols=math.ceil(len(handles) / 12))


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


def _read_series(run: _Run, file: str, key: str | None, columns: tuple[str, ...],
                 warn: Warn) -> tuple[dict[str, Series], str | None]:
    """series/FILE's rows grouped by the KEY column (one group "" without a key), in order of first
    appearance, each column as floats; or no groups and why there is no data. Rows whose cells are
    not numbers are skipped with a warning."""
    path = run.dir / "series" / file
    groups: dict[str, list[list[float]]] = {}
    rows = skipped = 0
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f, skipinitialspace=True)  # tolerates "t_s, rtt_ms" headers
            header = reader.fieldnames or []
            if not header:
                return {}, f"series/{file} is empty (not even a header)"
            if lacking := [c for c in (*([key] if key else []), *columns) if c not in header]:
                return {}, f"series/{file} has no column {', '.join(lacking)}"
            for row in reader:
                rows += 1
                try:
                    values = [_number(row[c]) for c in columns]
                except (ValueError, AttributeError):  # AttributeError: a short row's missing cell is None
                    skipped += 1
                    continue
                groups.setdefault(row[key] if key else "", []).append(values)
    except FileNotFoundError:
        return {}, f"series/{file} is missing"
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        return {}, f"series/{file} is unreadable: {error}"
    if rows == 0:
        return {}, f"series/{file} has no rows"
    if skipped:
        warn(f"series/{file}: skipped {skipped} of {rows} rows whose cells are not numbers")
    if not groups:
        return {}, f"series/{file} has no readable rows"
    return {name: dict(zip(columns, np.array(values, dtype=float).T)) for name, values in groups.items()}, None


def _load_run(run_dir: Path) -> _Run:
    path = run_dir / "run.json"
    try:
        meta = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError):
        raise BloatlabError(f"{run_dir} is not a bloatlab run directory (no run.json)", field="DIR") from None
    except (OSError, ValueError) as error:  # ValueError: bad JSON or bad UTF-8
        raise BloatlabError(f"{path} is unreadable: {error}", field="DIR") from None
    if not isinstance(meta, dict):
        raise BloatlabError(f"{path} is not a JSON object", field="DIR")
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    return _Run(run_dir, meta, summary if isinstance(summary, dict) else {})


def _number(cell: str) -> float:
    return float(cell) if cell.strip() else math.nan


def _dig(value: Any, *keys: str) -> Any:
    """value[k1][k2]..., or None where a level is missing or not an object."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
