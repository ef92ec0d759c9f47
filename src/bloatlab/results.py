"""The results directory of a run (docs/results.md): run.json, summary.json and series/*.csv,
and the facts about the machine that make a run describe itself.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import re
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import netns

SERIES_COLUMNS = {
    "ping": ("t_s", "rtt_ms"),
    "cwnd": ("t_s", "flow", "cwnd_pkts", "ssthresh_pkts", "srtt_ms"),
    "queue": ("t_s", "link", "backlog_pkts", "backlog_bytes", "drops"),
    "fetch": ("t_s", "seconds", "workload", "ok"),
    "throughput": ("t_s", "flow", "mbps"),
}
SYSCTLS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_ecn", "net.ipv4.tcp_sack",
           "net.ipv4.tcp_timestamps", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.core.default_qdisc",
           "net.ipv4.tcp_no_metrics_save")


class RunDir:
    """RUN/ with raw/, series/ and plots/ in it."""

    def __init__(self, path: Path):
        self.path = path
        self.raw = path / "raw"
        self.series = path / "series"
        self.plots = path / "plots"

    def create(self) -> RunDir:
        for d in (self.path, self.raw, self.series, self.plots):
            d.mkdir(parents=True, exist_ok=True)
        return self

    def write_json(self, name: str, doc: dict[str, Any]) -> Path:
        path = self.path / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2, default=_jsonable) + "\n")
        tmp.replace(path)
        return path

    def write_series(self, name: str, rows: Iterable[Sequence[Any]]) -> Path:
        path = self.series / f"{name}.csv"
        with open(path, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(SERIES_COLUMNS[name])
            for row in rows:
                out.writerow(["" if v is None else f"{v:.6f}" if isinstance(v, float) else v for v in row])
        return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


# Statistics ------------------------------------------------------------------------------

def describe(values: Sequence[float], keys: Sequence[str]) -> dict[str, float | int | None]:
    """The named statistics of `values`: count, min, mean, median, pNN, max, stddev (sample,
    n - 1). With no values every statistic but count is null; stddev needs two."""
    data = np.asarray(values, dtype=float)
    out: dict[str, float | int | None] = {}
    for key in keys:
        if key == "count":
            out[key] = int(len(data))
        elif len(data) == 0 or (key == "stddev" and len(data) < 2):
            out[key] = None
        elif key == "stddev":
            out[key] = float(np.std(data, ddof=1))
        elif key in ("min", "max", "mean", "median"):
            out[key] = float(getattr(np, key)(data))
        elif m := re.fullmatch(r"p(\d+)", key):
            out[key] = float(np.percentile(data, int(m[1])))
        else:
            raise ValueError(f"unknown statistic {key}")
    return out


RTT_STATS = ("count", "min", "mean", "median", "p95", "p99", "max")
FETCH_STATS = ("count", "mean", "stddev", "median", "p95", "max")


# The machine -----------------------------------------------------------------------------

def _version(argv: list[str], pattern: str) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, out.stdout + out.stderr)
    return m[1] if m else None


def tool_versions() -> dict[str, str | None]:
    return {
        "iperf3": _version(["iperf3", "--version"], r"iperf (\S+)"),
        "ping": _version(["ping", "-V"], r"iputils[- ](s?\d[\w.]*)"),
        "curl": _version(["curl", "--version"], r"curl (\S+)"),
        "tc": _version(["tc", "-V"], r"iproute2-([\w.]+)"),
    }


def machine() -> dict[str, Any]:
    uname = platform.uname()
    return {"kernel": uname.release, "hostname": uname.node, "machine": uname.machine, "cpus": os.cpu_count()}


def snapshot(ns: str) -> dict[str, Any]:
    """A host's qdiscs (tc -s, JSON) and TCP sysctls, as they are now."""
    try:
        qdiscs = json.loads(netns.tc(ns, "-s", "-j", "qdisc", "show") or "[]")
    except (netns.CommandError, json.JSONDecodeError) as e:
        qdiscs = {"error": str(e)}
    sysctls: dict[str, str | None] = dict.fromkeys(SYSCTLS)
    try:  # one process for all; -e: a key this kernel lacks stays null
        for line in netns.run_in(ns, ["sysctl", "-e", *SYSCTLS]).splitlines():
            key, sep, value = line.partition(" = ")
            if sep:
                sysctls[key.strip()] = value.strip()
    except netns.CommandError:
        pass
    return {"qdiscs": qdiscs, "sysctls": sysctls}


