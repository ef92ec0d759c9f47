"""An arrival trace through one of ns-3's own queue discs (the driver's replay mode), to hold the
core's disciplines against ns-3's on the same packets: `bloatlab replay` runs the core over the
same trace (docs/simulation.md has the figures and the differences that remain).
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

from bloatlab.sim import driver
from bloatlab.sim.scenario import queue_attributes
from bloatlab.specs.model import DirectionSpec, QueueSpec
# The driver writes bloatlab's own drop reason codes.
from bloatlab.testbed.datapath import DROP_REASONS



def replay_in_ns3(arrivals: Path, queue: QueueSpec, rate_bps: int, out: Path, timeout_s: float = 600) -> Counter[str]:
    """Packets sent, and dropped per reason, when ns-3's queue disc for `queue` serves the trace
    (bloatlab replay's CSV: t_ns,size_bytes,flow,ecn) at `rate_bps`."""
    attrs = queue_attributes(DirectionSpec(rate_bps=rate_bps, queue=queue), "--queue")
    out.mkdir(parents=True, exist_ok=True)
    scenario = out / "scenario.txt"
    scenario.write_text(f"replay arrivals={arrivals} rate_bps={rate_bps} discipline={queue.discipline} "
                        + " ".join(f"q.{k}={v}" for k, v in attrs.items()) + "\n")
    driver.run(driver.build(say=False), scenario, out, timeout_s)
    fates: Counter[str] = Counter()
    with open(out / "replay.csv", newline="") as f:
        for row in csv.DictReader(f):
            fates["sent" if row["fate"] == "sent" else DROP_REASONS.get(int(row["reason"]), row["reason"])] += 1
    return fates
