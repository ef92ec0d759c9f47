"""The sweep engine (docs/sweeps.md): the cross product of parameter axes, each point run
`repeat` times, each run in OUT/LABEL/repK; sweep.json kept current after every run so that
`--resume` can skip what is done; then the aggregate, the series export, the comparison
plots and the report over the complete runs.

What a run is belongs to the caller (`run_one`): an emulated experiment, or a real
interface's measurement (`bloatlab nic`). The engine only orders, records and summarises.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import BloatlabError
from .progress import Progress
from .results import machine
from .state import process_alive, process_starttime

FORMAT = "bloatlab-sweep/1"
NO_AXES_LABEL = "all"


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Any, ...]


@dataclass
class RunResult:
    complete: bool
    summary: dict[str, Any]
    reason: str | None = None  # why the run is not complete
    warnings: list[str] = field(default_factory=list)
    stop: bool = False  # a stop signal came, maybe only after the run had measured everything

    @property
    def interrupted(self) -> bool:
        return self.stop or (self.reason or "").startswith("interrupted")


@dataclass
class SweepOutcome:
    out: Path
    complete: bool
    interrupted: bool
    runs: int  # runs in the sweep
    done: int  # complete runs
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def tell(self, runs_are: str = "") -> int:
        """Prints the warnings and where everything is; returns the command's exit status."""
        for warning in self.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        extra = f"; {runs_are}" if runs_are else ""
        print(f"\nresults: {self.out}/ ({self.done} of {self.runs} runs complete{extra})")
        print("  aggregate.csv, aggregate.json   mean, sd, median, 95% CI per point (docs/sweeps.md)")
        print("  series.csv.gz                   every series of every run, long format")
        figures = [p for p in self.files if p.parent.name == "plots" and p.suffix == ".png"]
        if figures:
            print(f"  plots/                          {len(figures)} comparison figures (compare-*.png)")
        report = self.out / "report.html"
        if report.exists():
            print(f"  report.html                     everything above on one page: {report.resolve()}")
        if self.interrupted:
            print(f"bloatlab: sweep interrupted; finish it with the same command and --resume --out {self.out}",
                  file=sys.stderr)
            return 130
        if not self.complete:
            print(f"bloatlab: {self.runs - self.done} run(s) incomplete; --resume --out {self.out} runs them again",
                  file=sys.stderr)
            return 1
        return 0


# Points, labels, the sweep document ---------------------------------------------------------

def label(values: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items()) or NO_AXES_LABEL


def points(axes: list[Axis]) -> list[dict[str, Any]]:
    """The cross product, the first axis varying slowest."""
    return [dict(zip([a.name for a in axes], combo)) for combo in itertools.product(*(a.values for a in axes))]


def run_dir_name(values: dict[str, Any], rep: int) -> str:
    return f"{label(values)}/rep{rep}"


def new_document(*, kind: str, name: str, source: str, axes: list[Axis], repeat: int,
                 fixed: dict[str, str], command: list[str] | None = None,
                 fingerprint: str | None = None) -> dict[str, Any]:
    now = _now()
    return {
        "format": FORMAT, "kind": kind, "name": name, "source": source, "fingerprint": fingerprint,
        "command": command,
        "axes": [{"name": a.name, "values": list(a.values)} for a in axes],
        "repeat": repeat, "fixed": fixed, "created": now, "updated": now, "status": "running",
        "machine": machine(),
        "points": [{"label": label(v), "values": v,
                    "runs": [{"rep": k, "dir": run_dir_name(v, k), "status": "pending", "reason": None,
                              "elapsed_s": None} for k in range(1, repeat + 1)]}
                   for v in points(axes)],
    }


def read_document(out: Path) -> dict[str, Any] | None:
    path = out / "sweep.json"
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BloatlabError(f"{path} cannot be read ({e}); remove it or choose another --out", field="--out") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BloatlabError(f"{path} is not a bloatlab sweep; choose another --out", field="--out")
    return doc


def write_document(out: Path, doc: dict[str, Any]) -> None:
    doc["updated"] = _now()
    tmp = out / "sweep.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(out / "sweep.json")


def _now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


_IDENTITY = ("kind", "name", "source", "fingerprint", "axes", "repeat", "fixed")


def check_out(out: Path, resume: bool) -> dict[str, Any] | None:
    """What --out and --resume allow, checked before anything is changed; the sweep there, if any."""
    old = read_document(out)
    if old is None:
        if resume:
            raise BloatlabError(f"{out} holds no sweep to resume (no sweep.json); drop --resume to start it",
                                field="--resume")
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise BloatlabError(f"{out} exists and is not empty; choose another --out or remove it", field="--out")
    elif not resume:
        raise BloatlabError(f"{out} already holds a sweep; add --resume to finish it, or choose another --out",
                            field="--out")
    else:
        owner = old.get("owner") or {}
        if old.get("status") == "running" and owner.get("pid") and process_alive(owner["pid"], owner.get("starttime")):
            raise BloatlabError(f"{out} is being run by another bloatlab (pid {owner['pid']}); wait for it or "
                                "stop it with Ctrl-C", field="--resume")
    return old


