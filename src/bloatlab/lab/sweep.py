"""The sweep engine (docs/sweeps.md): the cross product of parameter axes, each point run
`repeat` times, each run in OUT/LABEL/repK; sweep.json kept current after every run so that
`--resume` can skip what is done.

What a run is belongs to the caller (`run_one`): an emulated experiment, or a real
interface's measurement (`bloatlab nic`); where it runs, to the executor (executors.py); what
is made of the runs afterwards, to the caller's `finish` (bloatlab.analysis.report.finish_sweep). The engine
only orders and records.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bloatlab import proc
from bloatlab.errors import BloatlabError
from bloatlab.lab.executors import Executor, Job, LocalExecutor, RunOne, Tick
from bloatlab.lab.outcome import now
from bloatlab.progress import Progress
from bloatlab.results.reader import SWEEP_FORMAT, read_summary, read_sweep_document
from bloatlab.results.summary import Summary
from bloatlab.testbed.machine import machine

NO_AXES_LABEL = "all"


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Any, ...]
    label: str = ""  # what it is in a few words, for figures ("queue size, packets"); "" for none


@dataclass
class SweepOutcome:
    out: Path
    complete: bool
    interrupted: bool
    runs: int  # runs in the sweep
    done: int  # complete runs
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """What a sweep command's --json prints: where everything is, and how far it got."""
        def made(name: str) -> str | None:
            return str(self.out / name) if (self.out / name).exists() else None

        return {"kind": "sweep", "out": str(self.out), "complete": self.complete, "interrupted": self.interrupted,
                "runs": self.runs, "complete_runs": self.done, "warnings": self.warnings,
                "files": [str(p) for p in self.files], "sweep": made("sweep.json"),
                "aggregate": made("aggregate.json"), "report": made("report.html")}

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
                 fingerprint: str | None = None, link_backends: dict[str, str] | None = None) -> dict[str, Any]:
    created = now()
    return {
        "format": SWEEP_FORMAT, "kind": kind, "name": name, "source": source, "fingerprint": fingerprint,
        "command": command, "link_backends": link_backends,
        "axis_labels": {a.name: a.label for a in axes if a.label},
        "axes": [{"name": a.name, "values": list(a.values)} for a in axes],
        "repeat": repeat, "fixed": fixed, "created": created, "updated": created, "status": "running",
        "machine": machine(),
        "points": [{"label": label(v), "values": v,
                    "runs": [{"rep": k, "dir": run_dir_name(v, k), "status": "pending", "reason": None,
                              "elapsed_s": None} for k in range(1, repeat + 1)]}
                   for v in points(axes)],
    }


def write_document(out: Path, doc: dict[str, Any]) -> None:
    doc["updated"] = now()
    tmp = out / "sweep.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(out / "sweep.json")


_IDENTITY = ("kind", "name", "source", "fingerprint", "axes", "repeat", "fixed")


def check_out(out: Path, resume: bool) -> dict[str, Any] | None:
    """What --out and --resume allow, checked before anything is changed; the sweep there, if any."""
    old = read_sweep_document(out)
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
        if old.get("status") == "running" and proc.owner_alive(owner):
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
    # Its links' backends too, where it chose them: a resume on a machine that would choose
    # otherwise would mix two implementations in one comparison.
    keys = _IDENTITY + (("link_backends",) if old.get("link_backends") is not None else ())
    for key in keys:
        if json.dumps(old.get(key), sort_keys=True) != json.dumps(fresh.get(key), sort_keys=True):
            raise BloatlabError(f"{out} holds another sweep ({key} was {json.dumps(old.get(key))}, now "
                                f"{json.dumps(fresh.get(key))}); resume it with the same arguments, or choose "
                                "another --out", field="--resume")
    for point in old["points"]:
        for r in point["runs"]:
            run_dir = out / r["dir"]
            if r["status"] == "complete" and read_summary(run_dir, old.get("kind")) is not None:
                continue
            if run_dir.exists():
                shutil.rmtree(run_dir)
            r.update(status="pending", reason=None, elapsed_s=None)
            for key in ("node", "attempts"):  # of the attempt that did not finish
                r.pop(key, None)
    old["status"] = "running"
    return old


# Running --------------------------------------------------------------------------------