# Presentation ----------------------------------------------------------------------------

def _num(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def summary_lines(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) lines of a summary, for the terminal."""
    lines: list[tuple[str, str]] = []
    for name, flow in summary.get("flows", {}).items():
        value = f"{_num(flow.get('goodput_mbps'), '.2f')} Mbit/s"
        if flow.get("retransmits") is not None:
            value += f", {flow['retransmits']} retransmits"
        if flow.get("lost_percent") is not None:
            value += f", {flow['lost_percent']:.2f}% lost"
        lines.append((f"{name} goodput", value))
    rtt = summary.get("rtt_ms", {})
    if rtt.get("count"):
        lines.append(("ping RTT min/median/p95/max",
                      "/".join(_num(rtt.get(k), ".1f") for k in ("min", "median", "p95", "max")) + " ms"))
        lines.append(("pings answered / lost", f"{rtt['count']} / {rtt.get('lost', 0)}"))
    fetch = summary.get("fetch_s", {})
    if fetch.get("count") or fetch.get("failed"):
        lines.append(("web fetch mean +- sd", f"{_num(fetch.get('mean'), '.3f')} +- {_num(fetch.get('stddev'), '.3f')} s"))
        lines.append(("web fetch median/p95/max",
                      "/".join(_num(fetch.get(k), ".3f") for k in ("median", "p95", "max")) + " s"))
        lines.append(("web fetches ok / failed", f"{fetch['count']} / {fetch.get('failed', 0)}"))
    for link, q in summary.get("queue", {}).items():
        lines.append((f"queue {link} mean/max", f"{_num(q.get('mean_pkts'), '.1f')}/{_num(q.get('max_pkts'), 'd')} packets"))
        by_reason = q.get("drops_by_reason")
        reasons = f" ({', '.join(f'{r} {n}' for r, n in by_reason.items())})" if by_reason else ""
        lines.append((f"queue {link} drops", _num(q.get("drops"), "d") + reasons))
        if q.get("marks"):
            lines.append((f"queue {link} CE marks", ", ".join(f"{r} {n}" for r, n in q["marks"].items())))
    return lines


def summary_table(columns: list[tuple[str, dict[str, Any]]]) -> str:
    """Summaries side by side: one column per (heading, summary)."""
    per_column = [dict(summary_lines(summary)) for _, summary in columns]
    labels = list(dict.fromkeys(label for col in per_column for label in col))
    heads = [heading for heading, _ in columns]
    width = max([len(label) for label in labels] + [0])
    widths = [max([len(h)] + [len(col.get(label, "-")) for label in labels]) for h, col in zip(heads, per_column)]
    out = ["  ".join([" " * width] + [h.ljust(w) for h, w in zip(heads, widths)]).rstrip()]
    for label in labels:
        cells = [col.get(label, "-").ljust(w) for col, w in zip(per_column, widths)]
        out.append("  ".join([label.ljust(width)] + cells).rstrip())
    return "\n".join(out)


def headline(summary: dict[str, Any]) -> str:
    """One line of a run's main numbers, for a sweep's log of finished runs."""
    parts = []
    for name, flow in summary.get("flows", {}).items():
        parts.append(f"{name} {_num(flow.get('goodput_mbps'), '.2f')} Mbit/s")
    rtt = summary.get("rtt_ms", {})
    if rtt.get("count"):
        parts.append(f"RTT median {_num(rtt.get('median'), '.1f')} p95 {_num(rtt.get('p95'), '.1f')} ms")
    fetch = summary.get("fetch_s", {})
    if fetch.get("count"):
        parts.append(f"fetch mean {_num(fetch.get('mean'), '.2f')} s")
    for link, q in summary.get("queue", {}).items():
        parts.append(f"queue {link} mean {_num(q.get('mean_pkts'), '.1f')} pkts, {_num(q.get('drops'), 'd')} drops")
    return "; ".join(parts) or "no measurements"
