"""Progress of long work on stderr: elapsed time and an estimate of what is left.

On a terminal a bar is redrawn in place; when stderr is a pipe or a log file, a plain line is
written every `every_s` instead, so logs stay readable. The work's total may be revised as it
goes (a sweep learns how long a run takes; a replay how fast it runs).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

BAR_WIDTH = 30


def clock(seconds: float) -> str:
    """12 s, 3:05, 1:02:03."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    def __init__(self, total_s: float, label: str, stream: TextIO | None = None, every_s: float = 10.0):
        self.total_s = max(total_s, 1e-9)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self.started = time.monotonic()
        self._last_line = 0.0  # plain lines: the first after every_s, so short work stays silent
        self._shown = False

    def update(self, done_s: float, note: str = "") -> None:
        """`done_s` of the work's `total_s` is done (for most work, the seconds it has run)."""
        done_s = min(max(done_s, 0.0), self.total_s)
        elapsed = time.monotonic() - self.started
        left = f"about {clock(self.total_s - done_s)} left"
        if self.tty:
            filled = int(BAR_WIDTH * done_s / self.total_s)
            bar = "#" * filled + "-" * (BAR_WIDTH - filled)
            text = f"\r{self.label} [{bar}] {clock(elapsed)} elapsed, {left} {note}"
            self.stream.write(text.ljust(100)[:120])
            self._shown = True
        elif elapsed - self._last_line >= self.every_s:
            self.stream.write(f"{self.label}: {clock(elapsed)} elapsed, {left} {note}".rstrip() + "\n")
            self._last_line = elapsed
        self.stream.flush()

    def update_fraction(self, fraction: float, note: str = "") -> None:
        """`fraction` of work of unknown length is done: the total is estimated from the time it
        has taken so far (a replay's packets, a benchmark's cases)."""
        elapsed = time.monotonic() - self.started
        if fraction > 0:
            self.total_s = max(elapsed / min(fraction, 1.0), 1e-9)
        self.update(elapsed, note)

    def finish(self, message: str = "") -> None:
        if self.tty and self._shown:
            self.stream.write("\r" + " " * 120 + "\r")
        if message:
            self.stream.write(message + "\n")
        self.stream.flush()


@contextmanager
def ticking(bar: Progress | None, start_s: float, span_s: float, note: str = "",
            every_s: float = 0.5) -> Iterator[None]:
    """Keeps `bar` moving while a step that cannot report runs (a benchmark case): from start_s
    towards start_s + span_s as the seconds pass. A bar of None: nothing."""
    if bar is None:
        yield
        return
    stop = threading.Event()
    began = time.monotonic()

    def tick() -> None:
        while not stop.wait(every_s):
            bar.update(start_s + min(time.monotonic() - began, span_s), note)

    thread = threading.Thread(target=tick, name="bloatlab-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
