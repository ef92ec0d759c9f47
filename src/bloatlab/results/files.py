"""The files of a run's directory (docs/results.md): their names, the series' columns, and
how they are written (atomically, so a reader never sees half a file).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SERIES_COLUMNS = {
    "ping": ("t_s", "probe", "rtt_ms"),
    "cwnd": ("t_s", "flow", "cwnd_pkts", "ssthresh_pkts", "srtt_ms"),
    "queue": ("t_s", "link", "backlog_pkts", "backlog_bytes", "drops"),
    "fetch": ("t_s", "seconds", "workload", "ok"),
    "throughput": ("t_s", "flow", "mbps"),
}
# Columns written after a series' own, that runs of earlier versions lack: read where a file
# has them. queue.csv's prob: the probability of the direction's discipline (dualpi2's p',
# pie's), empty where it has none.
SERIES_LATER_COLUMNS = {"queue": ("prob",)}
# Written with six significant digits, not six decimals: PIE's probability lives below 1e-6.
SIGNIFICANT_COLUMNS = {"prob"}
# The column that says which flow, link or workload a row belongs to; a series without one is
# a single series of values.
SERIES_KEYS = {"ping": "probe", "cwnd": "flow", "queue": "link", "fetch": "workload", "throughput": "flow"}


class RunDir:
    """RUN/ with raw/, series/ and plots/ in it, and pcap/ when the run captured packets."""

    def __init__(self, path: Path):
        self.path = path
        self.raw = path / "raw"
        self.series = path / "series"
        self.plots = path / "plots"
        self.pcap = path / "pcap"

    def holds_run(self) -> bool:
        """Whether a run was written here already (its run.json, complete or not)."""
        return (self.path / "run.json").exists()

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

    def update_json(self, name: str, keys: dict[str, Any]) -> Path:
        """Add or replace top-level keys of the JSON file `name` (what a sweep learns of a run
        after the run wrote it: the cluster node that ran it)."""
        doc = json.loads((self.path / name).read_text())
        doc.update(keys)
        return self.write_json(name, doc)

    def write_series(self, name: str, rows: Iterable[Sequence[Any]]) -> Path:
        path = self.series / f"{name}.csv"
        header = (*SERIES_COLUMNS[name], *SERIES_LATER_COLUMNS.get(name, ()))
        formats = [".6g" if column in SIGNIFICANT_COLUMNS else ".6f" for column in header]
        with open(path, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(header)
            out.writerows(["" if v is None else f"{v:{fmt}}" if isinstance(v, float) else v for v, fmt in zip(row, formats)]
                          for row in rows)
        return path


def _jsonable(value: Any) -> Any:
    if type(value).__module__ == "numpy" and hasattr(value, "item"):  # a numpy scalar, numpy not imported here
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
