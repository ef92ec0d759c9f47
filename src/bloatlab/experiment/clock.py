"""The run's clock: t0 on CLOCK_MONOTONIC, which every series counts from, and on the wall clock."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Clock:
    """The run's t0, on both clocks: series count seconds since t0_mono (CLOCK_MONOTONIC), and
    tools that stamp the wall clock (ping -D) are moved onto it with t0_real."""

    t0_mono: float = 0.0
    t0_real: float = 0.0

    def mark(self) -> None:
        self.t0_mono, self.t0_real = time.monotonic(), time.time()

    @property
    def started(self) -> bool:
        return self.t0_mono != 0.0

    def since_t0(self) -> float:
        return time.monotonic() - self.t0_mono
