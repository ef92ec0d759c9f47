"""Statistics over a sweep's repetitions (docs/sweeps.md): every numeric leaf of every complete
run's summary.json, per sweep point, as mean, sd, median, min, max and a Student-t 95%
confidence interval of the mean; written as aggregate.json and aggregate.csv. Also the long
series export, series.csv.gz, that pandas reads in one call. Runs are read through
bloatlab.results.reader.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bloatlab.results.reader import Sweep, flatten, read_summary, read_text, series_columns, series_names
from bloatlab.results.stats import CONFIDENCE, STATS, describe_sample

CSV_STATS = ("n", *STATS)  # a metric's own n: runs where it was null do not count


def aggregate(sweep: dict[str, Any], root: Path) -> dict[str, Any]:
    """aggregate.json's document for the sweep described by `sweep` (sweep.json) under root."""
    read = Sweep.from_document(root, sweep)
    points = []
    for point in read.points:
        done = [r for r in point.runs if r.status == "complete"]
        # A summary that is gone or damaged: the run does not count.
        flats = [flatten(summary.to_dict()) for r in done
                 if (summary := read_summary(r.dir, sweep.get("kind"))) is not None]
        names = sorted({name for flat in flats for name in flat})
        metrics = {name: describe_sample([f[name] for f in flats if name in f]) for name in names}
        points.append({"label": point.label, "values": point.values, "n": len(flats),
                       "runs": [str(r.dir.relative_to(read.path)) for r in done], "metrics": metrics})
    return {"format": "bloatlab-aggregate/1", "axes": [name for name, _ in read.axes], "confidence": CONFIDENCE,
            "points": points}


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
    """(series, key, t_s, field, value) for every number in the run's series, as written."""
    for name in series_names(run_dir):
        text, _ = read_text(run_dir, name)
        if text is None or "t_s" not in text.columns:
            continue
        key = series_columns(name)[1]
        if key not in text.columns:  # another kind of series, or an old ping.csv without its probe column
            key = next((c for c in ("flow", "link", "workload") if c in text.columns), None)
        fields = [c for c in text.columns if c not in ("t_s", key)]
        for row in text.to_dict("records"):
            for field in fields:
                value = row[field]
                if isinstance(value, str) and value != "":
                    yield name, row[key] if key else "", row["t_s"], field, value


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
