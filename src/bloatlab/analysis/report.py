"""The report of a run or a sweep: one self-contained DIR/report.html; and what a sweep is made
into once it ends (finish_sweep: the aggregate, the series export, the figures, the report).

What ran, where and when, the numbers per configuration and the figures with captions, drawn
from the directory's files alone (docs/results.md, docs/sweeps.md). The file stands alone: the
figures are PNGs inside it as data: URIs, the CSS is inline, there is no script and no external
resource, so it opens from a mail attachment or a USB stick. Every string that comes from a
file is HTML-escaped: parameter values and names are the user's text.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import struct
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from matplotlib.figure import Figure

from bloatlab.analysis import compare, l4s, plots, sweep_plots
from bloatlab.analysis.aggregate import write_aggregate, write_series_export
from bloatlab.analysis.layout import arrange
from bloatlab.analysis.plots import PNG_OPTIONS, show_value as _show
from bloatlab.analysis.summary import summary_lines
from bloatlab.errors import BloatlabError
from bloatlab.results.reader import Run, Sweep, dig, is_run, is_sweep, load_run, load_sweep
from bloatlab.results.stats import GRADE_CONVENTION, grade
from bloatlab.results.summary import RunSummary
from bloatlab.specs.units import format_duration_ns, format_rate

# Per-run figures: file stem -> (the series it needs, caption).
RUN_FIGURES = {
    "cwnd": ("cwnd", "Congestion window over the run, in packets: the bulk flows (top; dashed: ssthresh) "
                     "and each web fetch's connection (bottom)."),
    "queue": ("queue", "Backlog of each probed queue over the run, in packets; dotted: the queue's packet "
                       "limit; the legend counts its drops."),
    "rtt": ("ping", "Round-trip time of every reply of each latency probe (ping, irtt, the responsiveness "
                    "test's probes) over the run; lost requests have no point."),
    "rtt_cdf": ("ping", "Distribution of each latency probe's round-trip times (RRUL's ping CDF): the share "
                        "of replies at or below each RTT."),
    "rtt_box": ("ping", "Round-trip time per latency probe (RRUL's box totals): box from the first to the "
                        "third quartile, line at the median, whiskers at the 5th and 95th percentiles."),
    "throughput": ("throughput", "Throughput of each bulk and UDP flow per 100 ms interval, as its receiver "
                                 "counted it."),
    "fetch": ("fetch", "Duration of each web fetch against when it started; red crosses: failed fetches."),
    # An L4S run's (a scalable flow beside a classic one: analysis/l4s.py).
    "l4s_delay": ("ping", "Queueing delay of each latency probe over the run, a panel each: its RTT less the least "
                          "it measured (its path's base RTT); dashed and dotted: its median and 99th percentile under "
                          "load (shaded: from 1 s after both kinds of flow run); with dualpi2, the probe's queue's "
                          "own bound (the classic target, the L queue's step threshold). Beside it, each bulk flow from "
                          "the probe's host: its sender's smoothed RTT less the probe's base, the flow's own delay "
                          "where each flow has a queue of its own (fq_codel, cake)."),
    "l4s_delay_cdf": ("ping", "Distribution of each latency probe's queueing delay under load, and of each bulk flow's "
                              "from its smoothed RTT (dashed), on a log axis (delays under 0.1 ms, ping's resolution "
                              "at these RTTs, at 0.1 ms)."),
    "l4s_throughput": ("throughput", "Each bulk flow's goodput per second, as its receiver counted it (top), and the "
                                     "scalable flows' goodput over the classic flows' per second, the legend giving it "
                                     "under load (shaded) and over the whole run (bottom; log scale, dotted at 0.5 "
                                     "and 2)."),
    "l4s_marking": ("queue", "DualPI2's base probability p' over the run, with the L queue's coupled marking "
                             "probability k p' and the classic queue's drop (or mark) probability p'^2."),
}

# The headline metrics of a sweep's table: (pattern, heading); "*" is a flow or link name.
HEADLINE = (
    ("responsiveness.rpm", "RPM"),
    ("bufferbloat.increase_ms", "latency increase under load (ms)"),
    ("totals_mbps.*", "goodput total * (Mbit/s)"),
    ("flows.*.goodput_mbps", "goodput * (Mbit/s)"),
    ("rtt_ms.median", "RTT median (ms)"),
    ("rtt_ms.p95", "RTT p95 (ms)"),
    ("fetch_s.mean", "fetch mean (s)"),
    ("fetch_s.failed", "fetches failed"),
    ("queue.*.mean_pkts", "queue * mean (packets)"),
    ("queue.*.max_pkts", "queue * max (packets)"),
    ("queue.*.drops", "queue * drops"),
    ("tcp.*_mbps", "TCP * (Mbit/s)"),
    ("udp.*_mbps", "UDP * (Mbit/s)"),
    ("udp.lost_percent", "UDP lost (%)"),
    ("ping.min_ms", "ping min (ms)"),
    ("ping.avg_ms", "ping avg (ms)"),
    ("ping.max_ms", "ping max (ms)"),
    ("ping.mdev_ms", "ping mdev (ms)"),
)

CSS = (resources.files("bloatlab.analysis") / "page.css").read_text()  # the live view's too


class _Html(str):
    """Markup this module built itself: not escaped again."""


def _e(value: Any) -> str:
    if isinstance(value, _Html):
        return value
    if value is None:
        return "-"
    return html.escape(value if isinstance(value, str) else json.dumps(value), quote=True)


def _table(head: Sequence[Any], rows: Iterable[Sequence[Any]], numeric_from: int | None = None) -> _Html:
    """A table; cells from column NUMERIC_FROM on are right-aligned numbers."""
    out = ["<div class=\"scroll\"><table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>")
        for i, cell in enumerate(row):
            cls = ' class="num"' if numeric_from is not None and i >= numeric_from else ""
            out.append(f"<td{cls}>{_e(cell)}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return _Html("".join(out))


def _pairs(rows: Iterable[tuple[str, Any]]) -> _Html:
    """A two-column table of what and value, leaving out what is unknown."""
    kept = [(k, v) for k, v in rows if v not in (None, "", [], {})]
    out = ["<div class=\"scroll\"><table><tbody>"]
    out += [f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in kept]
    out.append("</tbody></table></div>")
    return _Html("".join(out))


def _figure(fig: Figure | Path, caption: str) -> _Html:
    """The figure inline as PNG, with its caption: a saved file's bytes, or drawn now."""
    if isinstance(fig, Path):
        image = fig.read_bytes()
    else:
        arrange(fig)  # its legend inside the image: matplotlib's default margins cut a legend beside the axes
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", **PNG_OPTIONS)
        image = buffer.getvalue()
    # A PNG's size is in its header (IHDR, right after the 8-byte signature): width, height.
    width, height = struct.unpack(">II", image[16:24])
    data = base64.b64encode(image).decode("ascii")
    return _Html(f'<figure><img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
                 f'alt="{_e(caption)}"><figcaption>{_e(caption)}</figcaption></figure>')


