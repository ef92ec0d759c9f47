"""Progress of long work on the terminal: a bar with the time left, redrawn in place on a
TTY; on a pipe or a log file, one plain line every `every_s`."""

from __future__ import annotations

import sys
from typing import TextIO

BAR_WIDTH = 30


class Progress:
    def __init__(self, total_s: float, label: str, stream: TextIO | None = None, every_s: float = 10.0):
        self.total_s = max(total_s, 1e-9)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self._last_line = -every_s
        self._shown = False

    def update(self, done_s: float, note: str = "") -> None:
        done_s = min(max(done_s, 0.0), self.total_s)
        left = self.total_s - done_s
        if self.tty:
            filled = int(BAR_WIDTH * done_s / self.total_s)
            bar = "#" * filled + "-" * (BAR_WIDTH - filled)
            text = f"\r{self.label} [{bar}] {done_s:5.0f}/{self.total_s:.0f} s, {left:.0f} s left {note}"
            self.stream.write(text.ljust(100)[:120])
            self._shown = True
        elif done_s - self._last_line >= self.every_s:
            self.stream.write(f"{self.label}: {done_s:.0f}/{self.total_s:.0f} s, {left:.0f} s left {note}".rstrip() + "\n")
            self._last_line = done_s
        self.stream.flush()

    def finish(self, message: str = "") -> None:
        if self.tty and self._shown:
            self.stream.write("\r" + " " * 120 + "\r")
        if message:
            self.stream.write(message + "\n")
        self.stream.flush()