def _prepare(out: Path, fresh: dict[str, Any], resume: bool) -> dict[str, Any]:
    """The document to run from: a new one, or (with resume) the one in `out`, checked to be
    the same sweep; runs that are not complete are removed so they run again."""
    old = check_out(out, resume)
    if old is None:
        out.mkdir(parents=True, exist_ok=True)
        return fresh
    if old.get("fingerprint") != fresh.get("fingerprint"):
        raise BloatlabError(f"{out} holds a sweep of another version of {fresh['source']} (its text changed "
                            "since); run the changed spec into another --out", field="--resume")
    for key in _IDENTITY:
        if json.dumps(old.get(key), sort_keys=True) != json.dumps(fresh.get(key), sort_keys=True):
            raise BloatlabError(f"{out} holds another sweep ({key} was {json.dumps(old.get(key))}, now "
                                f"{json.dumps(fresh.get(key))}); resume it with the same arguments, or choose "
                                "another --out", field="--resume")
    for point in old["points"]:
        for r in point["runs"]:
            run_dir = out / r["dir"]
            if r["status"] == "complete" and (run_dir / "summary.json").exists():
                continue
            if run_dir.exists():
                shutil.rmtree(run_dir)
            r.update(status="pending", reason=None, elapsed_s=None)
    old["status"] = "running"
    return old


# Running --------------------------------------------------------------------------------

def run_sweep(out: Path, *, kind: str, name: str, source: str, axes: list[Axis], repeat: int,
              fixed: dict[str, str], run_one: Callable[[dict[str, Any], int, Path, Callable[[float], None]], RunResult],
              estimate_s: float, headline: Callable[[dict[str, Any]], str], resume: bool = False,
              progress: bool = True, svg: bool = False, command: list[str] | None = None,
              fingerprint: str | None = None, stream=None) -> SweepOutcome:
    """Runs every pending run of the sweep in `out`, then writes the aggregate, the series
    export, plots and report. run_one(values, rep, run_dir, tick) does one run into run_dir,
    calling tick(seconds into the run) as it goes; estimate_s is a run's expected length.
    fingerprint (a hash of the spec's text) keeps --resume from mixing two versions of a spec."""
    stream = stream if stream is not None else sys.stdout
    fresh = new_document(kind=kind, name=name, source=source, axes=axes, repeat=repeat, fixed=fixed,
                         command=command, fingerprint=fingerprint)
    doc = _prepare(out, fresh, resume)
    pid = os.getpid()
    doc["owner"] = {"pid": pid, "starttime": process_starttime(pid)}  # so a second --resume waits its turn
    todo = [(p, r) for p in doc["points"] for r in p["runs"] if r["status"] == "pending"]
    total = sum(len(p["runs"]) for p in doc["points"])
    skipped = total - len(todo)
    if skipped:
        print(f"resuming {out}: {skipped} of {total} runs already complete, {len(todo)} to run", file=stream)
    write_document(out, doc)

    overhead_s: list[float] = []  # what a run took beyond the estimate, learnt as runs finish
    elapsed_done = 0.0
    bar = Progress(len(todo) * estimate_s, f"sweep {name}") if progress and todo else None
    interrupted = False
    failure: BaseException | None = None
    try:
        for i, (point, run) in enumerate(todo, 1):
            left_runs = len(todo) - i + 1
            per_run = estimate_s + (sum(overhead_s) / len(overhead_s) if overhead_s else 0.0)
            note = f"run {i}/{len(todo)} {point['label']} rep {run['rep']}"

            def tick(seconds: float, note: str = note, per_run: float = per_run, left_runs: int = left_runs) -> None:
                if bar is not None:
                    bar.total_s = max(elapsed_done + left_runs * per_run, elapsed_done + seconds + 1e-9)
                    bar.update(elapsed_done + min(seconds, per_run), note)

            started = time.monotonic()
            try:
                result = run_one(dict(point["values"]), run["rep"], out / run["dir"], tick)
            except KeyboardInterrupt:
                result = RunResult(False, {}, "interrupted")
            except BaseException as error:  # recorded, then the sweep stops and reports what it has
                result = RunResult(False, {}, f"failed: {error}")
                failure = error
            took = time.monotonic() - started
            elapsed_done += took
            overhead_s.append(took - estimate_s)
            run.update(status="complete" if result.complete else "failed" if failure else "incomplete",
                       reason=result.reason, elapsed_s=round(took, 1))
            write_document(out, doc)
            if bar is not None:
                bar.finish()
            status = headline(result.summary) if result.complete else f"INCOMPLETE: {result.reason}"
            print(f"[{skipped + i}/{total}] {point['label']} rep {run['rep']}: {status} ({took:.0f} s)",
                  file=stream, flush=True)
            for warning in result.warnings:
                print(f"warning: {point['label']} rep {run['rep']}: {warning}", file=sys.stderr)
            if result.interrupted or failure is not None:
                interrupted = result.interrupted
                break
    except KeyboardInterrupt:  # between runs: nothing is half done
        interrupted = True
        if bar is not None:
            bar.finish()
    done = sum(1 for p in doc["points"] for r in p["runs"] if r["status"] == "complete")
    doc["status"] = "complete" if done == total else "incomplete"
    write_document(out, doc)
    outcome = SweepOutcome(out, done == total, interrupted, total, done)
    finish(out, doc, outcome, svg=svg)
    if failure is not None:
        raise failure
    return outcome


def finish(out: Path, doc: dict[str, Any], outcome: SweepOutcome, svg: bool = False) -> None:
    """The aggregate, the series export, the comparison plots and the report, over the
    complete runs."""
    from .aggregate import write_aggregate, write_series_export
    from .report import write_report
    from .sweep_plots import plot_sweep

    write_aggregate(doc, out)
    write_series_export(doc, out)
    outcome.files += [out / "aggregate.csv", out / "aggregate.json", out / "series.csv.gz"]
    try:
        plotted = plot_sweep(out, svg=svg)
        outcome.files += plotted.files
        outcome.warnings += plotted.warnings
        outcome.files.append(write_report(out))
    except Exception as e:  # the runs and the aggregate are written; `bloatlab report` retries
        outcome.warnings.append(f"no figures or report: {e}; bloatlab report {out} retries")
