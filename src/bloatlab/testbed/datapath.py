"""The Python side of the `bloatlab-link` contract (docs/datapath.md).

Owns the datapath's config JSON, starting and stopping the process, and reading what it
writes: the stats file and the binary queue logs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bloatlab import proc
from bloatlab.errors import BloatlabError, MachineError
from bloatlab.specs.model import DirectionSpec
from bloatlab.testbed import capabilities

if TYPE_CHECKING:
    import numpy as np

BINARY_NAME = "bloatlab-link"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0

# Queue log records: 32 bytes, little-endian, 6 bytes of padding at the end.
QLOG_RECORD_BYTES = 32
QLOG_FIELDS = (("t_ns", "<u8", 0), ("value", "<u8", 8), ("backlog_bytes", "<u4", 16),
               ("backlog_pkts", "<u4", 20), ("kind", "u1", 24), ("reason", "u1", 25))
KIND_ENQUEUE, KIND_DEQUEUE, KIND_DROP, KIND_MARK = 1, 2, 3, 4
# Codes as in the core's DropReason and MarkReason (datapath/core/src/reason.rs; bloatlab-link --describe).
DROP_REASONS = {1: "loss", 2: "queue_full", 3: "head_drop", 4: "oversize", 5: "runt", 6: "red_early",
                7: "red_forced", 8: "codel", 9: "pie_early", 10: "fq_overflow", 11: "cobalt", 12: "blue",
                13: "cake_overflow", 14: "ack_filter"}
MARK_REASONS = {1: "red_early", 2: "red_forced", 3: "codel", 4: "pie", 5: "cobalt"}
# Drops before the queue: emulated loss and frames the link cannot carry.
PRE_QUEUE_DROP_REASONS = (1, 4, 5)


def direction_config(direction: DirectionSpec, seed: int) -> dict[str, Any]:
    """One direction's config: its parameters, with the queue's every parameter resolved from
    the catalogue of disciplines, so that the datapath's own defaults never decide."""
    config = {**direction.to_dict(), "queue": direction.queue.config(direction.rate_bps), "seed": seed}
    if direction.trace is not None:  # the datapath's working directory is not the spec's
        config["trace_path"] = str(Path(direction.trace).resolve())
    return config


# A punctual datapath (a spec's `punctual`): each worker wakes before a departure by as much as
# the latest of its recent wake-ups came late (p99 of the last 64 of their class: the latest; up
# to 2 ms, where the default covers 95% of them, up to 0.5 ms) and may spin 85% of its time rather
# than 75% (below the 90% past which a worker runs a period at normal priority, sched.rs). It buys
# departures as punctual as the machine's latest wake-ups allow with the CPU of spinning, where
# the machine's wake-ups come a millisecond late; on a quiet one the default already departs
# within them, and this costs twice its CPU (docs/datapath.md, "Punctual").
PUNCTUAL = {"max_lead_ns": 2_000_000, "lead_quantile": 0.99, "spin_share": 0.85}


def write_config(path: Path, *, netns: str | None, stats_path: Path, log_dir: Path | None,
                 links: list[dict[str, Any]], settings: dict[str, Any] | None = None) -> None:
    """Write the config; `links` holds {"name", "forward", "reverse"} and each end's "a_iface" or
    "a_switch" ("b_..."); `settings` the process's own (PUNCTUAL's, say), over its defaults."""
    config = {"netns": netns, "stats_path": str(stats_path),
              "log_dir": str(log_dir) if log_dir else None, "links": links, **(settings or {})}
    if netns is None:
        del config["netns"]  # absent means "stay in the current namespace"
    path.write_text(json.dumps(config, indent=2) + "\n")


