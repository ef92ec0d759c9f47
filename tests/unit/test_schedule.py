"""The run's schedule watching what it runs: a tool killed from outside, or something the run
needs gone, stops it with a RunFault that names what, when and how. Real processes, no network."""

import os
import signal
import subprocess
import threading
import time

import pytest

from bloatlab.experiment.clock import Clock
from bloatlab.experiment.running import RunFault, Running
from bloatlab.experiment.schedule import play
from bloatlab.specs.model import Workload


class Sleeper(Running):
    """A workload whose tool is `sleep`, started at its start like any other."""

    def start(self) -> None:
        self.procs.append(subprocess.Popen(["sleep", "30"]))
        self.started = True

    def stop(self) -> None:
        self.end()


def sleeper(name: str, start_s: float = 0.0, stop_s: float = 2.0) -> Sleeper:
    w = Workload(name=name, kind="sleep", start_ns=int(start_s * 1e9), stop_ns=int(stop_s * 1e9))
    return Sleeper(w, net=None, raw_dir=None, clock=None, port=0)


def test_a_tool_killed_mid_run_stops_the_schedule_with_its_name():
    w = sleeper("bulk")
    killer = threading.Timer(0.3, lambda: os.kill(w.procs[0].pid, signal.SIGKILL))
    killer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(RunFault, match=r"^the sleep of workload bulk \(pid \d+\) was killed by signal 9 at 0\.[3-5] s$"):
            play([w], 2.0, Clock())
    finally:
        killer.cancel()
        w.end()
    assert time.monotonic() - t0 < 1.0  # at the next tick, not at the run's end


def test_tools_that_end_after_their_stop_and_a_clean_exit_are_no_fault():
    w = sleeper("ping", stop_s=0.2)  # told to stop (SIGINT) at 0.2 s of a 0.5 s run
    play([w], 0.5, Clock())
    assert w.procs[0].returncode is not None


def test_the_watch_stops_the_schedule():
    seen = []

    def watch(at_s: float) -> None:
        seen.append(at_s)
        if at_s > 0.2:
            raise RunFault(f"the datapath died at {at_s:.1f} s")

    w = sleeper("bulk")
    try:
        with pytest.raises(RunFault, match="the datapath died at 0.[2-4] s"):
            play([w], 2.0, Clock(), watch=watch)
    finally:
        w.end()
    assert len(seen) >= 4 and seen == sorted(seen)
