"""The run's schedule: each workload started at its start and stopped at its stop, seconds
after t0 on the run's clock, until the run's duration is up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from bloatlab import interrupts
from bloatlab.experiment.clock import Clock

if TYPE_CHECKING:
    from bloatlab.experiment.running import Running

TICK_S = 0.05  # how often the schedule looks at the clock
END_GRACE_S = 10.0  # iperf3 clients finish their last interval and report after the schedule ends


def play(workloads: list[Running], duration_s: float, clock: Clock,
         tick: Callable[[float], None] | None = None, watch: Callable[[float], None] | None = None) -> None:
    """Mark t0 (unless the caller has), then start and stop each workload on its schedule for duration_s; tick(seconds
    since t0) every TICK_S. Then tell every workload to stop and give the tools END_GRACE_S to
    end by themselves (their final reports). Every tick, each running workload checks its tools,
    and watch(seconds since t0) what else the run needs (the datapath): either raises RunFault."""
    if not clock.started:
        clock.mark()
    pending = sorted(workloads, key=lambda w: w.w.start_ns)
    stopping = sorted(workloads, key=lambda w: w.w.stop_ns)
    running: list[Running] = []
    while True:
        now = clock.since_t0()
        while pending and pending[0].w.start_ns / 1e9 <= now:
            running.append(pending.pop(0))
            running[-1].start()
        while stopping and stopping[0].w.stop_ns / 1e9 <= now:
            w = stopping.pop(0)
            if w in running:
                running.remove(w)
            w.stop()
        if now >= duration_s:
            break
        if tick is not None:
            tick(now)
        interrupts.check()
        for w in running:
            w.check(now)
        if watch is not None:
            watch(now)
        time.sleep(min(TICK_S, duration_s - now))
    for w in workloads:
        w.stop()
    deadline = time.monotonic() + END_GRACE_S
    for w in workloads:
        w.wait(deadline)
