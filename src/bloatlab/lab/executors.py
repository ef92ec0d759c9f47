"""Executors: where a sweep's runs run. One interface; the sweep engine (sweep.py) hands an
executor its pending jobs and records each result as it comes back.

    local   one run after another, in this process, on this machine (the default)

A cluster executor (Ray) is another implementation of the same interface, chosen by name.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from bloatlab.errors import SpecError

Tick = Callable[[float], None]  # told the seconds into a run, for a progress display


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


@dataclass(frozen=True)
class Job:
    """One run of a sweep: a point's values, its repetition, the directory it writes."""

    values: dict[str, Any]
    rep: int
    run_dir: Path
    label: str  # the point's, for messages


# What does one job: run_one(values, rep, run_dir, tick) -> RunResult.
RunOne = Callable[[dict[str, Any], int, Path, Tick], RunResult]


@dataclass(frozen=True)
class Done:
    job: Job
    result: RunResult
    seconds: float
    error: BaseException | None = None  # what the run raised, if it failed that way


class Executor(ABC):
    name: ClassVar[str]

    @abstractmethod
    def run(self, run_one: RunOne, jobs: Sequence[Job], tick_for: Callable[[int, Job], Tick]) -> Iterator[Done]:
        """Run the jobs and yield each as it ends. tick_for(i, job) gives the i-th job (from 1)
        its progress callback. The sweep stops early by closing the iterator."""


class LocalExecutor(Executor):
    """Each job in turn, in this process: runs never share the machine."""

    name = "local"

    def run(self, run_one: RunOne, jobs: Sequence[Job], tick_for: Callable[[int, Job], Tick]) -> Iterator[Done]:
        for i, job in enumerate(jobs, 1):
            tick = tick_for(i, job)
            started = time.monotonic()
            error = None
            try:
                result = run_one(dict(job.values), job.rep, job.run_dir, tick)
            except KeyboardInterrupt:
                result = RunResult(False, {}, "interrupted")
            except BaseException as e:  # recorded; the sweep stops and reports what it has
                result, error = RunResult(False, {}, f"failed: {e}"), e
            yield Done(job, result, time.monotonic() - started, error)


EXECUTORS: dict[str, type[Executor]] = {e.name: e for e in (LocalExecutor,)}


def executor(name: str = "local") -> Executor:
    """The executor called `name`."""
    if name not in EXECUTORS:
        raise SpecError(f"{name!r} is not an executor; choose one of: {', '.join(EXECUTORS)}", field="executor")
    return EXECUTORS[name]()
