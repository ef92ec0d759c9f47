"""`bloatlab bench replay`: how fast the replay runs each queue discipline in virtual time
(packets per second), over a synthetic arrival process (docs/bench.md)."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from bloatlab.lab.replay import n_packets, run_binary, write_config
from bloatlab.progress import Progress
from bloatlab.specs.model import DirectionSpec, QueueSpec
from bloatlab.specs.units import format_duration_ns, format_rate, parse_rate

DISCIPLINES = ("codel", "droptail", "fq_codel", "red", "pie", "cake")
TARGET_PPS = 5_000_000  # for CoDel
RATE = "10mbit"
LOAD = 1.2


def bench(disciplines: list[str], packets: int, repeats: int, say=print,
          progress: bool = False) -> dict[str, dict[str, Any]]:
    """Replays `packets` synthetic packets (poisson at LOAD times RATE, 1500 bytes,
    4 flows, a queue of 1000 packets, every fate written) through each discipline `repeats`
    times; per discipline the best and median packets per second. say() gets a line per
    discipline as it finishes; `progress` shows a display on stderr over every run."""
    rate_bps = parse_rate(RATE, "rate")
    say(f"replaying {n_packets(packets)} packets per run (poisson arrivals at {LOAD}x {format_rate(rate_bps)}, "
        f"1500 bytes, 4 flows, queue of 1000 packets, fates written), best and median of {repeats} runs\n")
    say(f"  {'discipline':<10} {'best Mpps':>9} {'median':>7} {'dropped':>8}  {'sojourn p99':>11}")
    results: dict[str, dict[str, Any]] = {}
    bar = Progress(1.0, "bench replay") if progress else None
    runs, done = len(disciplines) * repeats, 0
    with tempfile.TemporaryDirectory(prefix="bloatlab-bench-replay-") as tmp:
        for discipline in disciplines:
            direction = DirectionSpec(rate_bps=rate_bps, queue=QueueSpec(discipline, packets=1000))
            config = Path(tmp) / f"{discipline}.json"
            write_config(config, direction, 1)
            flags = ["--synthetic", "poisson", "--arrival-bps", str(round(LOAD * rate_bps)), "--size", "1500",
                     "--flows", "4", "--packets", str(packets)]
            rates = []
            for _ in range(repeats):
                summary = run_binary(config, Path(tmp) / discipline, flags)
                rates.append(summary["packets_per_s"])
                (Path(tmp) / discipline / "fates.csv").unlink()
                done += 1
                if bar is not None:
                    bar.update_fraction(done / runs, f"run {done}/{runs}")
            results[discipline] = {"best_pps": max(rates), "median_pps": statistics.median(rates), "runs_pps": rates,
                                   "dropped": summary["dropped_total"] / summary["packets"],
                                   "sojourn_p99_ns": summary["sojourn_ns"]["p99"]}
            r = results[discipline]
            if bar is not None:
                bar.finish()
            p99 = "-" if r["sojourn_p99_ns"] is None else format_duration_ns(r["sojourn_p99_ns"])
            say(f"  {discipline:<10} {r['best_pps'] / 1e6:>9.2f} {r['median_pps'] / 1e6:>7.2f} "
                f"{100 * r['dropped']:>7.1f}%  {p99:>11}")
    return results
