"""The one reader of results: a run's directory and a sweep's (docs/results.md, docs/sweeps.md).

Plots, reports, the aggregate, comparisons and your own notebooks all read through it, as
Flent reads every data file through its ResultSet:

    import bloatlab
    run = bloatlab.load_run("results/cs244-maxq100-20261121-101500")
    run.summary.rtt_ms.median               # summary.json, as its record (run.summary.to_dict(): the JSON)
    run.ping                                # DataFrame: t_s, probe, rtt_ms
    run.cwnd[run.cwnd.flow == "bulk"]        # t_s, flow, cwnd_pkts, ssthresh_pkts, srtt_ms
    sweep = bloatlab.load_sweep("results/qlen")
    sweep.metrics()                         # one row per complete run: its point, rep and every number
    sweep.series("ping")                    # every complete run's pings, with its point and rep

A series that is missing or damaged reads as an empty frame; `run.read_series(name).problem`
says why, in words the plots and the report show.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bloatlab import proc
from bloatlab.errors import BloatlabError
from bloatlab.results.files import SERIES_COLUMNS, SERIES_KEYS, SERIES_LATER_COLUMNS
from bloatlab.results.summary import Summary, summary_from_json
from bloatlab.testbed.datapath_stats import finite_number

# Summary leaves that describe the run rather than measure it.
NOT_METRICS = {"complete", "duration_s"}
SWEEP_FORMAT = "bloatlab-sweep/1"


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list; none of anything else."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# What a workload of run.json's spec holds (model.Workload and its kinds' to_dict): the type of
# each key a reader takes, those of the first line always there.
_WORKLOAD_KEYS: dict[str, tuple[type, ...]] = {"name": (str,), "kind": (str,), "start_ns": (int,), "stop_ns": (int,)}
_WORKLOAD_OPTIONAL: dict[str, tuple[type, ...]] = {
    "src": (str,), "dst": (str,), "server": (str,), "client": (str,), "dscp": (int,), "interval_ns": (int,),
    "cc": (str, type(None)), "ecn": (str, type(None))}


def _workload_problem(w: Any) -> str | None:
    """What is wrong with a workload of run.json, in words; None when nothing is."""
    if not isinstance(w, dict):
        return "is not an object"
    for key, kinds in (*_WORKLOAD_KEYS.items(), *((k, t) for k, t in _WORKLOAD_OPTIONAL.items() if k in w)):
        value = w.get(key)
        if not isinstance(value, kinds) or isinstance(value, bool):
            return f"has {key} {json.dumps(value, default=str)[:40]}, not {' or '.join(k.__name__ for k in kinds)}"
        if key.endswith("_ns") and not 0 <= value < 2**63:  # nanoseconds as the spec holds them
            return f"has {key} {value}, not a time in ns"
    return None


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long, from a hand-edited sweep.json: no run there
        return False


def dig(value: Any, *keys: str) -> Any:
    """value[k1][k2]..., or None where a level is missing or not an object."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def flatten(doc: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every numeric leaf (not a boolean) of a summary's JSON (its to_dict), named by its dotted path."""
    out: dict[str, float] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and name not in NOT_METRICS:
            if (number := finite_number(value)) is not None:
                out[name] = number
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except RecursionError:  # arrays nested beyond what the decoder follows: as unreadable as bad JSON
        raise ValueError("JSON nested too deeply to read") from None


def read_summary(run_dir: Path, kind: str | None = None) -> Summary | None:
    """summary.json as its record, a nic run's (run.json's and sweep.json's kind "nic") or any
    other run's; None when it is missing or damaged."""
    try:
        doc = _read_json(Path(run_dir) / "summary.json")
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    try:
        return summary_from_json(doc, kind)
    except (AttributeError, TypeError, ValueError):  # a section that is not what summary.json holds there
        return None


# Series ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Series:
    """One series file as read: its rows, or why there are none."""

    name: str  # the file's stem: "ping"
    frame: pd.DataFrame  # numbers as floats (NaN where a cell is empty), the key column as text
    problem: str | None = None  # "series/ping.csv is missing", "... has no rows"
    skipped: int = 0  # rows dropped because a cell that should hold a number did not
    rows: int = 0  # rows in the file

    @property
    def warning(self) -> str | None:
        """What a reader should be told besides a problem: rows that were skipped."""
        if self.skipped and not self.problem:
            return f"series/{self.name}.csv: skipped {self.skipped} of {self.rows} rows whose cells are not numbers"
        return None


