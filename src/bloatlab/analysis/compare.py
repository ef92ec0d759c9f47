"""Runs side by side (`bloatlab compare`): each run's label, the headline numbers of two runs with
their relative difference, and figures with every run on one axis. Made for the same experiment
from two backends (emulated and simulated), or at two settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from bloatlab.analysis.plots import DPI, PANEL_HEIGHT_IN, TIME_LABEL, WIDTH_IN
from bloatlab.experiment.record import IrttSummary
from bloatlab.results.reader import Run, dig
from bloatlab.results.summary import RunSummary, Summary


def backend(run: Run) -> str:
    """Where the run ran: emulation, or ns3 (runs before the ns-3 backend were emulated)."""
    return str(dig(run.meta, "spec", "backend") or "emulation")


def labels(runs: list[Run]) -> tuple[list[str], dict[str, Any]]:
    """A label per run from what differs between them (parameters, then the backend), else the
    directory names; and the parameters they share."""
    params = runs[0].params
    differ = [k for k in params if len({json.dumps(run.params.get(k)) for run in runs}) > 1]
    out = []
    for run in runs:
        parts = [f"{k}={run.params.get(k)}" for k in differ]
        if len({backend(r) for r in runs}) > 1:
            parts.append(backend(run))
        out.append(" ".join(parts) or run.path.name)
    if len(set(out)) < len(out):  # the same settings, or directories of the same name: numbered
        out = [f"{label} #{i}" for i, label in enumerate(out, 1)]
    return out, {k: v for k, v in params.items() if k not in differ}


def headline_numbers(summary: Summary | None) -> dict[str, float]:
    """The numbers two runs are held against each other by, named for the reader (none of a nic
    run's)."""
    out: dict[str, float] = {}
    if not isinstance(summary, RunSummary):
        return out

    def put(name: str, value: Any) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
            out[name] = float(value)

    for name, flow in (summary.flows or {}).items():
        if not isinstance(flow, IrttSummary):
            put(f"goodput {name} (Mbit/s)", flow.goodput_mbps)
    if (rtt := summary.rtt_ms) is not None:
        for stat, value in (("min", rtt.min), ("median", rtt.median), ("p95", rtt.p95), ("max", rtt.max)):
            put(f"RTT {stat} (ms)", value)
    for link, q in (summary.queue or {}).items():
        put(f"queue {link} mean (packets)", q.mean_pkts)
        put(f"queue {link} max (packets)", q.max_pkts)
        put(f"queue {link} drops", q.drops)
    if (fetch := summary.fetch_s) is not None:
        for stat, value in (("mean", fetch.mean), ("median", fetch.median), ("p95", fetch.p95)):
            put(f"fetch {stat} (s)", value)
    return out


@dataclass(frozen=True)
class Difference:
    metric: str
    a: float | None
    b: float | None

    @property
    def relative(self) -> float | None:
        """(b - a) / a; None where either is missing or a is 0."""
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a - 1


def differences(a: Summary | None, b: Summary | None) -> list[Difference]:
    """Run B's headline numbers against run A's, every metric either has, in A's order."""
    na, nb = headline_numbers(a), headline_numbers(b)
    return [Difference(m, na.get(m), nb.get(m)) for m in dict.fromkeys([*na, *nb])]


def differences_table(diffs: list[Difference], label_a: str, label_b: str) -> str:
    """The differences as text: metric, A, B, and B against A in percent."""
    def cell(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"

    rows = [(d.metric, cell(d.a), cell(d.b), "-" if d.relative is None else f"{d.relative:+.1%}") for d in diffs]
    heads = ("", label_a, label_b, "B vs A")
    widths = [max(len(str(r[i])) for r in [heads, *rows]) for i in range(4)]
    lines = ["  ".join(str(h).ljust(w) if i == 0 else str(h).rjust(w) for i, (h, w) in enumerate(zip(heads, widths)))]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def _axes(title: str, xlabel: str) -> tuple[Figure, Any]:
    fig = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN), dpi=DPI)  # arranged as it is saved
    ax = fig.subplots()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def figures(runs: list[Run], names: list[str]) -> dict[str, Figure]:
    """Every run on one axis: the RTT distribution, goodput, the probed queues and cwnd over time."""
    out = {}
    fig, ax = _axes("Round-trip time distribution", "RTT (ms)")
    for i, (run, name) in enumerate(zip(runs, names)):
        rtts = np.sort(run.ping["rtt_ms"].dropna().to_numpy()) if len(run.ping) else np.zeros(0)
        if rtts.size:
            ax.step(rtts, np.arange(1, rtts.size + 1) / rtts.size, where="post", color=f"C{i}",
                    label=f"{name} (median {np.median(rtts):.1f} ms)")
    ax.set_ylabel("fraction of round trips")
    ax.set_ylim(0, 1.02)
    out["compare-rtt-cdf"] = fig

    for key, title, frame, column, ylabel, group in (
            ("compare-throughput", "Goodput per flow", "goodput", "mbps", "Mbit/s", "flow"),
            ("compare-queue", "Queue occupancy", "queue", "backlog_pkts", "packets", "link"),
            ("compare-cwnd", "Congestion window of the bulk flows", "cwnd", "cwnd_pkts", "packets", "flow")):
        fig, ax = _axes(title, TIME_LABEL)
        for i, (run, name) in enumerate(zip(runs, names)):
            df = getattr(run, frame)
            if not len(df):
                continue
            keep = run.flows("bulk") if frame == "cwnd" else None
            for j, (member, rows) in enumerate(df.groupby(group, sort=False)):
                if keep is not None and member not in keep:
                    continue
                ax.plot(rows["t_s"], rows[column], color=f"C{i}", lw=0.9, alpha=1.0 if j == 0 else 0.6,
                        drawstyle="steps-post" if frame == "queue" else "default", label=f"{name}: {member}")
        ax.set_ylabel(ylabel)
        ax.set_xlim(left=0)
        out[key] = fig
    for fig in out.values():
        ax = fig.axes[0]
        if ax.lines:
            ax.legend(fontsize="small", loc="best")
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="gray")
    return out
