"""Stop signals (SIGINT, SIGTERM, SIGHUP) as KeyboardInterrupt, and never lost.

A handler's exception that fires inside a finaliser or an at-fork hook (subprocess runs
Python's at-fork hooks when it starts a child with preexec_fn) is only printed, never
raised: the stop would be lost. So the handler also notes the signal, and the loops of long
work (and the end of a network's build) call check(), which raises what was noted but not
yet acted on. While that is so, Python's "Exception ignored" report of the lost raise is not
printed: the stop is not ignored.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_active: list[Interrupts] = []
# Per thread; handlers run in the main thread, so they read the main thread's holds.
_local = threading.local()


class Interrupts:
    """While active, a stop signal raises KeyboardInterrupt; once `cleaning` is set, it is
    only noted, so a second Ctrl-C cannot leave half-removed what is being cleaned up."""

    def __init__(self, signals: tuple[int, ...] = SIGNALS):
        self.signals = signals
        self.cleaning = False
        self.received: int | None = None

    def __enter__(self) -> Interrupts:
        self.previous = {sig: signal.signal(sig, self._handle) for sig in self.signals}
        self.previous_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        _active.append(self)
        return self

    def _unraisable(self, unraisable) -> None:
        """A raise of ours that a finaliser could not pass on: check() raises it later."""
        if not (issubclass(unraisable.exc_type, KeyboardInterrupt) and self.received is not None):
            self.previous_hook(unraisable)

    def _handle(self, signum, frame) -> None:
        self.received = signum
        if self.cleaning:
            print("\nbloatlab: cleaning up, one moment", file=sys.stderr)
            return
        holds = getattr(_local, "holds", None)
        if holds:
            holds[-1].signalled = True
            return
        raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        _active.remove(self)
        sys.unraisablehook = self.previous_hook
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def check() -> None:
    """Raise KeyboardInterrupt if a stop signal came and its own raise may have been lost."""
    if any(i.received is not None and not i.cleaning for i in _active):
        raise KeyboardInterrupt


class Hold:
    signalled = False


@contextlib.contextmanager
def held() -> Iterator[Hold]:
    """While a child process is being started: a stop signal is noted in the Hold, not raised,
    and the caller raises it once it holds the child to wait for. Raised inside
    subprocess.Popen (which waits for the child's exec), it would orphan the child: an `ip
    netns add` then made its namespace after the teardown had looked for what to remove."""
    holds = _local.__dict__.setdefault("holds", [])
    hold = Hold()
    holds.append(hold)
    try:
        yield hold
    finally:
        holds.pop()