def series_columns(name: str) -> tuple[tuple[str, ...], str | None]:
    """A series' numeric columns and the column that names what a row belongs to (flow, link,
    workload; None for one series of values)."""
    columns = SERIES_COLUMNS.get(name)
    key = SERIES_KEYS.get(name)
    return (tuple(c for c in columns if c != key) if columns else ()), key


def series_names(run_dir: Path) -> list[str]:
    """The series a run directory holds (the stems of series/*.csv)."""
    return sorted(p.stem for p in (Path(run_dir) / "series").glob("*.csv"))


def read_text(run_dir: Path, name: str) -> tuple[pd.DataFrame | None, str | None]:
    """series/NAME.csv with every cell as written (text; a short row's missing cells are None),
    or None and why it cannot be read."""
    path = Path(run_dir) / "series" / f"{name}.csv"
    try:
        with path.open(newline="") as f:
            # skipinitialspace: a hand-edited "t_s, rtt_ms" header still names its columns.
            rows = list(csv.reader(f, skipinitialspace=True))
    except FileNotFoundError:
        return None, f"series/{name}.csv is missing"
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        return None, f"series/{name}.csv is unreadable: {error}"
    if not rows or not rows[0]:
        return None, f"series/{name}.csv is empty (not even a header)"
    header = rows[0]
    width = len(header)
    cells = [row[:width] + [None] * (width - len(row)) for row in rows[1:]]
    return pd.DataFrame(cells, columns=header, dtype=object), None


# Cells pandas' number parser reads otherwise than pd.to_numeric ("true" as 1): a file that
# holds one, anywhere, takes the cell-by-cell path.
_WORDS = (b"true", b"false", b"nan")