def _page(title: str, sections: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(sections) + "\n</body></html>\n")


def _count(value: Any) -> str:
    """A whole number as it is, "-" for none."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "-"


def _number(value: Any, like: float | None = None) -> str:
    """A number with the decimals its size deserves (those of LIKE, when given)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return "-"
    size = abs(like if isinstance(like, (int, float)) and math.isfinite(like) else value)
    decimals = 0 if size >= 100 else 1 if size >= 10 else 2 if size >= 1 else 3
    return f"{value:.{decimals}f}"


# The rows of a cake queue's tin table: label, the figure's name (TinSummary's, summary.json's), format.
TIN_ROWS: tuple[tuple[str, str, Callable[..., str]], ...] = (
    ("threshold Mbit/s", "threshold_mbps", _number),
    ("target ms", "target_ms", _number),
    ("interval ms", "interval_ms", _number),
    ("peak delay ms", "peak_delay_ms", _number),
    ("avg delay ms", "avg_delay_ms", _number),
    ("sparse delay ms", "base_delay_ms", _number),
    ("backlog bytes", "backlog_bytes", _count),
    ("packets", "packets", _count),
    ("bytes", "bytes", _count),
    ("drops", "drops", _count),
    ("ack drops", "ack_drops", _count),
    ("marks", "marks", _count),
    ("sparse flows", "sparse_flows", _count),
    ("bulk flows", "bulk_flows", _count),
    ("unresponsive flows", "unresponsive_flows", _count),
    ("way hits (indirect)", "way_indirect_hits", _count),
    ("way misses", "way_misses", _count),
    ("way collisions", "way_collisions", _count),
)


