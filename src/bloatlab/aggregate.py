"""Statistics over a sweep's repetitions (docs/sweeps.md): every numeric leaf of every complete
run's summary.json, per sweep point, as mean, sd, median, min, max and a Student-t 95%
confidence interval of the mean; written as aggregate.json and aggregate.csv. Also the long
series export, series.csv.gz, that pandas reads in one call.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

CONFIDENCE = 0.95
STATS = ("mean", "sd", "median", "min", "max", "ci95_low", "ci95_high")
CSV_STATS = ("n", *STATS)  # a metric's own n: runs where it was null do not count
# Leaves that describe the run rather than measure it.
NOT_METRICS = {"complete", "duration_s"}
# The column that says which flow, link or workload a series row belongs to.
SERIES_KEYS = ("flow", "link", "workload")


# Student's t -----------------------------------------------------------------------------

def t_two_sided_cdf(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with a whole number of degrees of freedom, by the finite
    trigonometric series of Abramowitz and Stegun 26.7.3-4 (exact, no special functions)."""
    if df < 1:
        raise ValueError("df must be at least 1")
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df == 1:
        return 2 * theta / math.pi
    if df % 2:  # odd: (2/pi)(theta + sin cos (1 + 2/3 cos^2 + 2.4/3.5 cos^4 + ...))
        term = total = 1.0
        for k in range(1, (df - 3) // 2 + 1):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + s * math.cos(theta) * total)
    term = total = 1.0  # even: sin (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ...)
    for k in range(1, (df - 2) // 2 + 1):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


def t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p (p > 0.5), by bisection on the exact distribution."""
    target = 2 * p - 1  # the two-sided mass inside [-t, t]
    lo, hi = 0.0, 1.0
    while t_two_sided_cdf(hi, df) < target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided_cdf(mid, df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * hi:
            break
    return (lo + hi) / 2


def describe_sample(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, mean, sd (n - 1), median, min, max and the 95% CI of the mean; sd and the CI are
    null below two values, everything but n is null with none."""
    n = len(values)
    out: dict[str, float | int | None] = {"n": n, **dict.fromkeys(STATS)}
    if n == 0:
        return out
    mean = statistics.fmean(values)
    out.update(mean=mean, median=statistics.median(values), min=min(values), max=max(values))
    if n >= 2:
        sd = statistics.stdev(values)
        half = t_quantile((1 + CONFIDENCE) / 2, n - 1) * sd / math.sqrt(n)
        out.update(sd=sd, ci95_low=mean - half, ci95_high=mean + half)
    return out


# Summaries -------------------------------------------------------------------------------

def flatten(summary: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every numeric leaf (not a boolean) of a summary, named by its dotted path."""
    out: dict[str, float] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and name not in NOT_METRICS:
            if math.isfinite(value):
                out[name] = float(value)
    return out


def aggregate(sweep: dict[str, Any], root: Path) -> dict[str, Any]:
    """aggregate.json's document for the sweep described by `sweep` (sweep.json) under root."""
    axes = [a["name"] for a in sweep["axes"]]
    points = []
    for point in sweep["points"]:
        done = [r for r in point["runs"] if r["status"] == "complete"]
        flats = []
        for r in done:
            try:
                flats.append(flatten(json.loads((root / r["dir"] / "summary.json").read_text())))
            except (OSError, ValueError):  # gone or damaged: the run does not count
                continue
        names = sorted({name for flat in flats for name in flat})
        metrics = {name: describe_sample([f[name] for f in flats if name in f]) for name in names}
        points.append({"label": point["label"], "values": point["values"], "n": len(flats),
                       "runs": [r["dir"] for r in done], "metrics": metrics})
    return {"format": "bloatlab-aggregate/1", "axes": axes, "confidence": CONFIDENCE, "points": points}


def write_aggregate(sweep: dict[str, Any], root: Path) -> dict[str, Any]:
    """Writes root/aggregate.json and root/aggregate.csv; returns the document."""
    doc = aggregate(sweep, root)
    _atomic_text(root / "aggregate.json", json.dumps(doc, indent=2) + "\n")
    names = sorted({m for p in doc["points"] for m in p["metrics"]})
    header = ["label", *doc["axes"], "n"] + [f"{m}.{s}" for m in names for s in CSV_STATS]
    tmp = root / "aggregate.csv.tmp"
    with open(tmp, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(header)
        for p in doc["points"]:
            row: list[Any] = [p["label"], *(p["values"].get(a) for a in doc["axes"]), p["n"]]
            for m in names:
                stats = p["metrics"].get(m, {})
                row += [_cell(stats.get(s)) for s in CSV_STATS]
            out.writerow(row)
    tmp.replace(root / "aggregate.csv")
    return doc


def _cell(value: Any) -> Any:
    return "" if value is None else repr(value) if isinstance(value, float) else value


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


# The long series export ------------------------------------------------------------------

def series_rows(run_dir: Path) -> Iterable[tuple[str, str, str, str, str]]:
    """(series, key, t_s, field, value) for every number in the run's series/*.csv."""
    for path in sorted((run_dir / "series").glob("*.csv")):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            if "t_s" not in columns:
                continue
            key = next((c for c in SERIES_KEYS if c in columns), None)
            fields = [c for c in columns if c not in ("t_s", key)]
            for row in reader:
                for name in fields:
                    if row.get(name) not in (None, ""):
                        yield path.stem, row[key] if key else "", row["t_s"], name, row[name]


def write_series_export(sweep: dict[str, Any], root: Path) -> Path:
    """root/series.csv.gz: every complete run's series in one long table."""
    axes = [a["name"] for a in sweep["axes"]]
    path = root / "series.csv.gz"
    tmp = root / "series.csv.gz.tmp"
    with gzip.open(tmp, "wt", newline="") as f:
        out = csv.writer(f)
        out.writerow(["label", *axes, "rep", "series", "key", "t_s", "field", "value"])
        for point in sweep["points"]:
            ident = [point["label"], *(point["values"].get(a) for a in axes)]
            for r in point["runs"]:
                if r["status"] == "complete":
                    for row in series_rows(root / r["dir"]):
                        out.writerow([*ident, r["rep"], *row])
    tmp.replace(path)
    return path