def _read_plain(path: Path, key: str | None, wanted: tuple[str, ...]) -> pd.DataFrame | None:
    """The file with pandas' C parser, when it is plain (no quotes, every line as wide as the
    header, every wanted cell empty or a number); None sends it to the cell-by-cell reading,
    which gives the same frame for a plain file, ten times slower (a 60 s run's queue.csv:
    100k rows, 1.2 s)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    lowered = data.lower()
    # csv.writer ends lines with CRLF; a lone CR would be a line end to csv alone.
    if b'"' in data or data.count(b"\r") != data.count(b"\r\n") or any(w in lowered for w in _WORDS):
        return None
    header = data.split(b"\n", 1)[0].rstrip(b"\r").decode(errors="replace").split(",")
    header = [c.lstrip(" ") for c in header]
    needed = [*([key] if key else []), *wanted]
    if len(header) < 2 or len(set(header)) != len(header) or any(c not in header for c in needed):
        return None
    cells = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(cells == ord("\n"))
    if not data.endswith(b"\n"):
        ends = np.append(ends, len(data))
    commas = np.concatenate(([0], np.cumsum(cells == ord(","))))
    per_line = np.diff(commas[ends], prepend=0)
    if (per_line != len(header) - 1).any():  # a short, long or blank line
        return None
    try:
        frame = pd.read_csv(path, usecols=needed, dtype={c: (str if c == key else float) for c in needed},
                            keep_default_na=False, na_values=[""], skipinitialspace=True, index_col=False)
    except (ValueError, OSError, UnicodeDecodeError):
        return None
    if key:
        frame[key] = frame[key].fillna("").astype(str)
    return frame[[c for c in header if c in needed]]


def read_series(run_dir: Path, name: str, columns: tuple[str, ...] | None = None) -> Series:
    """series/NAME.csv with `columns` (default: every numeric column the format gives it) as
    numbers; a row whose such cell is not a number (an empty cell is NaN) is skipped."""
    known, key = series_columns(name)
    path = Path(run_dir) / "series" / f"{name}.csv"
    if columns is None and known and name in SERIES_LATER_COLUMNS:
        # The later columns a file has (an older run's lacks them): read with the rest.
        header = _header(path)
        later = tuple(c for c in SERIES_LATER_COLUMNS[name] if c in header)
        if later:
            columns = (*known, *later)
    if columns is not None or known:
        frame = _read_plain(path, key, columns if columns is not None else known)
        if frame is not None and not frame.empty:
            return Series(name, frame, None, 0, len(frame))
    return read_cells(run_dir, name, columns)


def _header(path: Path) -> list[str]:
    """The names in a CSV file's first line; none if it cannot be read."""
    try:
        with path.open(newline="") as f:
            return [c.strip() for c in next(csv.reader(f), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


def read_cells(run_dir: Path, name: str, columns: tuple[str, ...] | None = None) -> Series:
    """read_series cell by cell, for any file: what a damaged or hand-written file needs."""
    known, key = series_columns(name)
    text, problem = read_text(run_dir, name)
    if text is None:
        return Series(name, pd.DataFrame(), problem)
    if key is None and name not in SERIES_COLUMNS:  # a series of another kind: every column but the key
        key = next((c for c in text.columns if c in SERIES_KEYS.values()), None)
    wanted = columns if columns is not None else (known or tuple(c for c in text.columns if c != key))
    if key and key not in text.columns and name == "ping":  # bloatlab 0.2.0 wrote one probe, unnamed
        text.insert(1, key, "")
    lacking = [c for c in (*([key] if key else []), *wanted) if c not in text.columns]
    if lacking:
        return Series(name, pd.DataFrame(), f"series/{name}.csv has no column {', '.join(lacking)}")
    rows = len(text)
    if rows == 0:
        return Series(name, pd.DataFrame(columns=[*([key] if key else []), *wanted]), f"series/{name}.csv has no rows")
    typed = pd.DataFrame(index=text.index)
    keep = pd.Series(True, index=text.index)
    for column in wanted:
        cells = text[column]
        stripped = cells.where(cells.isna(), cells.astype(str).str.strip())
        numbers = pd.to_numeric(stripped.where(stripped != ""), errors="coerce")
        # A short row's missing cell (None) or a cell that is not a number: not this row.
        keep &= cells.notna() & ~(numbers.isna() & (stripped != ""))
        typed[column] = numbers.astype(float)
    if key:
        typed.insert(0, key, text[key].fillna("").astype(str))
    ordered = [c for c in text.columns if c in typed.columns]
    frame = typed.loc[keep, ordered].reset_index(drop=True)
    skipped = rows - len(frame)
    if frame.empty:
        return Series(name, frame, f"series/{name}.csv has no readable rows", skipped, rows)
    return Series(name, frame, None, skipped, rows)


# A run -------------------------------------------------------------------------------------

class Run:
    """A run's directory: run.json (meta), summary.json and its series."""

    def __init__(self, path: Path, meta: dict[str, Any], summary: Summary | None):
        self.path = Path(path)
        self.meta = meta
        self.summary = summary  # None when summary.json is missing or damaged
        self._series: dict[tuple[str, tuple[str, ...] | None], Series] = {}

    def __repr__(self) -> str:
        return f"<bloatlab run {self.name} at {self.path}{'' if self.complete else ' (incomplete)'}>"

    # What ran ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or self.path.name)

    @property
    def spec(self) -> dict[str, Any]:
        """The resolved experiment (run.json's "spec")."""
        spec = self.meta.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def params(self) -> dict[str, Any]:
        params = self.meta.get("params")
        return params if isinstance(params, dict) else {}

    @property
    def complete(self) -> bool:
        # A run.json without `complete` was never finished properly: do not vouch for it.
        return self.meta.get("complete") is True

    @property
    def incomplete_reason(self) -> str | None:
        return None if self.complete else _text(self.meta.get("incomplete_reason"))

    @property
    def duration_s(self) -> float:
        return finite_number(dig(self.meta, "spec", "duration_s")) or 0.0

    def flows(self, *kinds: str) -> list[str]:
        """The names of the run's flows of these kinds (bulk, udp, web)."""
        flows = self.meta.get("flows")
        return [n for n, f in flows.items() if dig(f, "kind") in kinds] if isinstance(flows, dict) else []

    def workloads(self) -> list[dict[str, Any]]:
        """The resolved spec's workloads (run.json's spec.workloads), each checked for what the
        readers of a workload take of it: a name and a kind, its start and stop in whole ns, its
        hosts, codepoint and interval where given. A BloatlabError (field DIR) names the first
        that is damaged; a run.json that holds no spec has none."""
        found = dig(self.meta, "spec", "workloads")
        if found is None:
            return []
        where = self.path / "run.json"
        if not isinstance(found, list):
            raise BloatlabError(f"{where}: spec.workloads is not a list; the file is damaged", field="DIR")
        for index, w in enumerate(found):
            if (problem := _workload_problem(w)) is not None:
                raise BloatlabError(f"{where}: spec.workloads[{index}] {problem}; the file is damaged", field="DIR")
        return found

    def has_workload(self, kind: str) -> bool:
        """Whether the spec has a workload of `kind`; True when run.json does not say."""
        workloads = dig(self.meta, "spec", "workloads")
        if not isinstance(workloads, list):
            return True
        return any(isinstance(w, dict) and w.get("kind") == kind for w in workloads)

    def probed_queues(self) -> list[str]:
        queues = dig(self.meta, "probes", "queue")
        return list(queues) if isinstance(queues, dict) else []

    def queue_limits_pkts(self) -> dict[str, int]:
        """Packet limit per link direction ("s0->h2"); directions limited in bytes have none."""
        limits = {}
        links = dig(self.meta, "spec", "topology", "links")
        for link in links if isinstance(links, list) else []:
            for which in ("forward", "reverse"):
                direction, packets = dig(link, which, "direction"), dig(link, which, "queue", "packets")
                if isinstance(direction, str) and isinstance(packets, int):
                    limits[direction] = packets
        return limits

    def metrics(self) -> dict[str, float]:
        """Every number of summary.json, by dotted name ("rtt_ms.median")."""
        return flatten(self.summary.to_dict()) if self.summary is not None else {}

    # What it measured ----------------------------------------------------------------------

    def series_names(self) -> list[str]:
        return series_names(self.path)

    def read_series(self, name: str, columns: tuple[str, ...] | None = None) -> Series:
        """A series with why it has no rows, if it has none (cached)."""
        cache_key = (name, columns)
        if cache_key not in self._series:
            self._series[cache_key] = read_series(self.path, name, columns)
        return self._series[cache_key]

    def series(self, name: str) -> pd.DataFrame:
        return self.read_series(name).frame

    @property
    def ping(self) -> pd.DataFrame:
        """t_s, probe, rtt_ms: every latency probe's round trips, ping's, irtt's and the
        responsiveness test's (series/ping.csv)."""
        return self.series("ping")

    @property
    def cwnd(self) -> pd.DataFrame:
        """t_s, flow, cwnd_pkts, ssthresh_pkts, srtt_ms (series/cwnd.csv)."""
        return self.series("cwnd")

    @property
    def queue(self) -> pd.DataFrame:
        """t_s, link, backlog_pkts, backlog_bytes, drops (series/queue.csv), and prob where the
        run wrote it (dualpi2's p', pie's p; empty for other disciplines)."""
        return self.series("queue")

    @property
    def fetches(self) -> pd.DataFrame:
        """t_s, seconds, workload, ok: every web fetch (series/fetch.csv)."""
        return self.series("fetch")

    @property
    def goodput(self) -> pd.DataFrame:
        """t_s, flow, mbps: each flow's goodput per interval as its receiver counted it
        (series/throughput.csv)."""
        return self.series("throughput")


def is_run(path: str | Path) -> bool:
    """Whether `path` holds a finished run's files (run.json and summary.json)."""
    return (Path(path) / "run.json").is_file() and (Path(path) / "summary.json").is_file()


def load_run(path: str | Path) -> Run:
    """The run in directory `path`; a BloatlabError (field DIR) when it holds none."""
    run_dir = Path(path)
    meta_path = run_dir / "run.json"
    try:
        meta = _read_json(meta_path)
    except (FileNotFoundError, NotADirectoryError):
        raise BloatlabError(f"{run_dir} is not a bloatlab run directory (no run.json)", field="DIR") from None
    except (OSError, ValueError) as error:  # ValueError: bad JSON or bad UTF-8
        raise BloatlabError(f"{meta_path} is unreadable: {error}", field="DIR") from None
    if not isinstance(meta, dict):
        raise BloatlabError(f"{meta_path} is not a JSON object", field="DIR")
    return Run(run_dir, meta, read_summary(run_dir, meta.get("kind")))


# A sweep -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepRun:
    rep: int
    dir: Path  # absolute
    status: str  # pending, complete, incomplete, failed
    reason: str | None
    elapsed_s: float | None
    node: str | None = None  # the cluster node that ran it (docs/cluster.md)
    attempts: tuple[dict[str, Any], ...] = ()  # a cluster's tries that failed before: node, reason

    def load(self) -> Run:
        return load_run(self.dir)


@dataclass(frozen=True)
class Point:
    label: str
    values: dict[str, Any]
    runs: list[SweepRun]

    def complete_runs(self) -> list[SweepRun]:
        # The engine's word (sweep.json) and the files must agree: a complete run without its
        # run.json (deleted, or a copy of the sweep without run dirs) cannot be read.
        return [r for r in self.runs if r.status == "complete" and _is_file(r.dir / "run.json")]


@dataclass
class Sweep:
    """A sweep's directory: sweep.json (meta), its points and runs, and aggregate.json."""

    path: Path
    meta: dict[str, Any]
    points: list[Point]
    aggregate: dict[str, Any] | None = None  # aggregate.json, None when absent or unreadable
    aggregate_problem: str | None = None  # why it is None
    _runs: dict[Path, Run | None] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        runs = [r for p in self.points for r in p.runs]
        complete = sum(len(p.complete_runs()) for p in self.points)
        return (f"<bloatlab sweep {self.name} at {self.path}: {len(self.points)} points, "
                f"{complete} of {len(runs)} runs complete>")

    @property
    def status(self) -> str:
        """sweep.json's status (running, complete, incomplete), except that a sweep whose process
        is gone while it says running was stopped outright (killed, crashed): "stopped"."""
        status = str(self.meta.get("status") or "unknown")
        if status == "running" and proc.owner_alive(self.meta.get("owner")) is False:
            return "stopped"
        return status

    @classmethod
    def from_document(cls, path: Path, meta: dict[str, Any]) -> Sweep:
        """The sweep that sweep.json's document `meta` describes, rooted at `path`."""
        path = Path(path)
        points = []
        for p in _dicts(meta.get("points")):
            # A value not of its type (a hand-edited sweep.json) reads as absent: the run's place in
            # the list for its rep, pending for its status, none for the rest.
            runs = [SweepRun(rep=r["rep"] if _whole(r.get("rep")) else i,
                             dir=path / str(r.get("dir") or f"{p.get('label')}/rep{i}"),
                             status=str(r.get("status") or "pending"), reason=_text(r.get("reason")),
                             elapsed_s=finite_number(r.get("elapsed_s")), node=_text(r.get("node")),
                             attempts=tuple(_dicts(r.get("attempts"))))
                    for i, r in enumerate(p.get("runs") if isinstance(p.get("runs"), list) else [], 1)
                    if isinstance(r, dict)]
            values = p.get("values") if isinstance(p.get("values"), dict) else {}
            values = {k: v for k, v in values.items() if not isinstance(v, (list, dict))}  # an axis's value is one
            points.append(Point(str(p.get("label") or "all"), values, runs))
        return cls(path, meta, points)

    @property
    def kind(self) -> str:
        return str(self.meta.get("kind") or "experiment")

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or self.path.name)

    def axis_label(self, name: str) -> str:
        """An axis in words for figures: its label and name ("queue size, packets (maxq)"), or its
        name where the sweep gave no label."""
        labels = self.meta.get("axis_labels")
        label = labels.get(name) if isinstance(labels, dict) else None
        return f"{label} ({name})" if isinstance(label, str) and label else name

    @property
    def axes(self) -> list[tuple[str, list[Any]]]:
        return [(str(a["name"]), a["values"] if isinstance(a.get("values"), list) else [])
                for a in _dicts(self.meta.get("axes")) if "name" in a]

    def metric(self, point: Point, name: str) -> dict[str, Any] | None:
        """aggregate.json's statistics of one metric at one point (matched by label)."""
        for p in _dicts((self.aggregate or {}).get("points")):
            if p.get("label") == point.label:
                stats = dig(p, "metrics", name)
                return stats if isinstance(stats, dict) else None
        return None

    def metric_names(self) -> list[str]:
        """Every metric aggregate.json has, in order of first appearance."""
        names: dict[str, None] = {}
        for p in _dicts((self.aggregate or {}).get("points")):
            metrics = p.get("metrics")
            names.update(dict.fromkeys(metrics if isinstance(metrics, dict) else ()))
        return list(names)

    def run(self, sweep_run: SweepRun) -> Run | None:
        """One run of the sweep, read once; None when its directory holds no readable run."""
        if sweep_run.dir not in self._runs:
            try:
                self._runs[sweep_run.dir] = sweep_run.load()
            except BloatlabError:
                self._runs[sweep_run.dir] = None
        return self._runs[sweep_run.dir]

    def runs(self) -> Iterator[tuple[Point, SweepRun, Run]]:
        """Every complete run that can be read, with its point."""
        for point in self.points:
            for r in point.complete_runs():
                run = self.run(r)
                if run is not None:
                    yield point, r, run

    def first_run(self) -> Run | None:
        """Some run's run.json, complete ones first: where the machine and topology are read from."""
        ordered = [r for p in self.points for r in p.complete_runs()] + [r for p in self.points for r in p.runs]
        return next((run for r in ordered if (run := self.run(r)) is not None), None)

    def _identity(self, point: Point, r: SweepRun) -> dict[str, Any]:
        return {"label": point.label, **{name: point.values.get(name) for name, _ in self.axes}, "rep": r.rep}

    def metrics(self) -> pd.DataFrame:
        """One row per complete run: label, each axis, rep, then every number of its summary."""
        rows = [{**self._identity(point, r), **run.metrics()} for point, r, run in self.runs()]
        return pd.DataFrame(rows, columns=None if rows else ["label", *(n for n, _ in self.axes), "rep"])

    def series(self, name: str) -> pd.DataFrame:
        """One series of every complete run, each row with its run's label, axes and rep."""
        frames = []
        for point, r, run in self.runs():
            frame = run.series(name)
            if not frame.empty:
                ident = self._identity(point, r)
                frames.append(frame.assign(**ident)[[*ident, *frame.columns]])
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def is_sweep(path: str | Path) -> bool:
    return (Path(path) / "sweep.json").is_file()


def read_sweep_document(path: str | Path) -> dict[str, Any] | None:
    """sweep.json's document, None where there is none; a BloatlabError (field --out) when it
    is not a readable bloatlab sweep."""
    doc_path = Path(path) / "sweep.json"
    if not doc_path.exists():
        return None
    try:
        doc = _read_json(doc_path)
    except (OSError, ValueError) as e:
        raise BloatlabError(f"{doc_path} cannot be read ({e}); remove it or choose another --out",
                            field="--out") from None
    if not isinstance(doc, dict) or doc.get("format") != SWEEP_FORMAT:
        raise BloatlabError(f"{doc_path} is not a bloatlab sweep; choose another --out", field="--out")
    return doc


def load_sweep(path: str | Path) -> Sweep:
    """The sweep in directory `path` with its aggregate; a BloatlabError (field DIR) when it holds none."""
    out = Path(path)
    doc_path = out / "sweep.json"
    try:
        meta = _read_json(doc_path)
    except (FileNotFoundError, NotADirectoryError):
        raise BloatlabError(f"{out} is not a bloatlab sweep directory (no sweep.json)", field="DIR") from None
    except (OSError, ValueError) as error:
        raise BloatlabError(f"{doc_path} is unreadable: {error}", field="DIR") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("points"), list):
        raise BloatlabError(f"{doc_path} has no list of points", field="DIR")
    sweep = Sweep.from_document(out, meta)
    try:
        aggregate = _read_json(out / "aggregate.json")
        if isinstance(aggregate, dict):
            sweep.aggregate = aggregate
        else:
            sweep.aggregate_problem = "aggregate.json is not a JSON object"
    except FileNotFoundError:
        sweep.aggregate_problem = "aggregate.json is missing"
    except (OSError, ValueError) as error:
        sweep.aggregate_problem = f"aggregate.json is unreadable: {error}"
    return sweep