# The rows of the dualpi2 table (a column per direction): label, the figure's name (DualPi2Summary's), format.
DUALPI2_ROWS: tuple[tuple[str, str, Callable[..., str]], ...] = (
    ("p' (base probability)", "prob", lambda p: _number(p, like=0.5)),
    ("C head delay ms", "delay_c_ms", _number),
    ("L head delay ms", "delay_l_ms", _number),
    ("packets into C", "pkts_in_c", _count),
    ("packets into L", "pkts_in_l", _count),
    ("most queued (maxq)", "maxq", _count),
    ("CE marks", "ecn_mark", _count),
    ("step marks", "step_mark", _count),
    ("credit bytes", "credit", _count),
    ("memory used bytes", "memory_used_bytes", _count),
    ("memory used at most", "max_memory_used_bytes", _count),
    ("memory limit bytes", "memory_limit_bytes", _count),
)


def _command(doc: dict[str, Any]) -> str | None:
    command = doc.get("command") or doc.get("argv")
    if isinstance(command, list):
        return " ".join(str(c) for c in command)
    return command if isinstance(command, str) else None


def _link_backends(chosen: Any) -> str:
    """The sweep's one backend per link (sweep.json's link_backends), or what stands for none."""
    if not isinstance(chosen, dict):
        return "as each run chose (a sweep from before bloatlab chose one for all)"
    return ", ".join(f"{link}: {backend}" for link, backend in chosen.items()) or "as each link names"


def _machine(machine: Any, tools: Any, version: Any) -> _Html:
    m = machine if isinstance(machine, dict) else {}
    rows = [("kernel", m.get("kernel")), ("hostname", m.get("hostname")), ("architecture", m.get("machine")),
            ("CPUs", m.get("cpus")), ("bloatlab", version)]
    if isinstance(tools, dict):
        rows += [(tool, ver if ver is not None else "unknown") for tool, ver in tools.items()]
    return _pairs(rows)


def _direction(d: Any) -> list[str]:
    if not isinstance(d, dict):
        return ["-"] * 5
    rate = f"trace {d['trace_path']}" if d.get("trace_path") else format_rate(d.get("rate_bps"))
    delay = format_duration_ns(d["delay_ns"]) if isinstance(d.get("delay_ns"), int) else "-"
    jitter = format_duration_ns(d["jitter_ns"]) if isinstance(d.get("jitter_ns"), int) else "-"
    loss = f"{d['loss'] * 100:g}%" if isinstance(d.get("loss"), (int, float)) else "-"
    q = d.get("queue") if isinstance(d.get("queue"), dict) else {}
    limit = f"{q['packets']} packets" if q.get("packets") is not None else f"{q['bytes']} bytes" \
        if q.get("bytes") is not None else ""
    extra = [f"{k}={_show(v)}" for k, v in q.items() if k not in ("discipline", "packets", "bytes") and v is not None]
    return [rate, delay, jitter, loss, " ".join([str(q.get("discipline", "-")), limit, *extra]).strip()]


