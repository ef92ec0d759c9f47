"""`bloatlab bench sim`: how fast a simulated run is, and how close it lands to the emulated one.

The CS244 experiment (h1 - s0 - h2, 10 Mbit/s bottleneck, 20 ms base RTT) at one queue size,
simulated in ns-3 (the driver built first, and its build timed apart), then emulated in
namespaces on this machine as the same-run baseline: the wall time of each, and goodput, RTT
and queue from both, with the targets: the simulation within TARGET_SIM_S of wall time, the two
within 3% on goodput and 10% on the median RTT.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from bloatlab.experiment.record import BulkSummary, QueueSummary
from bloatlab.lab.run import run_experiment
from bloatlab.results.summary import RttStats, RunSummary
from bloatlab.sim import driver
from bloatlab.specs.experiment import load_preset
from bloatlab.version import __version__

TARGET_SIM_S = 10.0  # a simulated 60 s cs244, once the driver is built
GOODPUT_TOLERANCE = 0.03
RTT_MEDIAN_TOLERANCE = 0.10


def _numbers(summary: RunSummary) -> dict[str, float | None]:
    rtt = summary.rtt_ms or RttStats.unmeasured()
    queue = next(iter((summary.queue or {}).values()), None) or QueueSummary.unmeasured()
    bulk = (summary.flows or {}).get("bulk")
    return {"goodput_mbps": bulk.goodput_mbps if isinstance(bulk, BulkSummary) else None,
            "rtt_min_ms": rtt.min, "rtt_median_ms": rtt.median, "rtt_p95_ms": rtt.p95, "rtt_max_ms": rtt.max,
            "queue_mean_pkts": queue.mean_pkts, "queue_max_pkts": queue.max_pkts,
            "fetch_mean_s": summary.fetch_s.mean if summary.fetch_s is not None else None}


def run_sim_bench(maxq: int, duration: str, out_dir: Path, emulated: bool = True) -> dict[str, Any]:
    """Both runs into OUT/ns3 and OUT/emulation; the document bench-sim.json holds."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    driver.build()
    build_s = time.monotonic() - t
    sets = [f"maxq={maxq}", f"duration={duration}"]
    results: dict[str, Any] = {}
    for backend in ("ns3", "emulation") if emulated else ("ns3",):
        exp = load_preset("cs244", sets, backend=backend)
        t = time.monotonic()
        outcome = run_experiment(exp, out_dir / backend, progress=False)
        results[backend] = {"wall_s": time.monotonic() - t, "complete": outcome.complete, "reason": outcome.reason,
                            **_numbers(outcome.summary)}
    targets = verdicts(results)
    doc = {"bloatlab_version": __version__, "ns3": driver.ns3_version(), "cpus": os.cpu_count(),
           "experiment": f"cs244 maxq={maxq} duration={duration}", "driver_build_s": build_s,
           "results": results, "targets": targets}
    (out_dir / "bench-sim.json").write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def verdicts(results: dict[str, Any]) -> list[str]:
    sim = results["ns3"]
    out = [f"{'ok  ' if sim['wall_s'] <= TARGET_SIM_S else 'MISS'} simulated in {sim['wall_s']:.1f} s of wall time "
           f"(<= {TARGET_SIM_S:g} s)"]
    emu = results.get("emulation")
    if emu is None:
        return out
    out.append(f"note emulated in {emu['wall_s']:.1f} s of wall time: the simulation took "
               f"{sim['wall_s'] / emu['wall_s']:.0%} of it")
    for key, tolerance in (("goodput_mbps", GOODPUT_TOLERANCE), ("rtt_median_ms", RTT_MEDIAN_TOLERANCE)):
        a, b = sim.get(key), emu.get(key)
        if a is None or b is None:
            out.append(f"MISS {key}: not measured (ns3 {a}, emulation {b})")
            continue
        diff = a / b - 1
        out.append(f"{'ok  ' if abs(diff) <= tolerance else 'MISS'} {key} {a:.2f} simulated, {b:.2f} emulated: "
                   f"{diff:+.1%} ({tolerance:.0%})")
    return out


def render(doc: dict[str, Any]) -> str:
    results = doc["results"]
    keys = list(next(iter(results.values())).keys())
    width = max(len(k) for k in keys)
    lines = [f"{doc['experiment']}; ns-3 {doc['ns3']}; driver build {doc['driver_build_s']:.1f} s (0 when cached)",
             f"{'':{width}}  " + "  ".join(f"{b:>10}" for b in results)]
    for key in keys:
        cells = []
        for r in results.values():
            v = r[key]
            cells.append(f"{v:>10.3f}" if isinstance(v, float) else f"{str(v):>10}")
        lines.append(f"{key:{width}}  " + "  ".join(cells))
    return "\n".join(lines)
