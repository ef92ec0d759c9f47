"""The Python side of the `bloatlab-link` contract (docs/datapath.md).

Owns the datapath's config JSON, starting and stopping the process, and reading what it
writes: the stats file and the binary queue logs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import MachineError
from .state import process_alive, process_starttime, terminate
from .topology import DirectionSpec

if TYPE_CHECKING:
    import numpy as np

BINARY_NAME = "bloatlab-link"
REPO_BINARY = Path(__file__).resolve().parents[2] / "target" / "release" / BINARY_NAME  # make setup
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0

# Queue log records: 32 bytes, little-endian, 6 bytes of padding at the end.
QLOG_RECORD_BYTES = 32
QLOG_FIELDS = (("t_ns", "<u8", 0), ("value", "<u8", 8), ("backlog_bytes", "<u4", 16),
               ("backlog_pkts", "<u4", 20), ("kind", "u1", 24), ("reason", "u1", 25))
KIND_ENQUEUE, KIND_DEQUEUE, KIND_DROP, KIND_MARK = 1, 2, 3, 4
# Codes as in the core's DropReason and MarkReason (datapath/core/src/qdisc/mod.rs).
DROP_REASONS = {1: "loss", 2: "queue_full", 3: "head_drop", 4: "oversize", 5: "runt", 6: "red_early",
                7: "red_forced", 8: "codel", 9: "pie_early", 10: "fq_overflow"}
MARK_REASONS = {1: "red_early", 2: "red_forced", 3: "codel", 4: "pie"}
# Drops before the queue: emulated loss and frames the link cannot carry.
PRE_QUEUE_DROP_REASONS = (1, 4, 5)


def find_binary() -> Path:
    """$BLOATLAB_LINK, else <repo>/target/release/bloatlab-link, else bloatlab-link on PATH."""
    return find_program(BINARY_NAME, "BLOATLAB_LINK", REPO_BINARY, "the userspace backend needs it")


def find_program(name: str, env_var: str, repo_path: Path, needed_by: str) -> Path:
    """One of the repository's Rust binaries: $ENV_VAR, else the build's, else on PATH."""
    if env := os.environ.get(env_var):
        if not os.access(env, os.X_OK):
            raise MachineError(f"{env} is not an executable file; fix the variable or unset it", field=env_var)
        return Path(env)
    if os.access(repo_path, os.X_OK):
        return repo_path
    if on_path := shutil.which(name):
        return Path(on_path)
    raise MachineError(f"{name} not found ({needed_by}); run make setup, or set {env_var} to its path")


def direction_config(direction: DirectionSpec, seed: int) -> dict[str, Any]:
    config = {**direction.to_dict(), "seed": seed}
    if direction.trace is not None:  # the datapath's working directory is not the spec's
        config["trace_path"] = str(Path(direction.trace).resolve())
    return config


def write_config(path: Path, *, netns: str | None, stats_path: Path, log_dir: Path | None,
                 links: list[dict[str, Any]]) -> None:
    """Write the config; `links` holds {"name", "a_iface", "b_iface", "forward", "reverse"}."""
    config = {"netns": netns, "stats_path": str(stats_path),
              "log_dir": str(log_dir) if log_dir else None, "links": links}
    if netns is None:
        del config["netns"]  # absent means "stay in the current namespace"
    path.write_text(json.dumps(config, indent=2) + "\n")


class Datapath:
    """A running bloatlab-link, known by pid and start time (so a recycled pid is never hit)."""

    def __init__(self, pid: int, starttime: int | None, stats_path: Path | None = None,
                 proc: subprocess.Popen | None = None):
        self.pid = pid
        self.starttime = starttime
        self.stats_path = stats_path
        self._proc = proc  # when it is our child

    @classmethod
    def start(cls, config_path: Path, stats_path: Path, log_path: Path, *,
              detach: bool = False, timeout_s: float = START_TIMEOUT_S) -> Datapath:
        """Start bloatlab-link and return once its stats file exists."""
        argv = [str(find_binary()), "--config", str(config_path)] + (["--detach"] if detach else [])
        stats_path.unlink(missing_ok=True)  # never mistake an old file for a sign of life
        with open(log_path, "ab") as log:
            # A detached datapath gets its own session: a terminal's hangup or Ctrl-C after
            # `bloatlab up` has returned must not reach it.
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=detach)
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if _try_read_json(stats_path) is not None:
                    return cls(proc.pid, process_starttime(proc.pid), stats_path, proc)
                if proc.poll() is not None:
                    raise MachineError(f"{BINARY_NAME} exited with status {proc.returncode} before it "
                                       f"was ready: {_last_line(log_path)}")
                time.sleep(0.02)
            raise MachineError(f"{BINARY_NAME} wrote no stats file within {timeout_s:g} s "
                               f"(last log line: {_last_line(log_path)})")
        except BaseException:  # also Ctrl-C: a datapath that never got ready is not left running
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            raise

    def alive(self) -> bool:
        return process_alive(self.pid, self.starttime)

    def stats(self) -> dict[str, Any]:
        if self.stats_path is None:
            raise MachineError(f"the stats file of {BINARY_NAME} {self.pid} is not known")
        return read_stats(self.stats_path)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM (it flushes logs and final stats), SIGKILL after timeout_s. True if it ran."""
        ended = terminate([(self.pid, self.starttime)], timeout_s)
        if self._proc is not None:
            self._proc.wait()  # reap our child
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
