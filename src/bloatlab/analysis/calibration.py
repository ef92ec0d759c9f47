"""A calibration's figures and report: measured against emulated, drawn from the measurement and
the fitted path's full-length run (both read as results/measurement.py reads them), and the
residual of every figure from calibration.json."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from bloatlab.analysis.layout import arrange, legend_beside  # noqa: E402
from bloatlab.results.measurement import STEP_S, Measurement, direction_totals  # noqa: E402

MEASURED, EMULATED = "measured", "emulated (fitted path)"


def latency_cdf_figure(measured: Measurement, emulated: Measurement) -> plt.Figure:
    """Each probe's round trips under load (and idle, where there is idle time), as CDFs."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, probe in enumerate(measured.probes):
        color = f"C{i}"
        for m, style, who in ((measured, "-", MEASURED), (emulated, "--", EMULATED)):
            rtt = m.latency.loc[m.latency["probe"] == probe.name, "rtt_ms"].to_numpy(dtype=float)
            rtt = np.sort(rtt[np.isfinite(rtt)])
            if len(rtt):
                ax.plot(rtt, np.arange(1, len(rtt) + 1) / len(rtt), style, color=color, label=f"{probe.name}, {who}")
    ax.set_xlabel("round trip (ms)")
    ax.set_ylabel("fraction of round trips")
    ax.set_title("Latency: measured against the fitted path (the whole run, idle and loaded)", fontsize=10)
    ax.grid(alpha=0.3)
    legend_beside(ax)
    arrange(fig)
    return fig


def throughput_figure(measured: Measurement, emulated: Measurement) -> plt.Figure:
    """Each direction's total throughput per second of load, measured against emulated."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, direction in enumerate(measured.directions()):
        for m, style, who in ((measured, "-", MEASURED), (emulated, "--", EMULATED)):
            window = m.load_window()
            if window is None:
                continue
            totals = direction_totals(m.throughput, [f.name for f in m.flows if f.direction == direction], *window)
            ax.plot(np.arange(len(totals)) * STEP_S, totals, style, color=f"C{i}", label=f"{direction}, {who}")
    ax.set_xlabel("seconds into the load")
    ax.set_ylabel("total throughput (Mbit/s)")
    ax.set_title("Throughput each way: measured against the fitted path", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend_beside(ax)
    arrange(fig)
    return fig


def draw(measured: Measurement, emulated: Measurement, out: Path, prefix: str = "") -> list[Path]:
    """The two figures into out/, as PNG; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in (("latency_cdf", latency_cdf_figure), ("throughput", throughput_figure)):
        fig = make(measured, emulated)
        path = out / f"{prefix}{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _cell(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.{digits}g}"
    return html.escape(str(value))


def report(doc: dict[str, Any], plots: list[Path], out: Path) -> Path:
    """report.html: what was fitted to what, how well, figure by figure, and the figures."""
    rows = "".join(
        f"<tr><td>{_cell(r['measurement'])}</td><td>{_cell(r['figure'])}</td><td>{_cell(r['measured'])}</td>"
        f"<td>{_cell(r['emulated'])}</td><td>{_cell(100 * r['relative_error'], 3)}%</td></tr>"
        for r in doc["residuals"])
    sources = "".join(f"<li>{_cell(m['key'])}: {_cell(m['source'])} ({_cell(m['test'])}, {len(m['flows'])} flows, "
                      f"{len(m['probes'])} probes){''.join(f'<br><i>{_cell(n)}</i>' for n in m['notes'])}</li>"
                      for m in doc["measurements"])
    trials = "".join(f"<tr><td>{t['number']}</td><td>{t['stage']}</td><td>{_cell(t['load_s'] or 'full')}</td>"
                     f"<td>{_cell(t['error'] if t['error'] is not None else t['reason'])}</td></tr>"
                     for t in doc["trials"])
    images = "".join(f'<figure><img src="{html.escape(p.relative_to(out).as_posix())}" alt="{html.escape(p.stem)}">'
                     "</figure>" for p in plots)
    median = doc.get("median_abs_relative_error")
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>bloatlab calibration</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:sans-serif;max-width:60rem;margin:1rem auto;padding:0 1rem}}
table{{border-collapse:collapse;font-size:.85rem}}td,th{{border:1px solid #ccc;padding:.15rem .4rem;text-align:right}}
td:nth-child(2),td:first-child{{text-align:left}}img{{max-width:100%;height:auto}}</style></head><body>
<h1>Calibration</h1>
<p><b>Fitted path:</b> {_cell(doc['fitted_text'])}.<br>
Error {_cell(doc['error'])} (mean |log(emulated / measured)| per group of figures, then over groups);
median |relative error| of a figure {_cell(100 * median if median is not None else math.nan, 3)}%.<br>
{doc['runs']} emulated runs in {_cell(doc['seconds'])} s. The fitted link: <code>path.toml</code>; the measured test on
it: <code>{_cell(', '.join(doc['files']['tests']))}</code>.</p>
<h2>Measurements</h2><ul>{sources}</ul>
{images}
<h2>Residuals, figure by figure (the fitted path's full-length run)</h2>
<table><tr><th>measurement</th><th>figure</th><th>measured</th><th>emulated</th><th>error</th></tr>{rows}</table>
<h2>Runs</h2><table><tr><th>run</th><th>stage</th><th>load (s)</th><th>error</th></tr>{trials}</table>
</body></html>
"""
    path = out / "report.html"
    path.write_text(page)
    return path
