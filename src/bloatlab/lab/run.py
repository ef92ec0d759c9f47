"""Running an experiment: one run, start to end (Run, run_experiment), or a sweep of runs
(sweep_experiment). One run is the job that crosses every layer once:

    build the testbed      testbed.network.Network
    start the workloads    experiment.workloads, on the schedule of experiment.schedule
    sample the probes      experiment.probes.RunProbes
    write the results      results.writer, then the plots and report.html (analysis)

Ctrl-C (or SIGTERM, SIGHUP) at any point ends every process, removes the network and the
probes' tracefs instance, and still writes what was measured, marked `complete: false`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bloatlab.analysis.summary import headline
from bloatlab import proc
from bloatlab.errors import BloatlabError, MachineError, SpecError
from bloatlab.experiment.clock import Clock
from bloatlab.experiment.probes import QueueSource, RunProbes, choose_tcp_probe
from bloatlab.experiment.record import Collected, QueueMeasure, RunRecord
from bloatlab.experiment.schedule import play
from bloatlab.experiment.running import RunFault, Running, pick_ports
from bloatlab.experiment.workloads import (check_congestion_controls, check_tools, congestion_controls, ect1_flows,
                                           running)
from bloatlab.interrupts import Interrupts
from bloatlab.lab.executors import Executor, LocalExecutor, ParallelExecutor, RunResult, Tick
from bloatlab.lab.outcome import Outcome, default_out, now, preload_writers, write_outcome
from bloatlab.progress import Progress
from bloatlab.results.files import RunDir
from bloatlab.results.writer import record_from_document, run_document
from bloatlab.specs.experiment import SweepPlan
from bloatlab.specs.model import Bulk, Experiment, Web

if TYPE_CHECKING:
    from bloatlab.lab.sweep import SweepOutcome
from bloatlab.testbed import capabilities, netns, state
from bloatlab.testbed.datapath_stats import DatapathStats, DirectionStats, read_stats_if_any
from bloatlab.testbed.diagnostics import batching_share, capture_warnings, lag_warnings, timer_overshoot
from bloatlab.testbed.links.base import Captures
from bloatlab.testbed.machine import (cpu_pressure_us, machine, pressure_share, pressure_warnings, snapshots,
                                      tool_versions)
from bloatlab.testbed.links.kernel import qdiscs_wanted
from bloatlab.testbed.network import DP_NODE, Network, ect1_directions, sweep_backends

log = logging.getLogger(__name__)


# How run.json's incomplete_reason begins while its run still runs, or was killed outright.
UNFINISHED = "unfinished"


def network_name() -> str:
    """A short name no running network has: networks of two runs at once never collide."""
    while True:
        name = f"run-{secrets.token_hex(3)}"
        if not state.state_dir(name).exists():
            return name


class Run:
    def __init__(self, experiment: Experiment, out: Path, *, progress: bool | Callable[[float], None] = True,
                 svg: bool = False, plots: bool = True):
        self.exp = experiment
        self.dir = RunDir(out)
        self.progress = progress
        self.svg = svg
        self.plots = plots  # False: files only (calibration's trials, read by numbers alone)
        self.clock = Clock()
        self.net: Network | None = None
        self.workloads: list[Running] = []
        self.probes: RunProbes | None = None
        self.record = RunRecord(experiment)
        self.stopped_s: float | None = None  # how far the schedule got, when it was cut short
        self.preload: threading.Thread | None = None
        self.pressure_at_t0: tuple[int | None, float] | None = None  # (PSI's CPU "some" total, monotonic s)
        self.stats_at_t0: DatapathStats | None = None  # the datapath's stats then

    def execute(self) -> Outcome:
        if self.dir.holds_run():
            raise BloatlabError(f"{self.dir.path} already holds a run; choose another --out or remove it",
                                field="--out")
        check_congestion_controls(list(self.exp.workloads))
        check_tools(list(self.exp.workloads))
        tcp_flows = any(isinstance(w, (Bulk, Web)) for w in self.exp.workloads)
        self.record.tcp_probe = choose_tcp_probe(self.exp.probes.tcp) if tcp_flows else "none"
        try:
            self.dir.create()
        except OSError as e:
            raise BloatlabError(f"cannot create {self.dir.path}: {e.strerror}; choose a writable directory",
                                field="--out") from None
        self.record.started_at = now()
        try:
            self._write_started()
        except OSError as e:
            raise MachineError(f"cannot write {self.dir.path}/run.json: {e.strerror}; free space there or choose "
                               "another --out", field="--out") from None
        with Interrupts() as interrupts:
            failure: BaseException | None = None
            try:
                self._run()
            except KeyboardInterrupt:
                interrupts.cleaning = True
                self.stopped_s = self._elapsed_s()
                self.record.incomplete_reason = f"interrupted at {self.stopped_s:.1f} s of {self.exp.duration_s:g} s"
            except RunFault as fault:  # what was measured until then is written, as incomplete
                interrupts.cleaning = True
                self.stopped_s = self._elapsed_s()
                self.record.incomplete_reason = str(fault)
            except BaseException as error:
                interrupts.cleaning = True
                self.stopped_s = self._elapsed_s()
                self.record.incomplete_reason = f"failed: {error}"
                failure = error
            interrupts.cleaning = True
            self._teardown()
            if failure is not None:
                self._write_partial()
                if isinstance(failure, OSError):  # a full disk under --out, most often: one line, no traceback
                    where = f" ({failure.filename})" if failure.filename else ""
                    raise MachineError(f"the run failed: {failure.strerror or failure}{where}; it is torn down",
                                       field="--out") from failure
                raise failure
            try:
                outcome = self._write()
            except OSError as e:  # a full or failing disk: the network is gone already
                raise MachineError(f"the run ended but its results could not be written to {self.dir.path}: "
                                   f"{e.strerror}; free space there, then `bloatlab report {self.dir.path}` writes "
                                   "them from what its tools wrote to raw/", field="--out") from None
            # A Ctrl-C while cleaning up leaves this run whole but must still stop a sweep.
            outcome.interrupted = interrupts.received is not None
            return outcome

    def _write_started(self) -> None:
        """run.json before anything is built, marked incomplete: a run killed outright (SIGKILL,
        a crash, the machine going down) still says what it was, and a sweep's --resume runs it
        again. The end of the run rewrites it whole."""
        record = self.record
        record.machine, record.tools = machine(), tool_versions()
        record.network = network_name()  # named now, so that a killed run's network can be found
        record.owner = {"pid": os.getpid(), "starttime": proc.starttime(os.getpid())}
        self._write_unfinished()

    def _write_unfinished(self) -> None:
        """run.json as it stands, still marked unfinished: at the start, and again at t0 with
        what recovering a killed run needs (t0, ports, backends, the probes' sources)."""
        doc = run_document(self.record)
        doc["complete"] = False
        doc["incomplete_reason"] = (f"{UNFINISHED}: started {self.record.started_at} by process {os.getpid()}; "
                                    "if that process is gone, the run was killed before it could end "
                                    "(bloatlab report DIR recovers what it measured)")
        self.dir.write_json("run.json", doc)

    def _elapsed_s(self) -> float:
        return min(self.clock.since_t0(), self.exp.duration_s) if self.clock.started else 0.0

    # Building, running, tearing down ----------------------------------------------------------

    def _run(self) -> None:
        exp, record = self.exp, self.record
        record.ports = dict(zip((w.name for w in exp.workloads), pick_ports(len(exp.workloads))))
        captures = Captures(self.dir.pcap, frozenset(exp.probes.pcap), exp.probes.pcap_snaplen,
                            exp.probes.pcap_limit_bytes) if exp.probes.pcap else None
        self.net = Network(exp.topology, record.network or network_name(), qlog_dir=self.dir.raw / "qlog",
                           qlog_directions=set(exp.probes.queue), captures=captures, punctual=exp.punctual,
                           congestion_controls=congestion_controls(list(exp.workloads)),
                           ect1_flows=ect1_flows(list(exp.workloads)))
        record.network = self.net.name
        self.workloads = [running(w, self.net, self.dir.raw, self.clock, record.ports[w.name])
                          for w in exp.workloads]

        def prepare() -> None:  # the servers start while the links come up
            for w in self.workloads:
                w.prepare()

        self.net.up(on_hosts=prepare)
        where = self.net.node_namespaces()
        if netns.exists(self.net.datapath_namespace):  # kernel links' qdiscs; "_" is no node's name
            where[DP_NODE] = self.net.datapath_namespace
        sources = queue_sources(exp, self.net.backends, self.net)
        self.probes = RunProbes(exp, self.net, self.dir.raw, record.ports, record.tcp_probe, sources)
        # The probes' tracefs instance mostly waits for the kernel (a trace clock or buffer
        # change waits out RCU grace periods: 20-50 ms), so it is set up beside the snapshots
        # and the wait for the servers; leaving the block waits for it, also on an error.
        with ThreadPoolExecutor(1, thread_name_prefix="probes-start") as pool:
            probes_started = pool.submit(self.probes.start)
            record.snapshots = snapshots(where)
            for w in self.workloads:  # their servers started while the links came up
                w.ready()
            probes_started.result()
        if self.net.datapath is not None:  # the baseline its departures' lateness is judged by
            record.timer = timer_overshoot()

        # A callable progress is told the seconds into the run (a sweep draws one bar for all).
        bar = Progress(exp.duration_s, exp.name) if self.progress is True else None
        tick = bar.update if bar is not None else self.progress if callable(self.progress) else None
        # What writing the results needs (matplotlib, pandas: 2 s) loads while the run plays,
        # not after it; the schedule's thread only wakes every 50 ms.
        self.preload = threading.Thread(target=preload_writers, name="preload-writers", daemon=True)
        self.preload.start()
        # t0, and run.json again with what a killed run's recovery needs: the clock its tools'
        # stamps are read on, the ports that tell its flows apart, where its queues were read.
        self.clock.mark()
        self.pressure_at_t0 = (cpu_pressure_us(), time.monotonic())
        if self.net.datapath is not None and self.net.datapath.stats_path is not None:
            self.stats_at_t0 = read_stats_if_any(self.net.datapath.stats_path)
        record.t0_real, record.t0_mono = self.clock.t0_real, self.clock.t0_mono
        record.backends, record.host_cc = list(self.net.backends), dict(self.net.host_cc)
        record.queues = {name: QueueMeasure(source.kind) for name, source in sources.items()}
        self._write_unfinished()
        play(self.workloads, exp.duration_s, self.clock, tick, watch=self._watch)
        if bar is not None:
            bar.finish()

    def _watch(self, at_s: float) -> None:
        """The datapath, every tick of the schedule: without it the links carry nothing."""
        dp = self.net.datapath if self.net is not None else None
        if dp is not None and not dp.alive():
            raise RunFault(f"the datapath (bloatlab-link, pid {dp.pid}) died at {at_s:.1f} s: {dp.last_words()}")

    def _teardown(self) -> None:
        """End every process, stop the probes, remove the network."""
        errors = self.record.errors
        if self.pressure_at_t0 is not None:  # over what played of the schedule, cut short or not
            self.record.cpu_pressure = pressure_share(self.pressure_at_t0, (cpu_pressure_us(), time.monotonic()))
        for w in self.workloads:
            try:
                w.end()
            except Exception as e:  # keep going: the network must go whatever happened
                errors.append(f"ending {w.w.name}: {e}")
        if self.probes is not None:
            self.probes.stop(errors)
        if self.net is not None and self.net.status != "new":
            try:
                self.net.down()  # the datapath flushes its queue logs as it stops
            except Exception as e:
                errors.append(f"removing network {self.net.name}: {e}")
        if self.probes is not None:
            self.probes.finish()
        self.record.ended_at = now()

    # Results ----------------------------------------------------------------------------------

    def _collect(self) -> RunRecord:
        """Everything measured, into the record."""
        exp, record = self.exp, self.record
        cut = record.incomplete_reason is not None and self.stopped_s is not None
        record.duration_s = min(exp.duration_s, self.stopped_s) if cut else exp.duration_s
        record.t0_real = self.clock.t0_real or None
        collected = Collected()
        if self.clock.started:
            for w in self.workloads:
                try:
                    collected.merge(w.collect())
                except Exception as e:
                    record.errors.append(f"reading the results of {w.w.name}: {e}")
        record.collected = collected
        record.errors += collected.errors
        record.warnings += collected.warnings
        if record.errors and record.incomplete_reason is None:
            record.incomplete_reason = f"a workload failed: {record.errors[0]}"
        if self.probes is not None:
            record.cwnd = self.probes.cwnd_rows(self.clock.t0_mono) if self.clock.started else []
            record.queues = self.probes.queues(record.duration_s, self.clock.t0_mono if self.clock.started else None)
            record.tcp_lost_events = self.probes.tcp_lost_events
        if self.net is not None:
            record.backends = list(self.net.backends)  # chosen before building, so known if the build failed
            record.host_cc = dict(self.net.host_cc)
        record.datapath_stats = self._datapath_stats()
        final = self.net.final_datapath_stats if self.net is not None else None
        record.datapath = final.figures if final is not None else None
        if self.stats_at_t0 is not None and self.net is not None:  # from t0 on, as the pressure
            record.links_batching = batching_share(self.stats_at_t0, self.net.final_datapath_stats)
        record.warnings += lag_warnings(record.datapath_stats, record.timer, record.datapath)
        record.warnings += capture_warnings(record.datapath_stats)
        record.warnings += pressure_warnings(record.cpu_pressure, record.links_batching)
        return record

    def _datapath_stats(self) -> dict[str, DirectionStats]:
        """The datapath's final counters per direction name ("s0->h2"), userspace links only."""
        final = self.net.final_datapath_stats if self.net is not None else None
        out = {}
        for link in self.exp.topology.links:
            if final is not None and (stats := final.links.get(link.name)) is not None:
                out[link.direction_name("forward")] = stats.forward
                out[link.direction_name("reverse")] = stats.reverse
        return out

    def _write_partial(self) -> None:
        try:
            self._write(plots=False)
        except Exception as e:  # the original error matters more
            log.warning("could not write partial results: %s", e)

    def _write(self, plots: bool = True) -> Outcome:
        if self.preload is not None:  # plots fork a child only when no other thread runs
            self.preload.join()
        return write_outcome(self.dir, self._collect(), svg=self.svg, plots=plots and self.plots)


def queue_sources(exp: Experiment, backends: list[str], net: Network | None = None) -> dict[str, QueueSource]:
    """Where each probed direction's queue is read: bloatlab-link's log, or the kernel qdisc
    (sampled in `net`; without it, only its samples' file is known)."""
    sources = {}
    for name in exp.probes.queue:
        index, which = next((i, which) for i, link in enumerate(exp.topology.links)
                            for which in ("forward", "reverse") if link.direction_name(which) == name)
        link = exp.topology.links[index]
        if backends[index] == "kernel":
            port = net.queue_port(index, which) if net is not None else None
            sources[name] = QueueSource(link.name, which, "tc", port.ns if port else None, port.iface if port else None)
        else:
            sources[name] = QueueSource(link.name, which, "datapath")
    return sources


def recover_run(path: Path) -> Outcome | None:
    """What a run killed outright (SIGKILL, a crash) measured until it died, read from the files
    its tools flushed as they ran (raw/): its series, summary, plots and report, marked
    incomplete. None when there is nothing to recover: the run ended by itself (complete or
    not), or its process still runs."""
    try:
        doc = json.loads((path / "run.json").read_text())
    except (OSError, ValueError):
        return None
    if (doc.get("complete") or not str(doc.get("incomplete_reason") or "").startswith(UNFINISHED)
            or proc.owner_alive(doc.get("owner")) is not False):
        return None
    owner = doc["owner"]
    try:
        record = record_from_document(doc)
    except (KeyError, TypeError, ValueError) as e:  # a run.json edited or from another version
        raise BloatlabError(f"{path}/run.json does not describe a run this bloatlab can recover ({e!r})",
                            field="DIR") from None
    exp = record.experiment
    run = Run(exp, path, progress=False)
    run.record = record
    if record.t0_mono and record.t0_real:
        run.clock = Clock(record.t0_mono, record.t0_real)
        # The last write to raw/ is about when it died: ping alone writes every interval.
        last = max((f.stat().st_mtime for f in run.dir.raw.rglob("*") if f.is_file()), default=record.t0_real)
        run.stopped_s = min(max(0.0, last - record.t0_real), exp.duration_s)
        for w in exp.workloads:
            runner = running(w, None, run.dir.raw, run.clock, record.ports.get(w.name, 0))
            runner.started, runner.recovered = w.start_ns / 1e9 < run.stopped_s, True
            run.workloads.append(runner)
        run.probes = RunProbes(exp, None, run.dir.raw, record.ports, record.tcp_probe,
                               queue_sources(exp, record.backends))
        record.incomplete_reason = (f"ended at about {run.stopped_s:.1f} s of {exp.duration_s:g} s without "
                                    f"writing its results: process {owner['pid']} is gone (killed, crashed, or its "
                                    "disk was full); its series are what its tools had written to raw/ by then")
    else:
        run.stopped_s = 0.0
        record.incomplete_reason = f"ended before its workloads started: process {owner['pid']} is gone"
    return run._write()


def run_experiment(experiment: Experiment, out: Path | None = None, **kwargs: Any) -> Outcome:
    """One run: emulated (Run), or simulated in ns-3 (lab/simulate.py) as the spec's backend says."""
    if experiment.backend == "ns3":
        from bloatlab.lab.simulate import simulate_experiment

        return simulate_experiment(experiment, out or default_out(experiment), **kwargs)
    return Run(experiment, out or default_out(experiment), **kwargs).execute()


# A sweep of an experiment -----------------------------------------------------------------------

# Network build, teardown, iperf3's last report and writing results: added to a run's duration
# for the first time-left estimate; the sweep learns the real figure as runs finish.
RUN_OVERHEAD_S = 5.0


def sweep_experiment(plan: SweepPlan, out: Path, *, repeat: int, resume: bool = False, progress: bool = True,
                     svg: bool = False, command: list[str] | None = None,
                     executor: Executor | None = None) -> SweepOutcome:
    """Every point of the plan, `repeat` times each, each run an experiment run into OUT/LABEL/repK
    (docs/sweeps.md); then the aggregate, comparison plots and report of the complete runs."""
    # The sweep engine reads results (pandas) and finishes with plots: imported when a sweep runs.
    from bloatlab.analysis.report import finish_sweep
    from bloatlab.lab.sweep import Axis, run_sweep

    # A module's function with its plan bound: it pickles, so a child process or a cluster node
    # can run it (executors.py).
    run_one = functools.partial(run_point, plan, progress, svg)
    first = plan.first
    link_backends = None
    if first.backend == "ns3":
        _check_simulated(plan)
    else:
        plan, link_backends = one_backend_per_link(plan)
        if progress and link_backends:
            print("links, at every point: " + ", ".join(f"{link} {backend}" for link, backend in link_backends.items()))
    if first.backend == "ns3" and (executor is None or isinstance(executor, LocalExecutor)):
        from bloatlab.sim.driver import build as build_driver

        build_driver(say=progress)  # once, before the runs that use it start side by side
        executor = ParallelExecutor()  # simulations share nothing: one per core
    return run_sweep(out, kind="experiment", name=first.name, source=first.source or first.name,
                     axes=[Axis(name, values, plan.labels.get(name, "")) for name, values in plan.axes], repeat=repeat, fixed=plan.fixed,
                     run_one=run_one, estimate_s=first.duration_s + RUN_OVERHEAD_S, headline=headline,
                     finish=functools.partial(finish_sweep, svg=svg), executor=executor, resume=resume,
                     progress=progress, command=command, fingerprint=plan.source.fingerprint(),
                     link_backends=link_backends)


def run_point(plan: SweepPlan, progress: bool, svg: bool, values: dict[str, Any], rep: int, run_dir: Path,
              tick: Tick) -> RunResult:
    """One run of a sweep: the point's experiment at repetition `rep` into run_dir."""
    outcome = run_experiment(plan.load(values, rep), run_dir, progress=tick if progress else False, svg=svg)
    return RunResult(outcome.complete, outcome.summary, outcome.reason, outcome.warnings, outcome.interrupted)


def one_backend_per_link(plan: SweepPlan, kernel_qdiscs: dict[str, bool] | None = None
                         ) -> tuple[SweepPlan, dict[str, str]]:
    """The plan with each "auto" link's backend fixed for every point, and the choice: the first
    backend that serves the link at every point, on this machine (`kernel_qdiscs`: what its
    kernel offers, probed when not given). Where "auto" chose per run, a kernel with netem sent
    the aqm preset's taildrop point to the kernel and its AQM points to the datapath."""
    experiments = list(plan.points.values())
    if kernel_qdiscs is None:
        kernel_able = [link for e in experiments for link in e.topology.links if link.backend != "userspace"]
        kernel_qdiscs = capabilities.kernel_qdiscs(qdiscs_wanted(kernel_able)) if kernel_able else {}
    # Captured directions, and those where a flow is marked ECT(1), need the datapath at every point.
    marked = {direction for e in experiments
              for direction in ect1_directions(e.topology, ect1_flows(list(e.workloads)))}
    datapath_only = frozenset(plan.first.probes.pcap) | marked
    chosen = sweep_backends([e.topology for e in experiments], kernel_qdiscs, datapath_only)
    return plan.replace_points(lambda e: e.with_link_backends(chosen)), chosen


def _check_simulated(plan: SweepPlan) -> None:
    """Every point of a simulated sweep against what ns-3 can model, before the first runs: a
    point it cannot (aqm=cake) is named, not met halfway through."""
    from bloatlab.sim.scenario import check

    names = [name for name, _ in plan.axes]
    for typed, experiment in plan.points.items():
        try:
            check(experiment)
        except SpecError as e:
            label = " ".join(f"{k}={v}" for k, v in zip(names, typed))
            raise SpecError(f"{e.message} (at {label}); leave that value out of --sweep, or run it emulated",
                            field=e.field) from None