def run_sweep(out: Path, *, kind: str, name: str, source: str, axes: list[Axis], repeat: int,
              fixed: dict[str, str], run_one: RunOne, estimate_s: float, headline: Callable[[Summary | None], str],
              finish: Callable[[Path, dict[str, Any], SweepOutcome], None] | None = None,
              executor: Executor | None = None, resume: bool = False, progress: bool = True,
              command: list[str] | None = None, fingerprint: str | None = None,
              link_backends: dict[str, str] | None = None, stream=None) -> SweepOutcome:
    """Runs every pending run of the sweep in `out` on `executor` (the local one by default),
    keeping sweep.json current, then calls finish(out, document, outcome): the analysis of
    the complete runs. run_one(values, rep, run_dir, tick) does one run into run_dir, calling
    tick(seconds into the run) as it goes; estimate_s is a run's expected length.
    fingerprint (a hash of the spec's text) keeps --resume from mixing two versions of a spec;
    link_backends (the backend every point's links run on) goes into sweep.json."""
    stream = stream if stream is not None else sys.stdout
    executor = executor or LocalExecutor()
    fresh = new_document(kind=kind, name=name, source=source, axes=axes, repeat=repeat, fixed=fixed,
                         command=command, fingerprint=fingerprint, link_backends=link_backends)
    doc = _prepare(out, fresh, resume)
    pid = os.getpid()
    doc["owner"] = {"pid": pid, "starttime": proc.starttime(pid)}  # so a second --resume waits its turn
    pending = [(p, r) for p in doc["points"] for r in p["runs"] if r["status"] == "pending"]
    total = sum(len(p["runs"]) for p in doc["points"])
    skipped = total - len(pending)
    if skipped:
        print(f"resuming {out}: {skipped} of {total} runs already complete, {len(pending)} to run", file=stream)
    write_document(out, doc)

    entries = {out / r["dir"]: r for _, r in pending}
    jobs = [Job(dict(p["values"]), r["rep"], out / r["dir"], p["label"]) for p, r in pending]
    overhead_s: list[float] = []  # what a run took beyond the estimate, learnt as runs finish
    elapsed_done = 0.0
    bar = Progress(len(jobs) * estimate_s, f"sweep {name}") if progress and jobs else None

    def tick_for(i: int, job: Job) -> Tick:
        left_runs = len(jobs) - i + 1
        per_run = estimate_s + (sum(overhead_s) / len(overhead_s) if overhead_s else 0.0)
        note = f"run {i}/{len(jobs)} {job.label} rep {job.rep}"
        done_before = elapsed_done

        def tick(seconds: float) -> None:
            if bar is not None:
                bar.total_s = max(done_before + left_runs * per_run, done_before + seconds + 1e-9)
                bar.update(done_before + min(seconds, per_run), note)
        return tick

    interrupted = False
    failure: BaseException | None = None
    finished = 0
    results = executor.run(run_one, jobs, tick_for)
    try:
        for done in results:
            job, result = done.job, done.result
            finished += 1
            failure = failure or done.error
            elapsed_done += done.seconds
            overhead_s.append(done.seconds - estimate_s)
            entries[job.run_dir].update(status="complete" if result.complete else "failed" if done.error else "incomplete",
                                        reason=result.reason, elapsed_s=round(done.seconds, 1))
            if done.node is not None:  # a cluster's: where it ran, and the tries that failed before
                entries[job.run_dir].update(node=done.node, attempts=done.attempts)
            write_document(out, doc)
            if bar is not None:
                bar.finish()
            status = headline(result.summary) if result.complete else f"INCOMPLETE: {result.reason}"
            print(f"[{skipped + finished}/{total}] {job.label} rep {job.rep}: {status} ({done.seconds:.0f} s)",
                  file=stream, flush=True)
            for warning in result.warnings:
                print(f"warning: {job.label} rep {job.rep}: {warning}", file=sys.stderr)
            if result.interrupted or failure is not None:
                interrupted = result.interrupted
                break
    except KeyboardInterrupt:  # between runs: nothing is half done
        interrupted = True
        if bar is not None:
            bar.finish()
    finally:
        results.close()
    done_runs = sum(1 for p in doc["points"] for r in p["runs"] if r["status"] == "complete")
    doc["status"] = "complete" if done_runs == total else "incomplete"
    write_document(out, doc)
    outcome = SweepOutcome(out, done_runs == total, interrupted, total, done_runs)
    if finish is not None:
        finish(out, doc, outcome)
    if failure is not None:
        raise failure
    return outcome
