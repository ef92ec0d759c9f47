"""The live view beside a run: `bloatlab view` in a child process at the lowest priority, from
before the run starts to after it ends (the page then links the report), until Ctrl-C. `run
--live` starts it; so does `bench live`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from bloatlab import proc
from bloatlab.errors import MachineError
from bloatlab.interrupts import Interrupts
from bloatlab.live.address import check_listen

START_TIMEOUT_S = 15.0


class ViewProcess:
    """`bloatlab view OUT` as our child; `url` is where it serves."""

    def __init__(self, out: Path, listen: str, allow_remote: bool, field: str = "--live"):
        check_listen(listen, allow_remote, field)  # a bad address fails here, before anything is built
        argv = [sys.executable, "-m", "bloatlab", "view", str(out), "--wait", "--quiet", "--listen", listen,
                "--parent", str(os.getpid())] + (["--allow-remote"] if allow_remote else [])
        # One pipe for both: its first line is the URL, or what went wrong; then it is drained.
        self.child = proc.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            self.url = self._url(field)
        except BaseException:
            proc.stop(self.child)
            raise
        threading.Thread(target=_drain, args=(self.child.stdout,), daemon=True, name="bloatlab-view-drain").start()

    def _url(self, field: str) -> str:
        line = _readline(self.child.stdout, START_TIMEOUT_S)
        if not line.startswith("bloatlab view: "):
            proc.stop(self.child)
            said = [line.strip()] + (self.child.stdout.read().strip().splitlines() if self.child.stdout else [])
            said = [s for s in said if s]
            raise MachineError(f"the live view did not start: {said[-1] if said else 'no answer'}", field=field)
        return line.removeprefix("bloatlab view: ").strip()

    def linger(self) -> None:
        """Serve on after the run, until Ctrl-C (or SIGTERM, SIGHUP)."""
        if self.child.poll() is not None:
            return
        print(f"bloatlab: the live view stays at {self.url} until Ctrl-C", file=sys.stderr, flush=True)
        with Interrupts():
            try:
                while self.child.poll() is None:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass

    def close(self) -> None:
        proc.stop(self.child, signal.SIGTERM)


def _drain(stream: IO[str] | None) -> None:
    """Read a child's output to its end (a pipe left full would stop it)."""
    try:
        while stream is not None and stream.read(65536):
            pass
    except (OSError, ValueError):
        pass


def _readline(stream: IO[str] | None, timeout_s: float) -> str:
    """A line from a child's pipe, or "" after timeout_s."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline() if stream else ""), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return got[0] if got else ""