class Datapath:
    """A running bloatlab-link, known by pid and start time (so a recycled pid is never hit)."""

    def __init__(self, pid: int, starttime: int | None, stats_path: Path | None = None,
                 child: subprocess.Popen | None = None, log_path: Path | None = None):
        self.pid = pid
        self.starttime = starttime
        self.stats_path = stats_path
        self._child = child  # when it is our child
        self.log_path = log_path

    @classmethod
    def start(cls, config_path: Path, stats_path: Path, log_path: Path, *,
              detach: bool = False, timeout_s: float = START_TIMEOUT_S) -> Datapath:
        """Start bloatlab-link and return once its stats file exists."""
        binary = capabilities.binary(BINARY_NAME)
        argv = [str(binary), "--config", str(config_path)] + (["--detach"] if detach else [])
        stats_path.unlink(missing_ok=True)  # never mistake an old file for a sign of life
        with open(log_path, "ab") as log:
            # A detached datapath gets its own session: a terminal's hangup or Ctrl-C after
            # `bloatlab up` has returned must not reach it.
            child = proc.spawn(argv, stdout=log, stderr=log, start_new_session=detach)
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if _try_read_json(stats_path) is not None:
                    return cls(child.pid, proc.starttime(child.pid), stats_path, child, log_path)
                if child.poll() is not None:
                    raise MachineError(f"{BINARY_NAME} exited with status {child.returncode} before it "
                                       f"was ready: {_last_line(log_path)}")
                time.sleep(0.005)  # it is ready in 20-40 ms: a coarser poll would add half its step
            raise MachineError(f"{BINARY_NAME} wrote no stats file within {timeout_s:g} s "
                               f"(last log line: {_last_line(log_path)})")
        except BaseException:  # also Ctrl-C: a datapath that never got ready is not left running
            proc.stop(child, signal.SIGKILL)
            raise

    def alive(self) -> bool:
        return proc.alive(self.pid, self.starttime)

    def last_words(self) -> str:
        """How it ended, as far as this process can tell: its exit status (when it is our child)
        and the last line of its log."""
        status = self._child.poll() if self._child is not None else None
        how = ("killed by signal " + str(-status) if status < 0 else f"exit status {status}") if status is not None \
            else "ended"
        log = _last_line(self.log_path) if self.log_path is not None else "(no log)"
        return f"{how}; its log's last line: {log}"

    def stats(self) -> dict[str, Any]:
        if self.stats_path is None:
            raise MachineError(f"the stats file of {BINARY_NAME} {self.pid} is not known")
        return read_stats(self.stats_path)

    def final_stats(self, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, Any] | None:
        """Asks it to stop (SIGTERM) and returns its final stats as soon as they are written
        ("running": false), or whatever it last wrote once it has ended or timeout_s passed.
        Its packet sockets close after that report, which takes tens of milliseconds of RCU
        grace periods: the caller can remove the network meanwhile, then stop() it."""
        if not self.alive():
            return read_stats_if_any(self.stats_path) if self.stats_path is not None else None
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout_s
        while self.stats_path is not None:
            stats = read_stats_if_any(self.stats_path)
            if stats is not None and stats.get("running") is False:
                return stats
            if not self.alive():
                # It may have written its final report between the read and this check.
                return read_stats_if_any(self.stats_path) or stats
            if time.monotonic() >= deadline:
                return stats
            time.sleep(0.002)
        return None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM (it flushes logs and final stats), SIGKILL after timeout_s. True if it ran."""
        ended = proc.terminate([(self.pid, self.starttime)], timeout_s)
        if self._child is not None:
            self._child.wait()  # reap our child
        return bool(ended)


def read_stats(path: str | Path) -> dict[str, Any]:
    stats = _try_read_json(Path(path))
    if stats is None:
        raise MachineError(f"no datapath stats at {path}; is the network up?")
    return stats


def read_stats_if_any(path: str | Path) -> dict[str, Any] | None:
    return _try_read_json(Path(path))


def qlog_dtype() -> np.dtype:
    import numpy as np  # here, so that building networks does not need numpy

    names, formats, offsets = zip(*QLOG_FIELDS)
    return np.dtype({"names": list(names), "formats": list(formats), "offsets": list(offsets),
                     "itemsize": QLOG_RECORD_BYTES})


def read_qlog(path: str | Path) -> np.ndarray:
    """A queue log as a structured array (fields t_ns, value, backlog_bytes, backlog_pkts,
    kind, reason). A partly written last record is left out."""
    import numpy as np

    data = Path(path).read_bytes()
    whole = len(data) - len(data) % QLOG_RECORD_BYTES
    return np.frombuffer(data[:whole], dtype=qlog_dtype()).copy()


def _try_read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None  # not there yet; the datapath replaces it atomically, so no torn reads


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    return lines[-1] if lines else "(it printed nothing)"


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
                    realtime: bool = False) -> dict[str, Any] | None:
    """How late this machine wakes a sleeping thread, as a worker sleeps (`bloatlab-link
    --timer`): {"sleep_ns", "count", "p50_ns", "p99_ns", "max_ns", "cpu_ns", "rt_priority"}
    (cpu_ns: the CPU time one sleep took; rt_priority: the real-time priority it slept at, as
    the workers do, when `realtime` and allowed, else None); None without the binary."""
    try:
        binary = capabilities.binary(BINARY_NAME)
        argv = [str(binary), "--timer", str(sleep_ns), str(count)] + (["--rt"] if realtime else [])
        done = proc.run(argv, timeout_s=10 + count * sleep_ns / 1e9 * 20)
        return json.loads(done.stdout)
    except (BloatlabError, json.JSONDecodeError):  # a machine or command error: the run goes on without it
        return None


def batching_share(before: dict[str, Any] | None, after: dict[str, Any] | None) -> float | None:
    """The share of the datapath's report periods between two of its stats documents in which
    its links batched departures (sched.rs CpuPressure); None where it never batches (off, or no
    PSI) or no period ended between them."""
    b0, b1 = (before or {}).get("batching") or {}, (after or {}).get("batching") or {}
    if not b1:
        return None
    periods = b1.get("periods", 0) - b0.get("periods", 0)
    return (b1.get("periods_batching", 0) - b0.get("periods_batching", 0)) / periods if periods > 0 else None


# The sentinel (bloatlab-link's sentinel.rs) sleeps as the workers sleep, one real-time step above
# them, throughout a run while frames flow: the machine's own lateness under the run's load. Fewer
# sleeps than this say too little to judge by; the idle timer stands in.
SENTINEL_MIN_SLEEPS = 100


def sentinel(datapath: dict[str, Any] | None) -> dict[str, Any] | None:
    """The machine's wake-up lateness under the run's load, as the datapath's sentinel met it:
    {"p99_ns" (of its sleeps), "at_random_p99_ns" (of a moment taken at random while it slept,
    which is how a stall meets departures: in proportion to how long it lasts), "max_ns",
    "count", "sleep_ns", "cpu_ns"}; None without enough of its sleeps."""
    s = (datapath or {}).get("sentinel") or {}
    late = s.get("late_ns") or {}
    if late.get("count", 0) < SENTINEL_MIN_SLEEPS:
        return None
    return {"p99_ns": late["p99"], "at_random_p99_ns": (s.get("late_at_random_ns") or {}).get("p99", late["p99"]),
            "max_ns": late.get("max", 0), "count": late["count"], "sleep_ns": s.get("sleep_p50_ns"),
            "cpu_ns": s.get("cpu_ns")}


def _allowed_ns(timer: dict[str, Any] | None, datapath: dict[str, Any] | None) -> tuple[float | None, str]:
    """What the machine allows a departure, in ns (None: no figure to judge by), and whose figure
    it is: under the run's load, the sentinel's p99 lateness at a moment taken at random (a
    departure falls due at any moment, so a stall of 12 ms holds up what falls due in those
    12 ms, where among the sentinel's sleeps it is one in thousands), else the idle timer's p99
    at the start; plus what a worker adds to a wake-up (reading its ring, handing the frame on)."""
    if (watch := sentinel(datapath)) is not None:
        return max(watch["at_random_p99_ns"], watch["p99_ns"]) + TIMER_ALLOWANCE_US * 1e3, "sentinel"
    if timer and timer.get("p99_ns") is not None:
        return timer["p99_ns"] + TIMER_ALLOWANCE_US * 1e3, "timer"
    return None, ""


def lateness(stats: dict[str, dict[str, Any]], timer: dict[str, Any] | None,
             datapath: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The run's worst departure lateness (p99 of the direction where it is highest) beside what
    the machine allows: the sentinel's p99 wake-up lateness under the run's load (or, without
    it, the idle timer's p99 at the start) plus TIMER_ALLOWANCE_US; and what the datapath added
    beyond the machine's own. None without a userspace direction that sent anything."""
    late = {name: d["depart_error_ns"] for name, d in stats.items() if d.get("depart_error_ns", {}).get("count")}
    if not late:
        return None
    worst = max(late, key=lambda name: late[name].get("p99", 0))
    doc: dict[str, Any] = {"direction": worst, "p99_us": late[worst]["p99"] / 1e3, "max_us": late[worst].get("max", 0) / 1e3,
                           "timer_p99_us": None, "sentinel_p99_us": None, "sentinel_at_random_p99_us": None,
                           "sentinel_sleep_us": None, "allowed_us": None, "within": None, "added_us": None}
    if timer and timer.get("p99_ns") is not None:
        doc["timer_p99_us"] = timer["p99_ns"] / 1e3
    if (watch := sentinel(datapath)) is not None:
        doc["sentinel_p99_us"] = watch["p99_ns"] / 1e3
        doc["sentinel_at_random_p99_us"] = watch["at_random_p99_ns"] / 1e3
        doc["sentinel_sleep_us"] = watch["sleep_ns"] / 1e3 if watch["sleep_ns"] else None
    allowed_ns, _ = _allowed_ns(timer, datapath)
    if allowed_ns is not None:
        doc["allowed_us"] = allowed_ns / 1e3
        doc["within"] = doc["p99_us"] <= doc["allowed_us"]
        doc["added_us"] = max(0.0, doc["p99_us"] - doc["allowed_us"])
    return doc


def worker_shares(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Each worker's CPU between two reads of the stats file, in % of one core, by name: in its
    own code (user_pct) and in the kernel (kernel_pct), with the directions it serves."""
    def cpu(stats: dict[str, Any] | None, name: str) -> dict[str, int] | None:
        return next((w.get("cpu") for w in (stats or {}).get("workers") or [] if w.get("name") == name), None)

    out = {}
    for w in (after or {}).get("workers") or []:
        c0, c1 = cpu(before, w["name"]), w.get("cpu")
        if not c0 or not c1 or c1["wall_ns"] <= c0["wall_ns"]:
            continue
        wall = c1["wall_ns"] - c0["wall_ns"]
        out[w["name"]] = {"user_pct": 100 * (c1["user_ns"] - c0["user_ns"]) / wall,
                          "kernel_pct": 100 * (c1["kernel_ns"] - c0["kernel_ns"]) / wall,
                          "directions": list(w.get("directions", []))}
    return out


# A worker busier than this over a run had no time to spare for its departures.
BUSY_SHARE = 0.9


def _cause(d: dict[str, Any], datapath: dict[str, Any] | None, woken_ns: float | None) -> str:
    """Why a direction's departures came late, from what its worker measured: short of CPU (busy
    through the run), kept from its CPU (its own wake-ups later than the machine allows), or its
    own work between departures."""
    workers = (datapath or {}).get("workers") or []
    w = workers[d["worker"]] if isinstance(d.get("worker"), int) and d["worker"] < len(workers) else None
    cpu = (w or {}).get("cpu") or {}
    if not cpu.get("wall_ns"):
        return "the datapath was short of CPU for this traffic"
    busy = (cpu["user_ns"] + cpu["kernel_ns"]) / cpu["wall_ns"]
    kernel = 100 * cpu["kernel_ns"] / cpu["wall_ns"]
    wakeups = (w.get("wakeups_late_ns") or {}).get("p99")
    if busy >= BUSY_SHARE:
        return (f"the datapath was short of CPU for this traffic (its worker, {w['name']}, busy {100 * busy:.0f}% of a core "
                f"over the run, {kernel:.0f} of it in the kernel: the frames' copies and the receiving host's stack)")
    if woken_ns is not None and wakeups is not None and wakeups > woken_ns:
        return (f"its worker ({w['name']}, busy {100 * busy:.0f}% of a core) woke {wakeups / 1e3:.0f} us late at p99, later "
                "than the machine's sentinel: it was kept from its CPU (demoted to normal priority while the datapath "
                "took more than its share, or behind another real-time task)")
    return (f"its worker ({w['name']}) was busy only {100 * busy:.0f}% of a core and woke on time: the lateness is its own "
            "work between departures (a send runs the receiving host's stack inline)")


def lag_warnings(stats: dict[str, dict[str, Any]], timer: dict[str, Any] | None = None,
                 datapath: dict[str, Any] | None = None) -> list[str]:
    """What the run's numbers owe to the userspace datapath falling behind, per direction:
    departures late by a millisecond or more at p99 (a queue no link asked for) beyond what the
    machine's own wake-ups allowed under the run's load, with the cause its worker measured; and
    frames lost outside the emulated link (its input ring full, or refused on the way out).
    Lateness within the machine's own is not the datapath's: the run's summary states both."""
    out = []
    allowed_ns, whose = _allowed_ns(timer, datapath)
    # A worker's own timed wake-ups are judged, sleep by sleep, against the sentinel's.
    watch = sentinel(datapath)
    woken_ns = watch["p99_ns"] + TIMER_ALLOWANCE_US * 1e3 if watch is not None else allowed_ns
    for name, d in stats.items():
        late = d.get("depart_error_ns", {})
        if late.get("p99", 0) >= LAG_WARN_NS and (allowed_ns is None or late["p99"] > allowed_ns):
            if allowed_ns is None:
                beyond = ""
            elif whose == "sentinel":
                beyond = (f"beyond the machine's own stalls under this load ({allowed_ns / 1e3:.0f} us: the sentinel's p99 "
                          f"at a random moment {allowed_ns / 1e3 - TIMER_ALLOWANCE_US:.0f} us + {TIMER_ALLOWANCE_US:.0f}); ")
            else:
                beyond = (f"beyond what this machine allows ({allowed_ns / 1e3:.0f} us: its idle timer's p99 "
                          f"{allowed_ns / 1e3 - TIMER_ALLOWANCE_US:.0f} us + {TIMER_ALLOWANCE_US:.0f}); ")
            out.append(f"{name}: the datapath fell behind: departures {late['p99'] / 1e6:.1f} ms late at p99 "
                       f"(max {late.get('max', 0) / 1e6:.1f} ms), delay no link asked for; {beyond}"
                       + _cause(d, datapath, woken_ns))
        drops = d.get("drops", {})
        lost = drops.get("rx_overrun", 0) + drops.get("tx_error", 0)
        if lost:
            out.append(f"{name}: {lost} frames lost outside the emulated link (rx_overrun {drops.get('rx_overrun', 0)}, "
                       f"tx_error {drops.get('tx_error', 0)}): the datapath could not keep up")
    return out


def capture_warnings(stats: dict[str, dict[str, Any]]) -> list[str]:
    """What a capture is missing, per captured direction: packets past its size limit, packets
    lost because the disk fell behind, and the writer's error."""
    out = []
    for name, d in stats.items():
        capture = d.get("capture")
        if not capture:
            continue
        for what in ("departures", "drops"):
            f = capture.get(what, {})
            if f.get("cut"):
                out.append(f"{name}: the capture of its {what} reached probes.pcap_limit at {f.get('bytes', 0) / 1e6:.1f} MB; "
                           f"{f['cut']} of {f['cut'] + f.get('written', 0)} packets are not in it (raise pcap_limit, "
                           "or lower pcap_snaplen)")
            if f.get("lost"):
                out.append(f"{name}: the capture of its {what} lost {f['lost']} packets: the disk fell behind "
                           "(the link ran on; lower pcap_snaplen or write to a faster disk)")
        if capture.get("error"):
            out.append(f"{name}: the capture stopped: {capture['error']}")
    return out

