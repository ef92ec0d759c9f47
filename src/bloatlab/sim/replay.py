"""An arrival trace through one of ns-3's own queue discs (the driver's replay mode), to hold the
core's disciplines against ns-3's on the same packets: `bloatlab replay` runs the core over the
same trace (docs/simulation.md has the figures and the differences that remain).
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bloatlab.sim import driver
from bloatlab.sim.scenario import queue_attributes
from bloatlab.specs.model import DirectionSpec, QueueSpec
# The driver writes bloatlab's own drop and mark reason codes.
from bloatlab.testbed.datapath import DROP_REASONS, MARK_REASONS


@dataclass(frozen=True)
class Ns3Replay:
    """What ns-3's queue disc did with a trace: packets sent, dropped per reason, and marked CE
    per reason; a packet marked twice (DualPI2's coupled, then its step mark) counts once, under
    its last mark, as bloatlab replay's fates count it."""

    sent: int
    dropped: Counter[str] = field(default_factory=Counter)
    marked: Counter[str] = field(default_factory=Counter)


def replay_in_ns3(arrivals: Path, queue: QueueSpec, rate_bps: int, out: Path, timeout_s: float = 600) -> Ns3Replay:
    """What ns-3's queue disc for `queue` does with the trace (bloatlab replay's CSV:
    t_ns,size_bytes,flow,ecn) served at `rate_bps`."""
    attrs = queue_attributes(DirectionSpec(rate_bps=rate_bps, queue=queue), "--queue")
    out.mkdir(parents=True, exist_ok=True)
    scenario = out / "scenario.txt"
    scenario.write_text(f"replay arrivals={arrivals} rate_bps={rate_bps} discipline={queue.discipline} "
                        + " ".join(f"q.{k}={v}" for k, v in attrs.items()) + "\n")
    driver.run(driver.build(say=False), scenario, out, timeout_s)
    sent = 0
    dropped: Counter[str] = Counter()
    last_mark: dict[str, str] = {}  # by packet id
    with open(out / "replay.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["fate"] == "sent":
                sent += 1
            elif row["fate"] == "marked":
                last_mark[row["id"]] = MARK_REASONS.get(int(row["reason"]), row["reason"])
            else:
                dropped[DROP_REASONS.get(int(row["reason"]), row["reason"])] += 1
    return Ns3Replay(sent, dropped, Counter(last_mark.values()))