def _links(meta: dict[str, Any]) -> _Html | None:
    links = meta.get("links") or dig(meta, "spec", "topology", "links")
    if not isinstance(links, list) or not links:
        return None
    rows = []
    for link in links:
        if not isinstance(link, dict):
            continue
        for which in ("forward", "reverse"):
            d = link.get(which)
            direction = d.get("direction") if isinstance(d, dict) else which
            rows.append([link.get("name"), direction, link.get("backend"), *_direction(d)])
    return _table(["link", "direction", "backend", "rate", "delay", "jitter", "loss", "queue"], rows)


# A sweep -------------------------------------------------------------------------------------

def _sweep_report(sweep: Sweep) -> str:
    meta = sweep.meta
    runs = [(p, r) for p in sweep.points for r in p.runs]
    complete = sum(1 for p in sweep.points for _ in p.complete_runs())
    status = sweep.status
    if status == "stopped":
        status = "stopped before it finished (its process is gone); run it again with --resume to finish it"
    first = sweep.first_run()
    sections = [f"<h1>Sweep report: {_e(sweep.name)}</h1>",
                f"<p class=\"{'note' if complete == len(runs) else 'bad'}\">{_e(status)}: {complete} of "
                f"{len(runs)} runs complete, {len(sweep.points)} points ({_e(sweep_plots.varies(sweep))} varies)</p>"]

    axes = "; ".join(f"{n} = {', '.join(_show(v) for v in values)}" for n, values in sweep.axes) or "none"
    fixed = meta.get("fixed") if isinstance(meta.get("fixed"), dict) else {}
    sections += ["<h2>What was run</h2>", _pairs([
        ("experiment", sweep.name), ("kind", sweep.kind), ("source", meta.get("source")), ("axes", axes),
        ("repetitions per point", meta.get("repeat")),
        ("fixed (--set)", " ".join(f"{k}={_show(v)}" for k, v in fixed.items()) or "nothing"),
        *([("link backends (every point)", _link_backends(meta.get("link_backends")))]
          if sweep.kind == "experiment" else []),
        ("command", _command(meta)), ("created", meta.get("created")), ("updated", meta.get("updated")),
        ("status", status), ("format", meta.get("format"))])]
    if first is not None and isinstance(first.meta.get("params"), dict):
        params = first.meta["params"]
        swept = {n for n, _ in sweep.axes}
        sections += ["<p class=\"note\">Parameters of every run (the swept ones vary):</p>",
                     _table(["parameter", "value"], [(k, "swept" if k in swept else _show(v))
                                                     for k, v in params.items()])]

    sections += ["<h2>Machine</h2>", _machine(meta.get("machine") or (first.meta.get("machine") if first else None),
                                              first.meta.get("tools") if first else None,
                                              first.meta.get("bloatlab_version") if first else None)]
    if sweep.kind == "experiment" and first is not None and (links := _links(first.meta)) is not None:
        sections += ["<h2>Topology</h2>", "<p class=\"note\">Links of the first run, as it ran (a swept parameter "
                                          "may change them from point to point).</p>", links]

    sections += ["<h2>Results per configuration</h2>", *_sweep_tables(sweep), *_sweep_l4s_table(sweep)]
    sections += ["<h2>Runs</h2>", _runs_table(sweep)]

    figures = sweep_plots.build_sweep_figures(sweep)
    sections.append("<h2>Figures</h2>")
    sections += [_figure(d.figure, d.caption) for d in figures.drawn]
    if figures.skipped:
        sections.append("<p class=\"note\">Not drawn: " + "; ".join(_e(s) for s in figures.skipped) + ".</p>")
    if figures.warnings:
        sections.append("<p class=\"bad\">Warnings about missing data:</p><ul>"
                        + "".join(f"<li>{_e(w)}</li>" for w in figures.warnings) + "</ul>")
    return _page(f"bloatlab sweep: {sweep.name}", sections)


