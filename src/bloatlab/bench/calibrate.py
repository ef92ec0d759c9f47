"""`bloatlab bench calibrate`: parameter recovery. For each case an rrul run is made on a known
path (the rrul preset: h1 - s0 - h2, the s0-h2 link the bottleneck both ways, 5 ms a link: a
20 ms base RTT), exported with `export --flent`, and calibrated from that Flent file alone; the
fit is judged against the truth (issue 42's targets):

    rate each way   within RATE_TOLERANCE
    base RTT        within RTT_TOLERANCE_MS
    taildrop        its limit within LIMIT_TOLERANCE
    an AQM          the discipline itself
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

from bloatlab.errors import MachineError
from bloatlab.lab.calibration.job import calibrate
from bloatlab.lab.calibration.search import Settings
from bloatlab.lab.run import run_experiment
from bloatlab.results import flent
from bloatlab.results.measurement import read_measurement
from bloatlab.results.reader import load_run
from bloatlab.specs.experiment import load_preset
from bloatlab.specs.units import parse_rate

RATE_TOLERANCE = 0.03
RTT_TOLERANCE_MS = 1.0
LIMIT_TOLERANCE = 0.15
BASE_RTT_MS = 20.0  # rrul: four crossings of a 5 ms link
FIFOS = ("taildrop", "droptail")
PARALLEL_BELOW_BPS = 50e6  # --parallel applies to the cases below this rate


def run_calibration_bench(cases: list[tuple[str, str, int]], duration: str, settings: Settings, out_dir: Path,
                          say: Callable[[str], None] = print) -> dict[str, Any]:
    """Each case (rate, discipline, limit): its measurement, calibration and verdicts."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for rate, discipline, limit in cases:
        name = f"{rate}-{discipline}-{limit}"
        say(f"bench calibrate: {name}: measuring (rrul, {duration})")
        exp = load_preset("rrul", [f"bw={rate}", f"aqm={discipline}", f"maxq={limit}", f"duration={duration}"])
        measured = out_dir / name / "measured"
        outcome = run_experiment(exp, measured, progress=False)
        if outcome.interrupted:  # a stop signal that came while the run cleaned up: stop here too
            raise KeyboardInterrupt
        if not outcome.complete:
            raise MachineError(f"the measurement of {name} did not complete: {outcome.reason}")
        file = flent.export(load_run(measured), out_dir / name / "measured.flent.gz")
        t = time.monotonic()
        # Two emulations of 50 Mbit/s or more at once would share two cores: one at a time there.
        alone = replace(settings, parallel=1) if parse_rate(rate, "rate") >= PARALLEL_BELOW_BPS else settings
        doc = calibrate([read_measurement(file)], out_dir / name / "calibration", alone, say=say)
        wall = time.monotonic() - t
        fitted = doc["fitted"]
        truth_bps = parse_rate(rate, "rate")
        verdicts = {
            "rate_up": abs(fitted["rate_up_bps"] / truth_bps - 1) <= RATE_TOLERANCE,
            "rate_down": abs(fitted["rate_down_bps"] / truth_bps - 1) <= RATE_TOLERANCE,
            "base_rtt": abs(fitted["rtt_ms"] - BASE_RTT_MS) <= RTT_TOLERANCE_MS,
        }
        if discipline in FIFOS:
            verdicts["limit"] = fitted["limit_pkts"] is not None and abs(fitted["limit_pkts"] / limit - 1) <= LIMIT_TOLERANCE
        else:
            verdicts["discipline"] = fitted["discipline"] == discipline
        results.append({"case": name, "rate_bps": truth_bps, "discipline": discipline, "limit_pkts": limit,
                        "fitted": fitted, "error": doc["error"], "median_abs_relative_error":
                        doc["median_abs_relative_error"], "runs": doc["runs"], "wall_s": round(wall, 1),
                        "verdicts": verdicts})
    doc = {"kind": "bench-calibrate", "duration": duration, "settings": asdict(settings), "cases": results,
           "targets": [f"{'ok  ' if ok else 'MISS'} {r['case']}: {what}" for r in results
                       for what, ok in r["verdicts"].items()]}
    (out_dir / "bench-calibrate.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out_dir / "bench-calibrate.txt").write_text(render(doc) + "\n")
    return doc


def render(doc: dict[str, Any]) -> str:
    lines = [f"{'case':<24} {'fitted':<64} {'error':>6} {'median':>7} {'runs':>5} {'wall':>6}"]
    for r in doc["cases"]:
        f = r["fitted"]
        limit = f" limit {f['limit_pkts']}" if f["limit_pkts"] else ""
        text = (f"{f['discipline']}{limit} up {f['rate_up_bps'] / 1e6:.4g} down {f['rate_down_bps'] / 1e6:.4g} "
                f"Mbit/s RTT {f['rtt_ms']:.3g} ms")
        lines.append(f"{r['case']:<24} {text:<64} {r['error']:>6.3f} {100 * r['median_abs_relative_error']:>6.1f}% "
                     f"{r['runs']:>5} {r['wall_s']:>5.0f}s")
    return "\n".join(lines + [""] + doc["targets"])
