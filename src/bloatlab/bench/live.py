"""`bloatlab bench live`: what following a run costs it. The same cs244 run (same seed), alone
and followed by `bloatlab view` with a page's stream open, alternately, REPEAT times each:

    fidelity   goodput, RTT median and p95, the queue's mean, the datapath's lateness p99: the
               followed runs' mean against the alone runs' (the target: within the alone runs'
               own spread, or SPREAD_FLOOR of their mean, LATENESS_FLOOR_US for the lateness)
    cost       the view's CPU over the run (its process's user and system time / the run's wall
               time), and the update latency: each ping reply's stamp to the update that carries
               it reaching the stream's reader (a page adds its drawing, a few ms)
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from bloatlab.bench.link import cpu_seconds
from bloatlab.errors import MachineError
from bloatlab.live.address import DEFAULT_LISTEN
from bloatlab.live.child import ViewProcess
from bloatlab.lab.run import run_experiment
from bloatlab.results.reader import read_summary
from bloatlab.specs.experiment import load_preset

SPREAD_FLOOR = 0.03  # the alone runs' range is widened by at least this share of their median
# ... and the lateness's by this many us: its p99 follows the machine's stalls from run to run (bench
# machine judges it to the same 20 us beyond the machine's own)
LATENESS_FLOOR_US = 20.0
FIGURES = ("goodput_mbps", "rtt_median_ms", "rtt_p95_ms", "queue_mean_pkts", "lateness_p99_us")


class _Reader:
    """A page's side of the stream, without the drawing: every update read, each ping reply's
    latency from its stamp to the update's arrival."""

    def __init__(self, url: str):
        self.url = url
        self.latencies_ms: list[float] = []
        self.updates = 0
        self.t0_real: float | None = None
        self.thread = threading.Thread(target=self._read, daemon=True, name="bloatlab-bench-reader")
        self.thread.start()

    def _read(self) -> None:
        where = urlsplit(self.url)
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
        try:
            conn.request("GET", "/events")
            response = conn.getresponse()
            while line := response.readline():
                if not line.startswith(b"data: "):
                    continue
                arrived = time.time()
                doc = json.loads(line[6:])
                self.updates += 1
                if (run := doc.get("run")) and run.get("t0_realtime_s"):
                    self.t0_real = run["t0_realtime_s"]
                if self.t0_real is not None:
                    for points in ((doc.get("series") or {}).get("rtt") or {}).values():
                        self.latencies_ms += [1e3 * (arrived - (self.t0_real + t)) for t, _ in points]
        except (OSError, http.client.HTTPException, ValueError):
            return  # the view stopped
        finally:
            conn.close()


def _figures(run_dir: Path) -> dict[str, float | None]:
    summary = read_summary(run_dir)
    if summary is None:
        raise MachineError(f"{run_dir} has no summary: the run failed")
    bulk = (summary.flows or {}).get("bulk")
    queue = (summary.queue or {}).get("s0->h2")
    late = summary.lateness
    return {"goodput_mbps": getattr(bulk, "goodput_mbps", None), "rtt_median_ms": summary.rtt_ms.median,
            "rtt_p95_ms": summary.rtt_ms.p95, "queue_mean_pkts": getattr(queue, "mean_pkts", None),
            "lateness_p99_us": getattr(late, "p99_us", None)}


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def run_live_bench(duration: str, repeat: int, out_dir: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    exp = load_preset("cs244", [f"duration={duration}"])
    runs: dict[str, list[dict[str, Any]]] = {"alone": [], "followed": []}
    for i in range(1, repeat + 1):
        for mode in ("alone", "followed"):  # alternately: the machine's drift falls on both alike
            run_dir = out_dir / f"{mode}-{i}"
            say(f"bench live: {mode} {i} of {repeat} ({duration})")
            live = reader = None
            if mode == "followed":
                live = ViewProcess(run_dir, DEFAULT_LISTEN, allow_remote=False)
                reader = _Reader(live.url)
                cpu0 = cpu_seconds(live.child.pid)
            started = time.monotonic()
            try:
                outcome = run_experiment(exp, run_dir, progress=False)
            finally:
                wall = time.monotonic() - started
                cpu = cpu_seconds(live.child.pid) - cpu0 if live is not None else None
                if live is not None:
                    live.close()
            if outcome.interrupted:
                raise KeyboardInterrupt
            if not outcome.complete:
                raise MachineError(f"the {mode} run {i} did not complete: {outcome.reason}")
            entry: dict[str, Any] = {"dir": str(run_dir), **_figures(run_dir)}
            if reader is not None:
                entry.update(view_cpu_percent=round(100 * cpu / wall, 2), updates=reader.updates,
                             latency_ms={"n": len(reader.latencies_ms),
                                         "p50": _percentile(reader.latencies_ms, 50),
                                         "p95": _percentile(reader.latencies_ms, 95),
                                         "max": max(reader.latencies_ms, default=None)})
            runs[mode].append(entry)
    verdicts = judge(runs)
    doc = {"kind": "bench-live", "duration": duration, "repeat": repeat, "runs": runs, "verdicts": verdicts,
           "targets": [f"{'ok  ' if ok else 'MISS'} {figure}" for figure, ok in verdicts.items()]}
    (out_dir / "bench-live.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def judge(runs: dict[str, list[dict[str, Any]]]) -> dict[str, bool]:
    """Per figure: does following shift it? The followed runs' mean against the alone runs', within
    the alone runs' own range (their spread), or SPREAD_FLOOR of their mean (LATENESS_FLOOR_US for
    the lateness), whichever is wider: a shift smaller than that is not told from the next run's."""
    verdicts = {}
    for figure in FIGURES:
        alone = [r[figure] for r in runs["alone"] if r.get(figure) is not None]
        followed = [r[figure] for r in runs["followed"] if r.get(figure) is not None]
        if not alone or not followed:
            verdicts[figure] = False
            continue
        mean = sum(alone) / len(alone)
        slack = max(max(alone) - min(alone), SPREAD_FLOOR * abs(mean),
                    LATENESS_FLOOR_US if figure == "lateness_p99_us" else 0.0)
        verdicts[figure] = abs(sum(followed) / len(followed) - mean) <= slack
    return verdicts


def render(doc: dict[str, Any]) -> str:
    lines = [f"{'run':<12} {'goodput':>8} {'RTT p50':>8} {'RTT p95':>8} {'queue':>6} {'late p99':>9} "
             f"{'view CPU':>9} {'latency p50/p95/max (ms)':>26}"]
    for mode, runs in doc["runs"].items():
        for i, r in enumerate(runs, 1):
            def show(key: str, spec: str) -> str:
                return "-" if r.get(key) is None else format(r[key], spec)
            latency = r.get("latency_ms")
            lat = "-" if not latency or latency["p50"] is None else \
                f"{latency['p50']:.0f}/{latency['p95']:.0f}/{latency['max']:.0f} (n={latency['n']})"
            cpu = f"{r['view_cpu_percent']:.2f}%" if "view_cpu_percent" in r else "-"
            lines.append(f"{mode + ' ' + str(i):<12} {show('goodput_mbps', '.2f'):>8} {show('rtt_median_ms', '.1f'):>8} "
                         f"{show('rtt_p95_ms', '.1f'):>8} {show('queue_mean_pkts', '.1f'):>6} "
                         f"{show('lateness_p99_us', '.0f'):>9} {cpu:>9} {lat:>26}")
    return "\n".join(lines + ["", *doc["targets"]])
