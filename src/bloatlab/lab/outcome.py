"""What a run hands back (Outcome), where it goes by default, and the writing every kind of run
ends with: its record into its files, plots and report. Light to import: the plotting is
imported when a run writes (a simulated run imports it while its simulation runs)."""

from __future__ import annotations

import datetime as dt
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bloatlab.experiment.record import RunRecord
    from bloatlab.results.files import RunDir
    from bloatlab.results.summary import RunSummary
    from bloatlab.specs.model import Experiment

# What write_outcome uses: imported ahead by a run that has time to spare (preload_writers).
WRITERS = ("bloatlab.analysis.plots", "bloatlab.analysis.report", "bloatlab.results.writer")


def preload_writers() -> None:
    """Import what write_outcome uses, and warm the plotting, while a run still runs: 2-3 s of
    a run's writing otherwise comes after its experiment. Any failure is left for the writing
    itself to meet and report."""
    try:
        for module in WRITERS:
            importlib.import_module(module)
        from bloatlab.analysis.plots import warm
        warm()
    except Exception:
        pass


@dataclass
class Outcome:
    run_dir: Path
    summary: RunSummary
    complete: bool
    reason: str | None = None  # why it is incomplete
    warnings: list[str] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    interrupted: bool = False  # a stop signal came (maybe only while cleaning up)
    report: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """What `bloatlab run --json` prints: where everything is, and the summary."""
        return {"kind": "run", "run_dir": str(self.run_dir), "complete": self.complete, "reason": self.reason,
                "interrupted": self.interrupted, "summary": self.summary.to_dict(), "warnings": self.warnings,
                "plots": [str(p) for p in self.plots], "report": str(self.report) if self.report else None}


def now() -> str:
    """The wall-clock time, ISO 8601, as run.json records it."""
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


def default_out(experiment: Experiment, root: Path = Path("results")) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    tags = "-".join(f"{k}{v}" for k, v in experiment.params.items() if k in experiment.tags)
    return root / "-".join(x for x in (experiment.name, tags, stamp) if x)


def write_outcome(run_dir: RunDir, record: RunRecord, *, svg: bool = False, plots: bool = True) -> Outcome:
    """A run's record into its files, then (with `plots`) its plots and report.html."""
    from bloatlab.analysis.plots import plot_run
    from bloatlab.analysis.report import write_report
    from bloatlab.results.writer import write_run

    summary = write_run(run_dir, record)
    outcome = Outcome(run_dir.path, summary, record.complete, record.incomplete_reason,
                      warnings=record.errors + record.warnings)
    if plots:
        result = plot_run(run_dir.path, svg=svg)
        outcome.plots = result.files
        outcome.warnings += result.warnings
        try:
            outcome.report = write_report(run_dir.path, result)
        except Exception as e:  # the measurements are written; a report can be made later
            outcome.warnings.append(f"report.html not written ({e}); bloatlab report {run_dir.path} retries")
    return outcome