def _sweep_tables(sweep: Sweep) -> list[str]:
    if sweep.aggregate is None:
        return [f"<p class=\"bad\">No per-point statistics: {_e(sweep.aggregate_problem)}.</p>"]
    names = sweep.metric_names()
    columns = [(name, heading.replace("*", star).replace("  ", " ")) for pattern, heading in HEADLINE
               for name in names if (star := sweep_plots.match_metric(pattern, name)) is not None]
    axes = [n for n, _ in sweep.axes]
    graded = "bufferbloat.increase_ms" in names
    n_of = {p.get("label"): p.get("n") for p in sweep.aggregate.get("points") or [] if isinstance(p, dict)}
    rows = []
    for point in sweep.points:
        cells = [point.label, *(_show(point.values.get(a)) for a in axes), n_of.get(point.label, 0)]
        for name, _ in columns:
            stats = sweep.metric(point, name) or {}
            mean, sd = stats.get("mean"), stats.get("sd")
            spread = f" ± {_number(sd, mean)}" if sd is not None else ""
            cells.append("-" if mean is None else _number(mean) + spread)
        if graded:
            cells.append(grade((sweep.metric(point, "bufferbloat.increase_ms") or {}).get("mean")) or "-")
        rows.append(cells)
    out = ["<p class=\"note\">Mean ± sample standard deviation over each point's complete runs (n); "
           "no ± where n &lt; 2. Failed and incomplete runs do not count."
           + (f" Grade: of the mean latency increase ({_e(GRADE_CONVENTION)}).</p>" if graded else "</p>"),
           _table(["point", *axes, "n", *(h for _, h in columns), *(["grade"] if graded else [])], rows,
                  numeric_from=1 + len(axes))]
    # Every metric, for whoever needs more than the headline: mean, sd and the 95% CI.
    detail = []
    for name in names:
        row = [name]
        for point in sweep.points:
            stats = sweep.metric(point, name) or {}
            mean, low, high = stats.get("mean"), stats.get("ci95_low"), stats.get("ci95_high")
            ci = f" [{_number(low, mean)}, {_number(high, mean)}]" if low is not None and high is not None else ""
            row.append("-" if mean is None else f"{_number(mean)} ± {_number(stats.get('sd'), mean)}{ci} "
                                                f"(n={stats.get('n')})")
        detail.append(row)
    out.append("<details><summary>Every metric: mean ± sd [95% confidence interval of the mean] (n)</summary>"
               + _table(["metric", *(p.label for p in sweep.points)], detail, numeric_from=1) + "</details>")
    return out


def _sweep_l4s_table(sweep: Sweep) -> list[str]:
    """For a sweep of L4S runs: each point's queueing delays, per probe and per flow, and goodput ratio."""
    points = l4s.sweep_l4s(sweep)
    if not points:
        return []
    probes, flows = l4s.probes_of(points), l4s.flows_of(points)
    axes = [n for n, _ in sweep.axes]
    rows = []
    for p in points:
        cells = [p.point.label, *(_show(p.point.values.get(a)) for a in axes), p.runs]
        for found, names in ((p.delays, probes), (p.flow_delays, flows)):
            for name in names:
                p50, p99, _ = found.get(name, (None, None, 0))
                cells += [_number(p50), _number(p99)]
        mean, sd = p.ratio_mean, p.ratio_sd
        cells.append("-" if mean is None else _number(mean, like=1.0) + (f" ± {_number(sd, like=1.0)}" if sd is not None else ""))
        rows.append(cells)
    head = ["point", *axes, "n", *(f"{probe} {q} (ms)" for probe in probes for q in ("p50", "p99")),
            *(f"{flow} srtt {q} (ms)" for flow in flows for q in ("p50", "p99")), "goodput scalable / classic, under load"]
    return ["<h3>L4S: each queue's delay and the throughput balance</h3>",
            "<p class=\"note\">Queueing delay: each latency probe's RTT less the least it measured, and each bulk "
            "flow's smoothed RTT (its sender's TCP's) less the base of the probe from its host, under load (from 1 s "
            "after both kinds of flow run), pooled over each point's complete runs (n); where each flow has a queue of "
            "its own (fq_codel, cake) a probe is a flow of its own too, and the flows' delay is their srtt's. Goodput: "
            "the scalable flows' over the classic flows' under load, mean ± sample standard deviation over the "
            "runs.</p>",
            _table(head, rows, numeric_from=1 + len(axes))]


