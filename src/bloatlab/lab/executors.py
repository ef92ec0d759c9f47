"""Executors: where a sweep's runs run. One interface; the sweep engine (sweep.py) hands an
executor its pending jobs and records each result as it comes back.

    local     one run after another, in this process, on this machine (the default)
    parallel  runs side by side on this machine's cores: a sweep of simulated runs (ns-3) takes
              it instead of local, since each run's work is a process of its own that shares
              nothing on the machine
    processes emulated runs side by side, each in a child process of its own (a run owns its
              process's signal handlers): a sweep's --parallel, calibration's short runs

    cluster   runs on the nodes of a Ray cluster, one per node at a time (lab/cluster.py, chosen
              by --cluster ADDRESS; Ray is imported only then)
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor, as_completed
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from bloatlab.errors import SpecError

if TYPE_CHECKING:
    from bloatlab.results.summary import Summary

Tick = Callable[[float], None]  # told the seconds into a run, for a progress display


@dataclass
class RunResult:
    complete: bool
    summary: Summary | None  # None: the run wrote none
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
    node: str | None = None  # the cluster node that ran it (lab/cluster.py)
    attempts: list[dict[str, Any]] = field(default_factory=list)  # tries that failed before: node, reason


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
                result = RunResult(False, None, "interrupted")
            except BaseException as e:  # recorded; the sweep stops and reports what it has
                result, error = RunResult(False, None, f"failed: {e}"), e
            yield Done(job, result, time.monotonic() - started, error)


class ParallelExecutor(Executor):
    """As many jobs at once as the machine has cores, each in a thread of this process whose
    run does its work in a subprocess (ns-3's driver); results come back as runs end."""

    name = "parallel"

    def __init__(self, workers: int | None = None):
        self.workers = workers or os.cpu_count() or 1

    def run(self, run_one: RunOne, jobs: Sequence[Job], tick_for: Callable[[int, Job], Tick]) -> Iterator[Done]:
        def one(i: int, job: Job) -> Done:
            started = time.monotonic()
            try:
                return Done(job, run_one(dict(job.values), job.rep, job.run_dir, tick_for(i, job)),
                            time.monotonic() - started)
            except BaseException as e:
                return Done(job, RunResult(False, None, f"failed: {e}"), time.monotonic() - started, e)

        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="run")
        futures = [pool.submit(one, i, job) for i, job in enumerate(jobs, 1)]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:  # the sweep stopped early, or ended: what has not started never will
            pool.shutdown(wait=True, cancel_futures=True)


def _in_child(run_one: RunOne, values: dict[str, Any], rep: int, run_dir: Path) -> tuple[RunResult, float]:
    """The job's result and its own seconds (not the time it waited for a free process)."""
    started = time.monotonic()
    return run_one(values, rep, run_dir, lambda seconds: None), time.monotonic() - started


class ProcessExecutor(Executor):
    """Up to `workers` jobs at once, each in a fresh child process (spawned: no threads or
    handlers of this process come along); run_one must pickle (a module's function, or a
    functools.partial of one). A stop signal reaches the children too (one process group): each
    takes its own network down, and the pool waits for that."""

    name = "processes"

    def __init__(self, workers: int):
        self.workers = max(1, workers)

    def run(self, run_one: RunOne, jobs: Sequence[Job], tick_for: Callable[[int, Job], Tick]) -> Iterator[Done]:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"), max_tasks_per_child=1)
        started: dict[Any, tuple[Job, float]] = {}
        try:
            for i, job in enumerate(jobs, 1):
                tick_for(i, job)(0.0)
                started[pool.submit(_in_child, run_one, dict(job.values), job.rep, job.run_dir)] = (job, time.monotonic())
            for future in as_completed(started):
                job, t = started[future]
                try:
                    result, seconds = future.result()
                    done = Done(job, result, seconds)
                except Exception as e:  # the child's error, or the child died
                    done = Done(job, RunResult(False, None, f"failed: {e}"), time.monotonic() - t, e)
                yield done
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


# The executors a user chooses (--executor); ParallelExecutor is the sweep's own choice for simulations.
EXECUTORS: dict[str, type[Executor]] = {e.name: e for e in (LocalExecutor,)}


def executor(name: str = "local") -> Executor:
    """The executor called `name`."""
    if name not in EXECUTORS:
        raise SpecError(f"{name!r} is not an executor; choose one of: {', '.join(EXECUTORS)}", field="executor")
    return EXECUTORS[name]()
