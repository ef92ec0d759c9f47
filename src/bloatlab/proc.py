"""Running commands and knowing processes: the one place bloatlab starts a subprocess.

    run(argv)            to completion, with a timeout; a failure is a CommandError that quotes
                         the command and the last line it printed on stderr
    spawn(argv)          in the background; stop(popen) ends and reaps it
    ns=NAME              either one inside a named network namespace (`ip netns exec`, which
                         also bind-mounts /etc/netns/NAME files)

Processes that outlive the Python object that started them (a detached datapath, a network
built by `bloatlab up`) are known by pid and start time (/proc/PID/stat), so a pid that the
kernel has since given to another process is never signalled.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bloatlab import interrupts
from bloatlab.errors import MachineError

log = logging.getLogger(__name__)

RUN_TIMEOUT_S = 60.0  # no command bloatlab runs to completion should take longer


class CommandError(MachineError):
    """A command failed, or did not end in time."""

    def __init__(self, argv: Sequence[str], stderr: str, returncode: int | None = None):
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        detail = lines[-1] if lines else "failed with no message"
        super().__init__(f"`{shlex.join(argv)}` failed: {detail}")
        self.argv = list(argv)
        self.stderr = stderr
        self.returncode = returncode

    def __reduce__(self):
        return type(self), (self.argv, self.stderr, self.returncode)


def in_namespace(ns: str | None, argv: Sequence[str]) -> list[str]:
    """The argv that runs `argv` inside namespace `ns` (as it is, for None)."""
    return ["ip", "netns", "exec", ns, *argv] if ns else list(argv)


def run(argv: Sequence[str], *, ns: str | None = None, input: str | None = None,
        timeout_s: float | None = RUN_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command to completion and capture its output (text).

    check: a non-zero exit raises CommandError; without it the caller reads returncode. A
    command that is not installed or cannot be started raises MachineError either way; one that
    outlives timeout_s is killed, reaped and raises CommandError.
    """
    full = in_namespace(ns, argv)
    log.debug("run: %s", shlex.join(full))
    child: subprocess.Popen | None = None
    try:
        with interrupts.held() as hold:
            child = subprocess.Popen(full, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if hold.signalled:  # a stop signal came while it was started: now it can be waited for
            raise KeyboardInterrupt
        stdout, stderr = child.communicate(input, timeout=timeout_s)
    except subprocess.TimeoutExpired as expired:
        if _settle(child, 0.0):
            raise KeyboardInterrupt from None
        stderr = expired.stderr.decode(errors="replace") if isinstance(expired.stderr, bytes) else expired.stderr
        raise CommandError(full, f"{stderr or ''}\ntimed out after {timeout_s:g} s") from None
    except OSError as error:
        if child is not None:
            if _settle(child, 0.0):
                raise KeyboardInterrupt from None
            raise
        if hold.signalled:
            raise KeyboardInterrupt from None
        if isinstance(error, FileNotFoundError):
            raise MachineError(f"`{full[0]}` is not installed (see bloatlab doctor)") from None
        raise MachineError(f"`{full[0]}` cannot be run: {error.strerror}") from None  # not executable, say
    except BaseException:
        if child is not None:
            # Whatever the command was doing (making a namespace, say) is done or undone
            # before the caller, interrupted, removes what was made.
            _settle(child, 1.0)
        raise
    if check and child.returncode != 0:
        raise CommandError(full, stderr, child.returncode)
    return subprocess.CompletedProcess(full, child.returncode, stdout, stderr)


def _settle(child: subprocess.Popen, grace_s: float) -> bool:
    """Lets a command that run() gives up on finish for `grace_s` (bloatlab's take
    milliseconds; its output is drained meanwhile), then kills it; either way it is reaped and
    its pipes closed. A stop signal meanwhile is noted, not raised, so the child is never left
    running unreaped; returns whether one came, for the caller to raise."""
    with interrupts.held() as hold:
        if grace_s > 0:
            try:
                child.communicate(timeout=grace_s)
            except (subprocess.TimeoutExpired, ValueError, OSError):
                pass
        if child.poll() is None:
            child.kill()
            child.wait()  # not communicate(): a grandchild may hold the pipes open
        for pipe in (child.stdin, child.stdout, child.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
    return hold.signalled


def output(argv: Sequence[str], **kwargs: Any) -> str:
    """run() and return what the command printed on stdout."""
    return run(argv, **kwargs).stdout


def spawn(argv: Sequence[str], *, ns: str | None = None, **popen: Any) -> subprocess.Popen:
    """Start a command in the background; popen's keywords go to subprocess.Popen (stdin is
    /dev/null unless given). The caller ends it with stop(), or waits for it: it is our child,
    and this machine's init reaps orphans late."""
    full = in_namespace(ns, argv)
    log.debug("spawn: %s", shlex.join(full))
    popen.setdefault("stdin", subprocess.DEVNULL)
    try:
        return subprocess.Popen(full, **popen)
    except FileNotFoundError:
        raise MachineError(f"`{full[0]}` is not installed (see bloatlab doctor)") from None
    except OSError as error:
        raise MachineError(f"`{full[0]}` cannot be run: {error.strerror}") from None


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 3.0) -> int:
    """End a child: `sig` if it still runs (SIGINT lets ping and iperf3 print their summaries),
    SIGKILL after timeout_s; always reaped. Its exit status."""
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


# Processes that are not (or no longer) our children ------------------------------------------

def starttime(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks after boot); None if there is no such process."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def alive(pid: int, started: int | None) -> bool:
    """True if `pid` runs and is the process that started at `started` (a zombie is dead)."""
    fields = _stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return False
    return started is None or int(fields[19]) == started


def owner_alive(owner: object) -> bool | None:
    """Whether the process a results file names as its owner ({"pid", "starttime"}, run.json's and
    sweep.json's) still runs; None when it names none."""
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return None
    started = owner.get("starttime")
    return alive(owner["pid"], started if isinstance(started, int) else None)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    return stat[stat.rindex(")") + 2:].split()


def identify(pid: int) -> tuple[int, int | None]:
    return pid, starttime(pid)


def terminate(processes: list[tuple[int, int | None]], timeout_s: float = 2.0) -> list[int]:
    """SIGTERM each live process, SIGKILL those still alive after timeout_s; return the pids hit."""
    hit = [(pid, start) for pid, start in processes if alive(pid, start)]
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 2.0)):
        for pid, start in hit:
            if alive(pid, start):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(alive(p, s) for p, s in hit):
            time.sleep(0.005)
        if not any(alive(p, s) for p, s in hit):
            break
    return [pid for pid, _ in hit]