def _run_l4s_table(run: Run) -> list[str]:
    """For an L4S run: each latency probe's and each flow's queueing delay under load, and the
    goodput ratio."""
    roles = l4s.l4s_of(run)
    if roles is None:
        return []
    delays, _ = l4s.queueing_delays(run, roles)
    flows, _ = l4s.flow_delays(run, roles, delays)
    rows = [(name, roles.ecn.get(name) or "-", _number(d.base_ms), _number(d.p50_ms), _number(d.p99_ms), d.loaded)
            for name, d in delays.items()]
    rows += [(f"{name} (smoothed RTT)", "scalable" if name in roles.scalable else "classic", _number(d.base_ms),
              _number(d.p50_ms), _number(d.p99_ms), d.loaded) for name, d in flows.items()]
    loaded, whole = l4s.goodput_ratio(run, roles), l4s.whole_run_ratio(run, roles)
    return ["<h3>L4S</h3>", _pairs([("scalable flows", ", ".join(roles.scalable)),
                                    ("classic flows", ", ".join(roles.classic)),
                                    ("under load", f"{roles.load_s[0]:g} to {roles.load_s[1]:g} s"),
                                    ("goodput scalable / classic, under load",
                                     _number(loaded, like=1.0) if loaded is not None else None),
                                    ("goodput scalable / classic, whole run (summary.json)",
                                     _number(whole, like=1.0) if whole is not None else None)]),
            _table(["probe or flow", "ECN or kind", "base RTT (ms)", "queueing delay p50 (ms)", "p99 (ms)",
                    "samples under load"], rows, numeric_from=2)]


def _runs_table(sweep: Sweep) -> str:
    runs = [(p, r) for p in sweep.points for r in p.runs]
    lacking = []
    for point, r in runs:
        if r.status == "complete" and (r.dir / "run.json").is_file():
            continue
        status = r.status if r.status != "complete" else "complete, but its run.json is missing"
        lacking.append((point.label, r.rep, str(r.dir.relative_to(sweep.path)), status, r.reason))
    elapsed = [r.elapsed_s for _, r in runs if isinstance(r.elapsed_s, (int, float))]
    note = f"<p class=\"note\">{len(runs)} runs" + (f", {sum(elapsed):.0f} s in all" if elapsed else "") + ".</p>"
    if not lacking:
        return note + "<p>Every run is complete.</p>"
    return (note + "<p class=\"bad\">Runs that are not complete (they count in no statistic):</p>"
            + _table(["point", "rep", "directory", "status", "reason"], lacking))


# A single run --------------------------------------------------------------------------------

