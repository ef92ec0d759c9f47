"""What a run's datapath stats say about the run, beside the machine it ran on: how late
departures were against the machine's own wake-ups (the idle timer, the sentinel), each
worker's CPU, batching under CPU pressure, and the warnings a run prints when the datapath fell
behind or a capture is missing packets (docs/datapath.md, "The lateness verdict").

The stats file itself, and the process, are datapath.py's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bloatlab import proc
from bloatlab.errors import BloatlabError
from bloatlab.testbed import capabilities
from bloatlab.testbed.datapath import BINARY_NAME
from bloatlab.testbed.datapath_stats import (DatapathFigures, DatapathStats, DirectionStats, LatenessVerdict, SentinelStats,
                                            TimerOvershoot)


# Departures this late are no longer the emulator's timing noise: at 10 Mbit/s a millisecond is
# almost a full frame's time on the wire, and the lag adds to every RTT the run reports.
LAG_WARN_NS = 1_000_000
# The machine's own timer, idle, sampled at a run's start: a worker sleeps until just before each
# departure, so it can be no later than a wake-up of this machine. It is the baseline where the
# sentinel (below) has too few sleeps to judge by, and the bench's. 50 us is a departure gap at
# 250 Mbit/s; 400 sleeps take 20-40 ms.
TIMER_SLEEP_NS = 50_000
TIMER_SLEEPS = 400
# What a worker adds to a wake-up: reading its ring and handing the frame to the kernel.
TIMER_ALLOWANCE_US = 20.0


def timer_overshoot(sleep_ns: int = TIMER_SLEEP_NS, count: int = TIMER_SLEEPS,
                    realtime: bool = False) -> TimerOvershoot | None:
    """How late this machine wakes a sleeping thread, as a worker sleeps (`bloatlab-link
    --timer`), real-time as the workers are when `realtime` and allowed; None without the
    binary."""
    try:
        binary = capabilities.binary(BINARY_NAME)
        argv = [str(binary), "--timer", str(sleep_ns), str(count)] + (["--rt"] if realtime else [])
        done = proc.run(argv, timeout_s=10 + count * sleep_ns / 1e9 * 20)
        return TimerOvershoot.from_json(json.loads(done.stdout))
    # A machine or command error, or a report not of this bloatlab's binary (a field missing or not
    # of its type): the run goes on without it.
    except (BloatlabError, ValueError, KeyError, TypeError):
        return None


def batching_share(before: DatapathStats | None, after: DatapathStats | None) -> float | None:
    """The share of the datapath's report periods between two of its stats documents in which
    its links batched departures (sched.rs CpuPressure); None where it never batches (off, or no
    PSI) or no period ended between them."""
    b0, b1 = before.batching if before is not None else None, after.batching if after is not None else None
    if b1 is None:
        return None
    periods = b1.periods - (b0.periods if b0 is not None else 0)
    batching = b1.periods_batching - (b0.periods_batching if b0 is not None else 0)
    return batching / periods if periods > 0 else None


# The sentinel (bloatlab-link's sentinel.rs) sleeps as the workers sleep, one real-time step above
# them, throughout a run while frames flow: the machine's own lateness under the run's load. Fewer
# sleeps than this say too little to judge by; the idle timer stands in.
SENTINEL_MIN_SLEEPS = 100


def sentinel(datapath: DatapathFigures | None) -> SentinelStats | None:
    """The machine's wake-up lateness under the run's load, as the datapath's sentinel met it:
    per sleep (late_ns) and at a moment taken at random while it slept (late_at_random_ns, which
    is how a stall meets departures: in proportion to how long it lasts); None without enough of
    its sleeps."""
    watch = datapath.sentinel if datapath is not None else None
    if watch is None or watch.late_ns.count < SENTINEL_MIN_SLEEPS:
        return None
    return watch


def _allowed_ns(timer: TimerOvershoot | None, datapath: DatapathFigures | None) -> tuple[float | None, str]:
    """What the machine allows a departure, in ns (None: no figure to judge by), and whose figure
    it is: under the run's load, the sentinel's p99 lateness at a moment taken at random (a
    departure falls due at any moment, so a stall of 12 ms holds up what falls due in those
    12 ms, where among the sentinel's sleeps it is one in thousands), else the idle timer's p99
    at the start; plus what a worker adds to a wake-up (reading its ring, handing the frame on)."""
    if (watch := sentinel(datapath)) is not None:
        return max(watch.late_at_random_ns.p99, watch.late_ns.p99) + TIMER_ALLOWANCE_US * 1e3, "sentinel"
    if timer is not None:
        return timer.p99_ns + TIMER_ALLOWANCE_US * 1e3, "timer"
    return None, ""


def lateness(stats: dict[str, DirectionStats], timer: TimerOvershoot | None,
             datapath: DatapathFigures | None = None) -> LatenessVerdict | None:
    """The run's worst departure lateness (p99 of the direction where it is highest) beside what
    the machine allows: the sentinel's p99 wake-up lateness under the run's load (or, without
    it, the idle timer's p99 at the start) plus TIMER_ALLOWANCE_US; and what the datapath added
    beyond the machine's own. None without a userspace direction that sent anything."""
    late = {name: d.depart_error_ns for name, d in stats.items() if d.depart_error_ns.count}
    if not late:
        return None
    worst = max(late, key=lambda name: late[name].p99)
    p99_us = late[worst].p99 / 1e3
    watch = sentinel(datapath)
    allowed_ns, _ = _allowed_ns(timer, datapath)
    allowed_us = allowed_ns / 1e3 if allowed_ns is not None else None
    return LatenessVerdict(
        direction=worst, p99_us=p99_us, max_us=late[worst].max / 1e3,
        timer_p99_us=timer.p99_ns / 1e3 if timer is not None else None,
        sentinel_p99_us=watch.late_ns.p99 / 1e3 if watch is not None else None,
        sentinel_at_random_p99_us=watch.late_at_random_ns.p99 / 1e3 if watch is not None else None,
        sentinel_sleep_us=watch.sleep_p50_ns / 1e3 if watch is not None and watch.sleep_p50_ns else None,
        allowed_us=allowed_us, within=p99_us <= allowed_us if allowed_us is not None else None,
        added_us=max(0.0, p99_us - allowed_us) if allowed_us is not None else None)


@dataclass(frozen=True)
class WorkerShare:
    """A worker's CPU between two reads of the stats file, in % of one core: in its own code and
    in the kernel (the frames' copies, the receiving host's stack), and the directions it serves."""

    user_pct: float
    kernel_pct: float
    directions: list[str]


def worker_shares(before: DatapathStats | None, after: DatapathStats | None) -> dict[str, WorkerShare]:
    """Each worker's CPU between two reads of the stats file, by name."""
    earlier = {w.name: w.cpu for w in before.workers} if before is not None else {}
    out = {}
    for w in after.workers if after is not None else ():
        c0, c1 = earlier.get(w.name), w.cpu
        if c0 is None or c1.wall_ns <= c0.wall_ns:
            continue
        wall = c1.wall_ns - c0.wall_ns
        out[w.name] = WorkerShare(100 * (c1.user_ns - c0.user_ns) / wall, 100 * (c1.kernel_ns - c0.kernel_ns) / wall,
                                  list(w.directions))
    return out


# A worker busier than this over a run had no time to spare for its departures.
BUSY_SHARE = 0.9


def _cause(d: DirectionStats, datapath: DatapathFigures | None, woken_ns: float | None) -> str:
    """Why a direction's departures came late, from what its worker measured: short of CPU (busy
    through the run), kept from its CPU (its own wake-ups later than the machine allows), or its
    own work between departures."""
    workers = datapath.workers if datapath is not None else ()
    w = workers[d.worker] if d.worker < len(workers) else None
    if w is None or not w.cpu.wall_ns:
        return "the datapath was short of CPU for this traffic"
    cpu = w.cpu
    busy = (cpu.user_ns + cpu.kernel_ns) / cpu.wall_ns
    kernel = 100 * cpu.kernel_ns / cpu.wall_ns
    wakeups = w.wakeups_late_ns.p99
    if busy >= BUSY_SHARE:
        return (f"the datapath was short of CPU for this traffic (its worker, {w.name}, busy {100 * busy:.0f}% of a core "
                f"over the run, {kernel:.0f} of it in the kernel: the frames' copies and the receiving host's stack)")
    if woken_ns is not None and wakeups > woken_ns:
        return (f"its worker ({w.name}, busy {100 * busy:.0f}% of a core) woke {wakeups / 1e3:.0f} us late at p99, later "
                "than the machine's sentinel: it was kept from its CPU (demoted to normal priority while the datapath "
                "took more than its share, or behind another real-time task)")
    return (f"its worker ({w.name}) was busy only {100 * busy:.0f}% of a core and woke on time: the lateness is its own "
            "work between departures (a send runs the receiving host's stack inline)")


def lag_warnings(stats: dict[str, DirectionStats], timer: TimerOvershoot | None = None,
                 datapath: DatapathFigures | None = None) -> list[str]:
    """What the run's numbers owe to the userspace datapath falling behind, per direction:
    departures late by a millisecond or more at p99 (a queue no link asked for) beyond what the
    machine's own wake-ups allowed under the run's load, with the cause its worker measured; and
    frames lost outside the emulated link (its input ring full, or refused on the way out).
    Lateness within the machine's own is not the datapath's: the run's summary states both."""
    out = []
    allowed_ns, whose = _allowed_ns(timer, datapath)
    # A worker's own timed wake-ups are judged, sleep by sleep, against the sentinel's.
    watch = sentinel(datapath)
    woken_ns = watch.late_ns.p99 + TIMER_ALLOWANCE_US * 1e3 if watch is not None else allowed_ns
    for name, d in stats.items():
        late = d.depart_error_ns
        if late.p99 >= LAG_WARN_NS and (allowed_ns is None or late.p99 > allowed_ns):
            if allowed_ns is None:
                beyond = ""
            elif whose == "sentinel":
                beyond = (f"beyond the machine's own stalls under this load ({allowed_ns / 1e3:.0f} us: the sentinel's p99 "
                          f"at a random moment {allowed_ns / 1e3 - TIMER_ALLOWANCE_US:.0f} us + {TIMER_ALLOWANCE_US:.0f}); ")
            else:
                beyond = (f"beyond what this machine allows ({allowed_ns / 1e3:.0f} us: its idle timer's p99 "
                          f"{allowed_ns / 1e3 - TIMER_ALLOWANCE_US:.0f} us + {TIMER_ALLOWANCE_US:.0f}); ")
            out.append(f"{name}: the datapath fell behind: departures {late.p99 / 1e6:.1f} ms late at p99 "
                       f"(max {late.max / 1e6:.1f} ms), delay no link asked for; {beyond}"
                       + _cause(d, datapath, woken_ns))
        rx_overrun, tx_error = d.drops["rx_overrun"], d.drops["tx_error"]
        if rx_overrun + tx_error:
            out.append(f"{name}: {rx_overrun + tx_error} frames lost outside the emulated link (rx_overrun {rx_overrun}, "
                       f"tx_error {tx_error}): the datapath could not keep up")
    return out


def capture_warnings(stats: dict[str, DirectionStats]) -> list[str]:
    """What a capture is missing, per captured direction: packets past its size limit, packets
    lost because the disk fell behind, and the writer's error."""
    out = []
    for name, d in stats.items():
        capture = d.capture
        if capture is None:
            continue
        for what, f in (("departures", capture.departures), ("drops", capture.drops)):
            if f.cut:
                out.append(f"{name}: the capture of its {what} reached probes.pcap_limit at {f.bytes / 1e6:.1f} MB; "
                           f"{f.cut} of {f.cut + f.written} packets are not in it (raise pcap_limit, "
                           "or lower pcap_snaplen)")
            if f.lost:
                out.append(f"{name}: the capture of its {what} lost {f.lost} packets: the disk fell behind "
                           "(the link ran on; lower pcap_snaplen or write to a faster disk)")
        if capture.error:
            out.append(f"{name}: the capture stopped: {capture.error}")
    return out

