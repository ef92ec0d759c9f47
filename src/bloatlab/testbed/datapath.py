"""The Python side of the `bloatlab-link` contract (docs/datapath.md).

Owns the datapath's config JSON, starting and stopping the process, and reading what it
writes: the stats file (into typed records, DatapathStats) and the binary queue logs.
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
from bloatlab.errors import MachineError
from bloatlab.specs.model import DirectionSpec
from bloatlab.testbed import capabilities
from bloatlab.testbed.datapath_stats import DatapathStats, read_json_if_any, read_stats, read_stats_if_any

if TYPE_CHECKING:
    import numpy as np

BINARY_NAME = "bloatlab-link"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0

# Queue log records: 32 bytes, little-endian, 6 bytes of padding at the end.
QLOG_RECORD_BYTES = 32
QLOG_FIELDS = (("t_ns", "<u8", 0), ("value", "<u8", 8), ("backlog_bytes", "<u4", 16),
               ("backlog_pkts", "<u4", 20), ("kind", "u1", 24), ("reason", "u1", 25))
KIND_ENQUEUE, KIND_DEQUEUE, KIND_DROP, KIND_MARK, KIND_PROB = 1, 2, 3, 4, 5
# A KIND_PROB record's value: the discipline's probability (dualpi2's p', pie's drop probability)
# in parts per 2^32, so value / PROB_ONE is the probability.
PROB_ONE = 1 << 32
# Codes as in the core's DropReason and MarkReason (datapath/core/src/reason.rs; bloatlab-link --describe).
DROP_REASONS = {1: "loss", 2: "queue_full", 3: "head_drop", 4: "oversize", 5: "runt", 6: "red_early",
                7: "red_forced", 8: "codel", 9: "pie_early", 10: "fq_overflow", 11: "cobalt", 12: "blue",
                13: "cake_overflow", 14: "ack_filter", 15: "dualpi2_classic", 16: "dualpi2_overload"}
MARK_REASONS = {1: "red_early", 2: "red_forced", 3: "codel", 4: "pie", 5: "cobalt", 6: "dualpi2_classic",
                7: "dualpi2_coupled", 8: "dualpi2_step"}
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
                if read_json_if_any(stats_path) is not None:
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

    def stats(self) -> DatapathStats:
        if self.stats_path is None:
            raise MachineError(f"the stats file of {BINARY_NAME} {self.pid} is not known")
        return read_stats(self.stats_path)

    def final_stats(self, timeout_s: float = STOP_TIMEOUT_S) -> DatapathStats | None:
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
            if stats is not None and not stats.running:
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


def qlog_dtype() -> np.dtype:
    import numpy as np  # here, so that building networks does not need numpy

    names, formats, offsets = zip(*QLOG_FIELDS)
    return np.dtype({"names": list(names), "formats": list(formats), "offsets": list(offsets),
                     "itemsize": QLOG_RECORD_BYTES})


def read_qlog(path: str | Path) -> np.ndarray:
    """A queue log as a structured array (fields t_ns, value, backlog_bytes, backlog_pkts,
    kind, reason; KIND_PROB records' value / PROB_ONE is a probability). A partly written last
    record is left out."""
    return qlog_records(Path(path).read_bytes())


def qlog_records(data: bytes) -> np.ndarray:
    """Queue-log records from bytes of the log (its whole, or what a reader following it read
    since its last whole record); a partly written last record is left out."""
    import numpy as np

    whole = len(data) - len(data) % QLOG_RECORD_BYTES
    return np.frombuffer(data[:whole], dtype=qlog_dtype()).copy()


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    return lines[-1] if lines else "(it printed nothing)"