def _run_report(run_dir: Path, drawn: plots.PlotResult | None = None) -> str:
    run = load_run(run_dir)
    meta, summary = run.meta, run.summary
    complete = meta.get("complete") is True
    state = "complete" if complete else f"incomplete: {meta.get('incomplete_reason') or 'reason not recorded'}"
    sections = [f"<h1>Run report: {_e(run.name)}</h1>",
                f"<p class=\"{'note' if complete else 'bad'}\">{_e(state)}</p>"]
    duration = dig(meta, "spec", "duration_s")
    sections += ["<h2>What was run</h2>", _pairs([
        ("experiment", run.name), ("preset", meta.get("preset")), ("source", meta.get("source")),
        ("command", _command(meta)), ("started", meta.get("started_at")), ("ended", meta.get("ended_at")),
        ("duration", f"{duration:g} s" if isinstance(duration, (int, float)) else None),
        ("seed", dig(meta, "spec", "seed")), ("directory", str(run_dir))])]
    if isinstance(meta.get("params"), dict) and meta["params"]:
        sections.append(_table(["parameter", "value"], [(k, _show(v)) for k, v in meta["params"].items()]))
    sections += ["<h2>Machine</h2>", _machine(meta.get("machine"), meta.get("tools"), meta.get("bloatlab_version"))]
    if (links := _links(meta)) is not None:
        sections += ["<h2>Topology</h2>", links]
    flows = meta.get("flows")
    if isinstance(flows, dict) and flows:
        rows = [(n, f.get("kind"), f.get("src"), f.get("dst"), f.get("cc"), f.get("dscp"), f.get("ecn"))
                for n, f in flows.items() if isinstance(f, dict)]
        # ECN only in a run where some flow's packets carry it: each flow's codepoint and who sets
        # it, as run.json says (its first word the codepoint).
        ecn = any(isinstance(row[-1], str) and row[-1].split()[:1] != ["not-ect"] for row in rows)
        sections.append(_table(["flow", "kind", "from", "to", "congestion control", "DSCP", *(["ECN"] if ecn else [])],
                               [row if ecn else row[:-1] for row in rows]))

    sections.append("<h2>Results</h2>")
    lines = summary_lines(summary)
    if lines:
        plus_minus = [(k.replace("+-", "±"), v.replace("+-", "±")) for k, v in lines]
        sections.append(_table(["measure", "value"], plus_minus))
    numbers = list(run.metrics().items())
    if numbers:
        table = _table(["metric", "value"], [(k, _number(v)) for k, v in numbers], numeric_from=1)
        sections.append(table if not lines else f"<details><summary>Every number of summary.json</summary>{table}"
                                                "</details>")
    if not lines and not numbers:
        sections.append("<p class=\"bad\">summary.json has no numbers.</p>")
    for direction, tins in ((summary.tins if isinstance(summary, RunSummary) else None) or {}).items():
        # As `tc -s qdisc` shows cake: a column per tin, a row per figure.
        sections.append(f"<h3>Tins of {_e(direction)}</h3>" + _table(
            ["", *tins],
            [(label, *(fmt(getattr(t, key)) for t in tins.values())) for label, key, fmt in TIN_ROWS], numeric_from=1))
    sections += _run_l4s_table(run)
    if dualpi2 := (summary.dualpi2 if isinstance(summary, RunSummary) else None):
        # As `tc -s qdisc` shows dualpi2, at the run's end: a column per direction.
        sections.append("<h3>DualPI2</h3>" + _table(
            ["", *dualpi2],
            [(label, *(fmt(getattr(d, key)) for d in dualpi2.values())) for label, key, fmt in DUALPI2_ROWS],
            numeric_from=1))
    problems = [str(x) for key in ("errors", "warnings") if isinstance(meta.get(key), list) for x in meta[key]]

    figures: dict[str, Figure | Path]
    if drawn is not None and drawn.drawn:  # just drawn and saved: embed those files
        figures, warnings = {name: run.path / "plots" / f"{name}.png" for name in drawn.drawn}, drawn.warnings
    else:
        figures, warnings = plots.build_figures(run)  # type: ignore[assignment]
    sections.append("<h2>Figures</h2>")
    skipped = []
    present = run.series_names()
    for name, fig in figures.items():
        series, caption = RUN_FIGURES.get(name, (None, name))
        if series and series not in present:
            skipped.append(f"{name} (no series/{series}.csv)")
            continue
        sections.append(_figure(fig, caption))
    if skipped:
        sections.append(f"<p class=\"note\">Not drawn: {_e(', '.join(skipped))}.</p>")
    warnings = [w for w in warnings if not any(w.startswith(f"{s.split()[0]}.png:") for s in skipped)]
    if problems or warnings:
        sections.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{_e(w)}</li>" for w in [*problems, *warnings])
                        + "</ul>")
    return _page(f"bloatlab run: {run.name}", sections)


