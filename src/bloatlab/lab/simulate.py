"""A simulated run: the experiment in ns-3 rather than in namespaces (`backend = "ns3"`).

    check the spec         sim.scenario.check: what ns-3 cannot model, named
    build the driver       sim.driver.build: once, then cached
    simulate               the driver writes raw/ns3/ and the probed queues' logs in raw/qlog/
    write the results      sim.outputs.collect, then the same writer, plots and report

It needs no root and builds nothing on the machine: two runs at once never meet.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from pathlib import Path

from bloatlab.errors import BloatlabError
from bloatlab.experiment.record import RunRecord
from bloatlab.interrupts import Interrupts
from bloatlab.lab.outcome import Outcome, now, preload_writers, write_outcome
from bloatlab.results.files import RunDir
from bloatlab.sim import driver, outputs
from bloatlab.sim.scenario import check, scenario
from bloatlab.specs.model import Experiment
from bloatlab.testbed.machine import machine

FIRST_PORT = 5201
# The driver runs in simulated time; a run that takes this many times its simulated length
# (and a minute) has gone wrong.
TIMEOUT_FACTOR = 20
# Runs of a sweep simulate side by side (lab.executors.ParallelExecutor); their plots are drawn
# one at a time, as matplotlib asks of threads.
WRITING = threading.Lock()


def simulate_experiment(experiment: Experiment, out: Path, *, progress: bool | object = True,
                        svg: bool = False) -> Outcome:
    exp = experiment
    run_dir = RunDir(out)
    if run_dir.holds_run():
        raise BloatlabError(f"{run_dir.path} already holds a run; choose another --out or remove it", field="--out")
    check(exp)
    binary = driver.build(say=progress is not False)
    try:
        run_dir.create()
    except OSError as e:
        raise BloatlabError(f"cannot create {run_dir.path}: {e.strerror}; choose a writable directory",
                            field="--out") from None
    record = RunRecord(exp)
    record.started_at = now()
    record.backends = ["ns3"] * len(exp.topology.links)
    record.ports = {w.name: FIRST_PORT + i for i, w in enumerate(exp.workloads)}
    record.tcp_probe = "ns3"
    record.host_cc = {h: exp.topology.host_cc(h) or "" for h in exp.topology.hosts}
    record.duration_s = exp.duration_s
    (run_dir.raw / "qlog").mkdir(parents=True, exist_ok=True)
    path = run_dir.raw / "scenario.txt"
    path.write_text(scenario(exp, run_dir.raw, record.ports))
    if progress is True:
        print(f"simulating {exp.name}: {exp.duration_s:g} s in ns-3 {driver.ns3_version()}", file=sys.stderr,
              flush=True)
    started = time.monotonic()
    # SIGTERM and SIGHUP stop a run as Ctrl-C does (the driver, our child, is ended and reaped);
    # signal handlers belong to the main thread, so a sweep's side-by-side runs leave them to it.
    main = threading.current_thread() is threading.main_thread()
    # What writing needs loads on this core while the simulation runs on another, on a thread of
    # its own: a stop signal goes to the main thread, and one that cut an import in half there
    # would leave that module impossible to import again (pandas: "option already registered").
    preload = threading.Thread(target=preload_writers, name="preload-writers", daemon=True)
    try:
        with Interrupts() if main else contextlib.nullcontext():
            child = driver.start(binary, path, run_dir.raw / "ns3")
            preload.start()
            driver.finish(child, timeout_s=TIMEOUT_FACTOR * exp.duration_s + 60)  # ends the driver if stopped
        outputs.collect(run_dir.raw / "ns3", record)
    except KeyboardInterrupt:
        record.incomplete_reason = "interrupted"
    except BloatlabError as e:
        record.incomplete_reason = f"failed: {e}"
        record.errors.append(str(e))
    record.ended_at = now()
    record.machine = machine()
    record.tools = {"ns3": driver.ns3_version()}
    if progress is True:
        print(f"simulated {exp.duration_s:g} s in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    if preload.is_alive():  # plots fork a child only when no other thread runs
        preload.join()
    with WRITING:
        outcome = write_outcome(run_dir, record, svg=svg, plots=record.complete)
    if record.incomplete_reason == "interrupted":
        outcome.interrupted = True
    return outcome