# Runs side by side ---------------------------------------------------------------------------

def write_compare_report(out: Path, runs: list[Run], names: list[str], shared: dict[str, Any],
                         figures: dict[str, Path]) -> Path:
    """OUT/report.html: the runs' summaries side by side, two runs' differences, and the
    comparison figures (saved PNGs, embedded)."""
    sections = [f"<h1>Runs compared: {_e(', '.join(names))}</h1>"]
    sections.append(_table(["run", "directory", "backend", "complete"],
                           [(n, str(r.path), compare.backend(r), "yes" if r.complete else "no")
                            for n, r in zip(names, runs)]))
    if shared:
        sections.append(_pairs([(k, _show(v)) for k, v in shared.items()]))
    columns = [dict(summary_lines(r.summary)) for r in runs]
    labels = list(dict.fromkeys(label for col in columns for label in col))
    sections += ["<h2>Summaries</h2>", _table(["measure", *names], [(label, *(c.get(label, "-") for c in columns))
                                                                    for label in labels])]
    if len(runs) == 2:
        diffs = compare.differences(runs[0].summary, runs[1].summary)
        sections += [f"<h2>{_e(names[1])} against {_e(names[0])}</h2>",
                     _table(["metric", names[0], names[1], "difference"],
                            [(d.metric, _number(d.a), _number(d.b),
                              "-" if d.relative is None else f"{d.relative:+.1%}") for d in diffs], numeric_from=1)]
    sections.append("<h2>Figures</h2>")
    for name, png in figures.items():
        sections.append(_figure(png, name))
    path = out / "report.html"
    path.write_text(_page(f"bloatlab compare: {', '.join(names)}", sections), encoding="utf-8")
    return path


# Entry points --------------------------------------------------------------------------------

def write_report(path: Path, drawn: plots.PlotResult | None = None) -> Path:
    """Write PATH/report.html for a run directory (run.json, with summary.json once it ended) or a
    sweep directory (sweep.json); returns its path. `drawn`: the run's figures as plot_run just drew and saved
    them, which the report embeds rather than draw again."""
    path = Path(path)
    if is_sweep(path):
        page = _sweep_report(load_sweep(path))
    elif is_run(path) or (path / "run.json").is_file():  # run.json alone: a run killed before its end
        page = _run_report(path, drawn)
    else:
        raise BloatlabError(f"{path} is neither a run directory (run.json) nor a sweep directory (sweep.json)",
                            field="DIR")
    out = path / "report.html"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)  # a reader never sees half a report
    return out


class Finished(Protocol):
    """What a sweep's outcome carries that finish_sweep adds to."""

    files: list[Path]
    warnings: list[str]


def finish_sweep(out: Path, doc: dict[str, Any], outcome: Finished, svg: bool = False) -> None:
    """What a sweep's complete runs are made into once it ends: the aggregate, the long series
    export, the comparison figures and report.html (the sweep `doc` is sweep.json's document)."""
    write_aggregate(doc, out)
    write_series_export(doc, out)
    outcome.files += [out / "aggregate.csv", out / "aggregate.json", out / "series.csv.gz"]
    try:
        plotted = sweep_plots.plot_sweep(out, svg=svg)
        outcome.files += plotted.files
        outcome.warnings += plotted.warnings
        outcome.files.append(write_report(out))
    except Exception as e:  # the runs and the aggregate are written; `bloatlab report` retries
        outcome.warnings.append(f"no figures or report: {e}; bloatlab report {out} retries")
